"""Sequence parallelism on real workers (lesson 12; Korthikanti et al. 2022): equal to one
process; the same activation bytes as plain tensor parallelism, plus the allreduce of the
gradients of the parameters used on sequence shards (counted, and by the formula; one call
for all of them); less activation memory per rank — exactly the LayerNorm regions' n-fold
cut."""
import pytest
import torch

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
        assert s["calls"]["backward"] == {"all_gather": 5, "reduce_scatter": 5,
                                          "all_reduce": 1}    # the gradients' in one buffer
        total = sum(s["forward"].values()) + sum(s["backward"].values())
        assert total - s["backward"]["all_reduce"] == \
            sum(t["forward"].values()) + sum(t["backward"].values())
        saved = t["activations"] - s["activations"]          # the LayerNorm regions, n-fold
        assert saved == S.norm_bytes(CFG, 3, n) - S.norm_bytes(CFG, 3, n, sequence=True) > 0
    for rank, (s, t) in enumerate(zip(sp, tp)):               # every tensor accounted for
        assert t["activations"] == S.activation_bytes(CFG, 3, n, rank=rank)
        assert s["activations"] == S.activation_bytes(CFG, 3, n, sequence=True, rank=rank)


@pytest.mark.parametrize("n", [2, 4])
def test_regathering_the_shards_in_backward_keeps_less_and_sends_one_more_gather(clusters, n):
    runs = clusters[n].run(T.tp_step, CFG, 3, seed=n, sequence=True, regather=True)
    assert T.differences(runs, T.one_process(CFG, 3, seed=n)) == []
    want = T.tp_bytes(CFG, 3, n, sequence=True, regather=True)
    plain = T.tp_bytes(CFG, 3, n, sequence=True)
    act = 3 * 16 * 32 * 4
    assert want["backward"]["all_gather"] - plain["backward"]["all_gather"] == \
        2 * 2 * (n - 1) * act / n                         # one per column-parallel layer
    for rank, run in enumerate(runs):
        assert {p: run[p] for p in ("forward", "backward")} == want
        assert run["activations"] == S.activation_bytes(CFG, 3, n, sequence=True,
                                                        regather=True, rank=rank)
    assert S.activation_bytes(CFG, 3, n, sequence=True) - runs[0]["activations"] == \
        2 * 2 * (n - 1) * act // n                        # the two whole inputs per block


def test_dropout_masks_are_accounted_for_and_sharded(clusters):
    cfg = GPTConfig(vocab=41, seq=16, hidden=32, heads=4, layers=2, dropout=0.1)
    for sequence, regather, dtype in ((False, False, torch.float32), (True, False, torch.float32),
                                      (True, True, torch.bfloat16)):
        runs = clusters[2].run(T.tp_step, cfg, 3, seed=1, sequence=sequence, dtype=dtype,
                               regather=regather)
        for rank, run in enumerate(runs):
            assert run["activations"] == S.activation_bytes(
                cfg, 3, 2, dtype, sequence=sequence, regather=regather, rank=rank)


def test_the_sequence_must_divide_by_the_ranks():
    assert S.sequence_slice(16, 3, 4) == slice(12, 16)
    with pytest.raises(ValueError, match="s must divide by n"):
        S.sequence_slice(15, 0, 4)
    from ddl_lab.ml.gpt import build_gpt
    with pytest.raises(ValueError, match="needs sequence=True"):
        T.tp_block(build_gpt(CFG).blocks[0], 0, 2, regather=True)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_per_layer_accounting_is_korthikanti_s_at_16_bits(t):
    cfgs = [GPTConfig(vocab=41, seq=16, hidden=32, heads=4, layers=L, dropout=0.1)
            for L in (1, 2)]
    s, b, h, a = 16, 3, 32, 4
    stats = 2 * 2 * 2 * s * b                        # two LayerNorms' mean and 1/σ, 2 bytes
    for sequence, regather, want in (
            (False, False, s * b * h * (10 + 24 / t + 5 * a * s / (h * t)) + stats),
            (True, True, s * b * h / t * (34 + 5 * a * s / h) + stats / t)):
        per_layer = [S.activation_bytes(c, b, t, torch.bfloat16, sequence, regather)
                     for c in cfgs]
        assert per_layer[1] - per_layer[0] == want
