"""The when-it-pays calculator (lesson 10): the step-time model, its fit from measurements,
the case of Jamshidi's lecture, and measuring on real workers."""
import numpy as np
import pytest

from ddl_lab import shared_cluster
from ddl_lab.scaling_out import calculator as K

FIT = K.Fit(t0=1e-4, per_example=2e-5, alpha=1e-4, beta=1e-9, cores=2, params=10_000)


def test_one_worker_only_computes_and_n_workers_pay_a_ring():
    assert K.step_time(1, 100, FIT) == pytest.approx(
        {"compute": 1e-4 + 2e-3, "communicate": 0.0, "total": 1e-4 + 2e-3})
    s = K.step_time(4, 100, FIT)
    assert s["compute"] == pytest.approx(1e-4 + 2e-5 * 25 * 2)     # 4 workers on 2 cores
    assert s["communicate"] == pytest.approx(6e-4 + 1.5 * 40_000 * 1e-9)


def test_the_fit_recovers_the_constants_it_was_measured_with():
    batches, sizes, world = [8, 32, 128, 512], [1 << 12, 1 << 16, 1 << 20], 4
    m = {"batches": batches, "compute": [FIT.t0 + FIT.per_example * b for b in batches],
         "sizes": sizes, "world": world, "cores": 2, "params": 10_000,
         "allreduce": [2 * (world - 1) * FIT.alpha + 2 * (world - 1) / world * s * FIT.beta
                       for s in sizes]}
    got = K.fit(m)
    for name in ("t0", "per_example", "alpha", "beta"):
        assert getattr(got, name) == pytest.approx(getattr(FIT, name), rel=1e-6), name


def test_seed_case_faster_links_pay_more_and_nothing_beats_perfect():
    rows = K.seed_case(FIT)
    by = {(r["link_gbit"], r["workers"]): r for r in rows}
    assert all(r["speedup"] <= r["workers"] * (1 + 1e-9) for r in rows)
    assert by[(100, 512)]["speedup"] > by[(10, 512)]["speedup"] > by[(1, 512)]["speedup"]
    assert by[(1, 1)]["epoch_days"] * 86400 == pytest.approx(
        K.step_time(1, 256, FIT.model(K.SEED_PARAMS))["total"] * K.SEED_EXAMPLES / 256)


def test_measure_on_workers_has_every_ingredient():
    m = shared_cluster(3).run(K.measure, "digits-mlp", (8, 32), (1 << 10, 1 << 14), 48,
                              (1, 2, 3), 2)[0]
    assert m["ns"] == [1, 2, 3] and len(m["steps"]) == 3 and m["world"] == 3
    assert all(t > 0 for t in m["compute"] + m["allreduce"] + m["steps"])
    f = K.fit(m)
    assert f.params == 8970 and f.per_example > 0 and np.isfinite(f.beta)
