"""Sequence parallelism on real workers (lesson 12; Korthikanti et al. 2022): equal to one
process; the same activation bytes as plain tensor parallelism, plus the allreduce of the
gradients of the parameters used on sequence shards (counted, and by the formula); less
activation memory per rank — exactly the LayerNorm regions' n-fold cut."""
import pytest

from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.runtime import shared_cluster
from ddl_lab.transformers import sequence as S
from ddl_lab.transformers import tensor as T

CFG = GPTConfig(vocab=41, seq=16, hidden=32, heads=4, layers=2)


@pytest.fixture(scope="module")
def clusters():
    return {n: shared_cluster(n) for n in (2, 4)}


@pytest.mark.parametrize("n", [2, 4])
def test_sequence_parallel_equals_one_process_same_bytes_less_memory(clusters, n):
    sp = clusters[n].run(T.tp_step, CFG, 3, seed=n, sequence=True)
    tp = clusters[n].run(T.tp_step, CFG, 3, seed=n)
    assert T.differences(sp, T.one_process(CFG, 3, seed=n)) == []
    want = T.tp_bytes(CFG, 3, n, sequence=True)
    act = 3 * 16 * 32 * 4
    assert {k: want["backward"][k] for k in ("reduce_scatter", "all_gather")} == {
        "reduce_scatter": 5 * (n - 1) / n * act, "all_gather": 5 * (n - 1) * act / n}
    params = (6 * 2 + 2 + 16) * 32 * 4      # LayerNorms, row biases, positions: by sequence
    assert want["backward"]["all_reduce"] == 2 * (n - 1) / n * params
    for s, t in zip(sp, tp):
        assert {p: s[p] for p in ("forward", "backward")} == want
        total = sum(s["forward"].values()) + sum(s["backward"].values())
        assert total - s["backward"]["all_reduce"] == \
            sum(t["forward"].values()) + sum(t["backward"].values())
        saved = t["activations"] - s["activations"]          # the LayerNorm regions, n-fold
        assert saved == S.norm_bytes(CFG, 3, n) - S.norm_bytes(CFG, 3, n, sequence=True) > 0


def test_the_sequence_must_divide_by_the_ranks():
    assert S.sequence_slice(16, 3, 4) == slice(12, 16)
    with pytest.raises(ValueError, match="s must divide by n"):
        S.sequence_slice(15, 0, 4)
