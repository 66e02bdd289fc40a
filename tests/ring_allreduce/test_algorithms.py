"""Lesson 06 §7: halving/doubling, the pipelined tree and the two-level allreduce equal
dist.all_reduce on 1–5 ranks (6–8: tests/reliability/test_scale.py, on its 8-rank
cluster), and their recorded rounds and bytes are the model's."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab.ring_allreduce import algorithms as A
from ddl_lab.ring_allreduce import cost
from ddl_lab.ring_allreduce import engine as C
from ddl_lab.ring_allreduce import winners as W
from ddl_lab.runtime import shared_cluster
from ddl_lab.runtime.worlds import MAX_WORLD, in_worlds

VARIANTS = [("halving_doubling", {}), ("pipelined_tree", {}), ("pipelined_tree", {"chunks": 3}),
            ("two_level", {}), ("two_level", {"per_host": 3})]


def sums() -> list:
    """Worker, on an n-rank world: every variant × length × dtype against dist.all_reduce."""
    n, rank = dist.get_world_size(), dist.get_rank()
    bad = []
    for name, opts in VARIANTS:
        for length in (0, 1, n - 1, 13, 1001):
            for dtype in (torch.float32, torch.float64):
                g = torch.Generator().manual_seed(17 * rank + length)
                t = (torch.randint(-40, 40, (length,), generator=g) / 4).to(dtype)
                want = t.clone()
                dist.all_reduce(want)
                C.allreduce(t, name, **opts)
                if not torch.equal(t, want):
                    bad.append((n, name, opts, length, str(dtype)))
    return bad


def _counted(name: str, length: int, opts: dict) -> C.Recorder:
    rec = C.Recorder()
    C.allreduce(torch.ones(length, dtype=torch.float64), name, record=rec, **opts)
    return rec


@pytest.fixture(scope="module")
def cluster5():
    return shared_cluster(MAX_WORLD)          # the checks' warm cluster


def test_equal_to_all_reduce_on_1_to_5_ranks(cluster5):
    per_rank = cluster5.run(in_worlds, sums, [(n, ()) for n in range(1, 6)])
    assert [b for case in per_rank[0] for b in case] == []


@pytest.mark.parametrize("name,opts", [("ring", {}), ("halving_doubling", {}),
                                       ("pipelined_tree", {"chunks": 4}),
                                       ("two_level", {"per_host": 2})])
def test_rounds_and_bytes_are_the_models(cluster5, name, opts):
    length = 840                                     # divisible by 1…8
    sizes = [n for n in range(1, 6) if name != "two_level" or n % 2 == 0]
    per_rank = cluster5.run(in_worlds, _counted, [(n, (name, length, opts)) for n in sizes])
    for k, n in enumerate(sizes):
        recs = [per_rank[r][k] for r in range(n)]
        assert A.counts(recs) == cost.model_counts(name, n, 8 * length, **opts), (name, n)


def test_halving_doubling_talks_to_rank_xor_2k(cluster5):
    per_rank = cluster5.run(in_worlds, _counted, [(4, ("halving_doubling", 64, {})),
                                                  (5, ("halving_doubling", 64, {}))])
    for rank in range(4):
        peers = [to for s in per_rank[rank][0].steps for _, to, _ in s.sent]
        assert peers == [rank ^ 1, rank ^ 2, rank ^ 2, rank ^ 1]
    folded = [[to for s in per_rank[rank][1].steps for _, to, _ in s.sent] for rank in range(5)]
    assert folded[0] == [1] and folded[1] == [2, 3, 3, 2, 0]    # 5 = 4 + 1: ranks 0, 1 fold


def test_models_agree_with_their_formulas():
    a, b = 1e-5, 1e-9
    assert cost.cost_model("halving_doubling", 8, 1e6, a, b) == pytest.approx(
        6 * a + 2 * 7 / 8 * 1e6 * b)
    assert cost.cost_model("halving_doubling", 6, 1e6, a, b) == pytest.approx(
        4 * a + 2 * 3 / 4 * 1e6 * b + 2 * (a + 1e6 * b))
    assert cost.cost_model("pipelined_tree", 7, 1e6, a, b, chunks=5) == pytest.approx(
        2 * (2 + 4) * 2 * (a + 1e6 / 5 * b))
    assert cost.cost_model("two_level", 8, 1e6, a, b, inter=(a, 10 * b)) == pytest.approx(
        2 * (a + 5e5 * b) + 2 * 3 * a + 2 * 3 / 4 * 5e5 * 10 * b)
    m = cost.best_chunks(7, 1e6, a, b)
    assert cost.cost_model("pipelined_tree", 7, 1e6, a, b) == pytest.approx(
        cost.cost_model("pipelined_tree", 7, 1e6, a, b, chunks=m))
    assert 1 < m < 256


def test_trace_steps_through_halving_doubling(cluster5):
    per_rank = cluster5.run(in_worlds, A.trace, [(4, ("halving_doubling",))])
    recs = [per_rank[r][0] for r in range(4)]
    states = C.ring_states(recs)
    assert states.shape == (5, 4, 4)
    assert (states[-1] == 15).all()                  # everyone holds everything at the end
    done = [[int(m == 15) for m in states[2, r]] for r in range(4)]
    assert all(sum(d) == 1 for d in done)            # after reduce-scatter: one block each


def _large(name: str) -> bool:
    t = torch.arange(600_001, dtype=torch.float64) + dist.get_rank()     # 4.8 MB: in pieces
    want = t.clone()
    dist.all_reduce(want)
    C.allreduce(t, name)
    return torch.equal(t, want)


def test_large_tensors_go_in_pieces_and_still_sum_exactly(cluster5):
    per_rank = cluster5.run(in_worlds, _large, [(n, (a,)) for n in (3, 4)
                                                for a in ("halving_doubling", "two_level")])
    assert per_rank[0] == [True] * 4 and all(v in (True, None) for r in per_rank for v in r)


def test_agreement_counts_ties_on_the_clock_as_agreeing():
    model = {(2, 1): {"tree": 1.0, "ring": 2.0, "halving_doubling": 3.0, "pipelined_tree": 4.0},
             (4, 1): {"tree": 1.0, "ring": 1.05, "halving_doubling": 3.0, "pipelined_tree": 4.0}}
    clock = {(2, 1): {"tree": 1.05, "ring": 1.0, "halving_doubling": 3.0, "pipelined_tree": 4.0},
             (4, 1): {"tree": 2.0, "ring": 1.0, "halving_doubling": 3.0, "pipelined_tree": 4.0}}
    share, rows = W.agreement(model, clock)
    assert share == 0.5 and [(r["n"], r["model_tie"]) for r in rows] == [(4, True)]
    assert cost.shared_cores("tree", 4, 1e6, 1e-5, 1e-9, cores=2) == pytest.approx(
        max(cost.cost_model("tree", 4, 1e6, 1e-5, 1e-9), (6 * 1e-5 + 6e6 * 1e-9) / 2))
