"""The pipelined chain broadcast (lesson 04, exercise 04 task 6): every rank gets the root's
array, one message per piece per link, and the α–β time of its messages is the pipeline's
(n − 2 + k)·(α + b·β)."""
import numpy as np
import pytest

from ddl_lab.message_passing.comm import comm_trace
from ddl_lab.message_passing.pipeline import chain_bcast, chain_time
from ddl_lab.message_passing.trace import Message


def _bcast(comm, numel, pieces, root):
    data = np.arange(numel, dtype=np.float64) if comm.rank == root else None
    return chain_bcast(comm, data, pieces, root)


@pytest.mark.parametrize("n, numel, pieces, root", [(4, 1000, 7, 0), (3, 10, 10, 2), (4, 5, 1, 1)])
def test_every_rank_gets_the_array_one_message_per_piece_and_link(n, numel, pieces, root):
    trace = comm_trace(_bcast, n, numel, pieces, root)
    assert all(np.array_equal(r, np.arange(numel)) for r in trace.results)
    assert len(trace.messages) == (n - 1) * pieces
    assert {(m.src, m.dst) for m in trace.messages} == {
        ((root + h) % n, (root + h + 1) % n) for h in range(n - 1)}


def test_the_time_of_equal_pieces_is_the_pipelines():
    n, k, b, alpha, beta = 5, 6, 1000, 1e-4, 1e-9
    messages = [Message(h, h + 1, 0, "send", b, h + j / 10, 0.0)
                for h in range(n - 1) for j in range(k)]
    assert chain_time(messages, alpha, beta) == pytest.approx((n - 2 + k) * (alpha + b * beta))


@pytest.mark.parametrize("pieces", [0, 2.5, True])
def test_pieces_must_be_a_whole_number(pieces):
    with pytest.raises(ValueError, match="whole number"):
        chain_bcast(None, np.zeros(3), pieces)
