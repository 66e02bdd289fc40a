"""Expert parallelism on real workers (lesson 14, experts): with an unbalanced router — uneven
all-to-all splits, a rank that receives nothing, pairs dropped at capacity — the forward and
the backward on 2 and 4 ranks equal the one-process MoE (float32 and float64, top-1 and
top-2), and every rank sends the bytes the formula says."""
import pytest
import torch

from ddl_lab.experts import parallel as P
from ddl_lab.experts.moe import MoEConfig
from ddl_lab.runtime import shared_cluster

TOKENS = 12                                               # per rank
TOLERANCES = {torch.float32: dict(rtol=1e-4, atol=1e-5),
              torch.float64: dict(rtol=1e-10, atol=1e-12)}


def _cfg(k: int) -> MoEConfig:
    return MoEConfig(hidden=8, ffn=16, experts=4, k=k, capacity_factor=1.5, aux_weight=0.1)


@pytest.fixture(scope="module")
def clusters():
    return {n: shared_cluster(n) for n in (2, 4)}


@pytest.mark.parametrize("n", [2, 4])
def test_expert_parallel_step_equals_one_process_and_sends_what_the_formula_says(clusters, n):
    fewest = []
    for k in (1, 2):
        for dtype, tol in TOLERANCES.items():
            runs = clusters[n].run(P.ep_step, _cfg(k), TOKENS, seed=2, dtype=dtype)
            ref = P.one_process(_cfg(k), n, TOKENS, seed=2, dtype=dtype)
            where = f"n={n}, k={k}, {dtype}"
            assert P.differences(P.assemble(runs), ref, **tol) == [], where
            for run, want in zip(runs, P.ep_bytes(_cfg(k), ref["splits"], dtype)):
                assert run["bytes"] == want, where
            received = ref["received"]
            assert max(received) - min(received) >= 5, where           # far from even
            assert all(len(set(row)) > 1 for row in ref["splits"]), where  # uneven splits
            assert sum(ref["dropped"]) > 0, where                      # capacity really cut
            assert runs[0]["grads"]["fc.weight"].shape == (4 // n, 8, 16)
            fewest.append(min(received))
    if n == 4:
        assert 0 in fewest                  # a rank with nothing to do still takes part


def test_the_bytes_formula_by_hand():
    """Only pairs for another rank's experts leave a rank: rank 0 keeps 5 of its 8 pairs,
    rank 1 sends all 6 of its to rank 0; the counts (E/n int64 to each rank) are even."""
    cfg, f32 = _cfg(1), 4 * 8                     # one row: 8 numbers of 4 bytes
    got = P.ep_bytes(cfg, [[5, 3], [6, 0]], torch.float32)
    assert got[0] == {"forward": {"splits": 8 * 2, "dispatch": 3 * f32, "combine": 6 * f32},
                      "backward": {"combine": 3 * f32, "dispatch": 6 * f32}}
    assert got[1] == {"forward": {"splits": 8 * 2, "dispatch": 6 * f32, "combine": 3 * f32},
                      "backward": {"combine": 6 * f32, "dispatch": 3 * f32}}


def test_experts_must_divide_by_the_ranks():
    cfg = MoEConfig(hidden=8, experts=6)
    assert P.local_experts(cfg, 1, 3) == range(2, 4)
    with pytest.raises(ValueError, match=r"experts \(6\) must divide by n \(4\)"):
        P.local_experts(cfg, 0, 4)
    with pytest.raises(ValueError, match=r"experts \(6\) must divide by n \(4\)"):
        P.one_process(cfg, 4, TOKENS)


def test_each_phase_is_timed_and_the_favourite_expert_s_rank_receives_most(clusters):
    cfg = MoEConfig(hidden=8, ffn=16, experts=4, k=1, capacity_factor=None)
    runs = clusters[2].run(P.ep_wait, cfg, 16, 2.0, repeats=1)
    assert all(list(r["seconds"]) == list(P.PHASES) for r in runs)
    # each phase timed, with no bound on it: a busy machine is slow
    assert all(s >= 0 for r in runs for s in r["seconds"].values())
    received = [r["received"] for r in runs]
    assert sum(received) == 2 * 16 and received[0] > received[1]      # no capacity: none dropped
