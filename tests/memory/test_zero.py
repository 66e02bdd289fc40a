"""ZeRO-1/2/3 by hand on real workers (lesson 10): each equals DDP with the same optimizer,
keeps what ZeRO's formulas say and sends 2Ψ or 3Ψ; FSDP2 and ZeroRedundancyOptimizer beside
them; the memory of every scheme of lessons 05–10 (moved from lesson 09)."""
import numpy as np
import pytest

from ddl_lab.memory import anatomy as A
from ddl_lab.memory import library as L
from ddl_lab.memory import plots
from ddl_lab.memory import schemes as M
from ddl_lab.memory import zero as Z
from ddl_lab.runtime import shared_cluster

N = 5                         # Ψ = 11,530 (hidden 48, depth 3) is not a multiple of 5


@pytest.fixture(scope="module")
def cluster():
    return shared_cluster(N)


@pytest.fixture(scope="module")
def ddp(cluster):
    return cluster.run(Z.ddp_run, hidden=48, depth=3, batch=25, steps=3)


@pytest.mark.parametrize("stage", Z.STAGES)
def test_every_stage_equals_ddp_and_its_formulas(cluster, ddp, stage):
    runs = cluster.run(Z.zero_run, stage, "fp32", False, 48, 3, 25, 3)
    Psi = runs[0].numel
    assert Psi % N and Psi == ddp[0].numel
    for r, d in zip(runs, ddp):
        assert np.abs(r.params - d.params).max() < 1e-4           # float32 sums reordered
        assert r.losses == pytest.approx(d.losses, rel=1e-5)      # this rank's examples
    want = A.per_rank(Psi, N, stage)
    for part in ("params", "grads", "optimizer"):
        got = sum(getattr(r.memory, part) for r in runs) / N     # chunks differ by one
        assert got == pytest.approx(want[part], rel=0.01), part
    sent = np.mean([r.sent for r in runs]) / np.mean([r.sent for r in ddp])
    assert sent == pytest.approx(1.5 if stage == 3 else 1.0, rel=0.01)


@pytest.mark.parametrize("stage", [1, 3])
def test_gloos_collectives_give_the_ring_by_hands_results(cluster, ddp, stage):
    ring = cluster.run(Z.zero_run, stage, "fp32", False, 48, 3, 25, 3)
    builtin = cluster.run(Z.zero_run, stage, "fp32", False, 48, 3, 25, 3, builtin=True)
    for a, b in zip(ring, builtin):
        assert np.abs(a.params - b.params).max() < 1e-5
        assert a.memory.total == b.memory.total
        assert b.sent == pytest.approx(a.sent, rel=0.01)         # padding: a few values more


def test_recomputation_and_bf16_change_activations_and_bytes_not_results(cluster, ddp):
    plain = cluster.run(Z.zero_run, 3, "fp32", False, 48, 3, 25, 3)
    again = cluster.run(Z.zero_run, 3, "fp32", True, 48, 3, 25, 3)
    low = cluster.run(Z.zero_run, 2, "bf16", False, 48, 3, 25, 3)
    assert np.array_equal(plain[0].params, again[0].params)      # the same numbers, recomputed
    assert again[0].memory.activations < plain[0].memory.activations
    assert again[0].sent == pytest.approx(plain[0].sent * 4 / 3, rel=0.01)   # a 4th pass
    assert low[0].memory.params == pytest.approx(A.per_rank(low[0].numel, N, 2, "adam",
                                                            "bf16")["params"], rel=0.01)
    assert low[0].memory.activations == plain[0].memory.activations // 2
    assert abs(low[0].losses[-1] - ddp[0].losses[-1]) < 0.01 * ddp[0].losses[-1]


def test_the_library_beside_the_hand_written(cluster, ddp):
    fsdp = cluster.run(L.library_run, "FSDP2", 48, 3, 25, 3)
    zro = cluster.run(L.library_run, "ZeroRedundancyOptimizer", 48, 3, 25, 3)
    ddp_sent = np.mean([r.sent for r in ddp])
    assert max(np.abs(r.params - ddp[0].params).max() for r in fsdp + zro) < 1e-4
    assert 1.5 <= np.mean([r.sent for r in fsdp]) / ddp_sent < 1.7     # padded shards
    assert np.mean([r.sent for r in zro]) / ddp_sent > 1.3              # allreduce + broadcasts
    assert sum(r.memory.optimizer for r in zro) == pytest.approx(ddp[0].memory.optimizer,
                                                                 rel=0.01)
    with pytest.raises(ValueError, match="kind must be one of"):
        L.library_run("DeepSpeed")


def test_memory_per_scheme_is_measured(cluster):
    runs = cluster.run(M.memory_run, 80, 5, 40, 8)
    table = M.memory_table(runs)
    assert list(table) == M.SCHEMES
    one = table["one process"][0]
    assert len(table["one process"]) == 1 and len(table["DDP"]) == 5
    assert all(m.params == one.params and m.optimizer == one.optimizer for m in table["DDP"])
    assert one.optimizer >= 2 * one.params                     # Adam: two moments
    zero = table["ZeRO-1"]
    assert all(m.params == one.params for m in zero)
    assert sum(m.optimizer for m in zero) == pytest.approx(one.optimizer, rel=0.01)
    for scheme in ("FSDP", "tensor parallel", "pipeline GPipe"):
        assert sum(m.params for m in table[scheme]) == pytest.approx(one.params, rel=0.05)
        assert max(m.params for m in table[scheme]) < one.params / 2
    assert max(m.activations for m in table["DDP"]) < one.activations
    assert max(m.activations for m in table["pipeline 1F1B"]) < max(
        m.activations for m in table["pipeline GPipe"])
    plots.plot_memory(table)
    plots.plot_stacked(table["DDP"], A.per_rank(one.params // 4, 5, 0))
