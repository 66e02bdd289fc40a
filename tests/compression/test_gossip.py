"""Gossip on a ring (lesson 08): the mixing matrix and its rate (D-PSGD on real workers is
tested beside the gossip check, on the same warm cluster)."""
import numpy as np
import pytest

from ddl_lab.compression.gossip import mixing_matrix, neighbours, second_eigenvalue


@pytest.mark.parametrize("n", range(2, 9))
def test_mixing_matrix_is_doubly_stochastic_with_the_ring_rate(n):
    W = mixing_matrix(n)
    assert np.allclose(W.sum(0), 1) and np.allclose(W.sum(1), 1) and np.allclose(W, W.T)
    eig = sorted(abs(np.linalg.eigvalsh(W)), reverse=True)
    assert eig[0] == pytest.approx(1.0) and eig[1] == pytest.approx(second_eigenvalue(n), abs=1e-12)
    assert all(len(neighbours(r, n)) == min(2, n - 1) for r in range(n))
