"""The when-it-pays calculator (lesson 11): the step-time model with and without overlap, its
fit from measurements, its printed assumptions, the COST baseline, the case of Jamshidi's
lecture, and measuring on real workers."""
from dataclasses import replace

import numpy as np
import pytest

from ddl_lab import shared_cluster
from ddl_lab.check import scaling_out as C
from ddl_lab.ring_allreduce.cost import sent_bytes
from ddl_lab.scaling_out import calculator as K

FIT = K.Fit(t0=1e-4, per_example=2e-5, alpha=1e-4, beta=1e-9, cores=2, params=10_000)


def additive(n, batch, f):
    """The calculator before overlap: compute, then the ring."""
    compute = f.t0 + f.per_example * batch / n * max(1.0, n / f.cores)
    comm = 0.0 if n == 1 else 2 * (n - 1) * f.alpha + sent_bytes("all_reduce", n,
                                                                   4.0 * f.params) * f.beta
    return compute + comm


def pipeline(n, batch, f):
    """Lesson 06's bucket pipeline, event by event: k equal buckets, bucket j ready at
    j/k of backward, each allreduce starting when its bucket is ready and the last is done."""
    work = f.per_example * batch / n * max(1.0, n / f.cores)
    back, k = f.backward_share * work, K.buckets(f)
    S = f.bytes_per_param * f.params
    done = ready = 0.0
    for _ in range(k):
        ready += back / k
        done = max(done, ready) + 2 * (n - 1) * f.alpha + sent_bytes("all_reduce", n, S / k) * f.beta
    return f.t0 + work - back + done


def cases(count=200, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        f = K.Fit(t0=float(10 ** rng.uniform(-5, -2)), per_example=float(10 ** rng.uniform(-7, -2)),
                  alpha=float(10 ** rng.uniform(-7, -3)), beta=float(10 ** -rng.uniform(8, 11)),
                  cores=int(rng.integers(1, 64)), params=int(10 ** rng.uniform(3, 9)),
                  bucket_bytes=float(2 ** rng.integers(16, 27)))
        yield f, int(rng.integers(1, 300)), int(2 ** rng.integers(3, 14))


def test_one_worker_only_computes_and_n_workers_pay_a_ring():
    assert K.step_time(1, 100, FIT) == pytest.approx(
        {"compute": 1e-4 + 2e-3, "communicate": 0.0, "exposed": 0.0, "total": 1e-4 + 2e-3})
    s = K.step_time(4, 100, FIT)
    assert s["compute"] == pytest.approx(1e-4 + 2e-5 * 25 * 2)     # 4 workers on 2 cores
    assert s["communicate"] == pytest.approx(6e-4 + 1.5 * 40_000 * 1e-9)
    assert s["exposed"] == pytest.approx(s["communicate"])         # φ = 0: nothing hidden


def test_overlap_zero_is_the_additive_model_exactly_and_the_exercises_reference():
    for f, n, batch in cases():
        assert K.step_time(n, batch, f)["total"] == additive(n, batch, f)
        c = {"params": f.params, "batch": batch, "per_example": f.per_example,
             "alpha": f.alpha, "beta": f.beta}
        g = replace(f, t0=0.0, cores=n)             # the exercise: no t₀, a core per worker
        assert K.step_time(n, batch, g)["total"] == pytest.approx(C._times(c, n), rel=1e-12)


def test_full_overlap_is_bucket_pipeline_and_never_slower_when_a_bucket_pays_its_latency():
    pays = 0
    for f, n, batch in cases(1000):
        t = [K.step_time(n, batch, f.with_overlap(p, "test"))["total"] for p in (0, .25, .5, 1)]
        assert t[-1] == pytest.approx(pipeline(n, batch, f), rel=1e-9)
        work = f.per_example * batch / n * max(1.0, n / f.cores)
        latency, share = K.bucket_trade(n, batch, f)
        assert (latency, share) == (2 * (n - 1) * f.alpha,
                                    f.backward_share * work / K.buckets(f))
        if abs(latency - share) < 1e-6 * share:
            continue                                                # on the boundary
        if latency < share or K.buckets(f) == 1:                    # a bucket pays its α
            pays += n > 1 and K.buckets(f) > 1
            assert all(a >= b * (1 - 1e-12) for a, b in zip(t, t[1:])), (f, n, batch)
        else:                                                       # more α than it hides
            assert t[-1] >= t[0] * (1 - 1e-12), (f, n, batch)
    assert pays >= 30


def test_one_bucket_hides_nothing_and_tiny_buckets_can_cost_more_than_they_hide():
    small = K.Fit(0.0, 1e-5, 1e-4, 1e-9, 64, 1000)                 # 4 kB: one 25 MiB bucket
    assert K.step_time(8, 256, small.with_overlap(1.0, "t")) == K.step_time(8, 256, small)
    many = small.with_overlap(1.0, "t", bucket_bytes=64)           # 63 buckets: 88 ms of α
    assert K.step_time(8, 256, many)["total"] > K.step_time(8, 256, small)["total"]
    hides = K.Fit(0.0, 1e-2, 1e-6, 1e-10, 64, 100_000_000).with_overlap(1.0, "t")
    s = K.step_time(8, 256, hides)                                 # 16 buckets under 213 ms
    assert K.buckets(hides) == 16 and s["exposed"] < 0.1 * s["communicate"]
    half = K.step_time(8, 256, hides.with_overlap(0.5, "t"))
    assert half["exposed"] == pytest.approx((s["communicate"] + s["exposed"]) / 2)


def test_overlap_outside_zero_one_is_refused():
    with pytest.raises(ValueError, match="overlap must be in"):
        FIT.with_overlap(1.5, "t")


def test_assumptions_name_every_constant_and_where_it_came_from():
    m = {"batches": [8, 32], "compute": [1e-3, 2e-3], "sizes": [1 << 12, 1 << 20], "world": 4,
         "cores": 2, "params": 10_000, "workload": "digits-mlp",
         "allreduce": [1e-4, 1e-3]}
    f = K.fit(m).link(10).with_overlap(0.4, "measured: lesson 06")
    text = "\n".join(K.assumptions(f))
    for want in ("c = ", "t₀ = ", "α = ", "β = ", "bytes per parameter", "P = 10,000",
                 "2 cores", "overlap φ = 0.40", "backward = 0.67", "fitted: forward + backward",
                 "fitted: allreduces", "10 Gbit/s link", "measured: lesson 06",
                 "fp32 gradients", "Kaplan"):
        assert want in text, want
    assert len(K.assumptions(f)) == 9


def test_the_seed_case_takes_its_compute_per_example_as_stated_not_scaled():
    rows = K.seed_case(FIT, per_example=2e-3, source="6 FLOPs × 16 M / 48 GFLOP/s")
    assert rows == K.seed_case(replace(FIT, per_example=1.0, params=7), 2e-3, "other")
    big = K.seed_fit(FIT.with_overlap(0.5, "t", bucket_bytes=1024), 2e-3,
                     "6 FLOPs × 16 M / 48 GFLOP/s")
    assert (big.overlap, big.bucket_bytes, K.buckets(big)) == (0.0, K.DDP_BUCKET_BYTES, 3)
    assert "6 FLOPs × 16 M / 48 GFLOP/s" in "\n".join(K.assumptions(big))
    assert big.params == K.SEED_PARAMS and big.per_example == 2e-3
    by = {(r["link_gbit"], r["overlap"], r["workers"]): r for r in rows}
    assert all(r["speedup"] <= r["workers"] * (1 + 1e-9) for r in rows)
    for phi in (0.0, 1.0):
        assert by[(100, phi, 512)]["speedup"] > by[(10, phi, 512)]["speedup"] \
            > by[(1, phi, 512)]["speedup"]
    assert by[(1, 1.0, 512)]["speedup"] >= by[(1, 0.0, 512)]["speedup"]
    assert by[(1, 0.0, 1)]["epoch_days"] * 86400 == pytest.approx(
        K.step_time(1, 256, big)["total"] * K.SEED_EXAMPLES / 256)
    assert K.dense_flops(16e6) == 96e6


def test_the_fit_recovers_the_constants_it_was_measured_with():
    batches, sizes, world = [8, 32, 128, 512], [1 << 12, 1 << 16, 1 << 20], 4
    m = {"batches": batches, "compute": [FIT.t0 + FIT.per_example * b for b in batches],
         "sizes": sizes, "world": world, "cores": 2, "params": 10_000,
         "allreduce": [2 * (world - 1) * FIT.alpha + 2 * (world - 1) / world * s * FIT.beta
                       for s in sizes]}
    got = K.fit(m)
    for name in ("t0", "per_example", "alpha", "beta"):
        assert getattr(got, name) == pytest.approx(getattr(FIT, name), rel=1e-6), name
    assert got.overlap == 0.0


def test_overlap_fraction_from_lesson_06s_measurement():
    o = {"backward only": 4.0, "backward, then allreduce": 7.0}
    assert K.overlap_fraction({**o, "allreduce in buckets during backward": 4.0}) == 1.0
    assert K.overlap_fraction({**o, "allreduce in buckets during backward": 5.5}) == 0.5
    assert K.overlap_fraction({**o, "allreduce in buckets during backward": 8.0}) == 0.0
    assert K.overlap_fraction({"backward only": 4.0, "backward, then allreduce": 3.0,
                               "allreduce in buckets during backward": 1.0}) == 0.0


def test_cost_is_the_fewest_workers_that_beat_one_process():
    m = {"alone": 1.0, "ns": [1, 2, 4], "steps": [1.1, 0.9, 0.5]}
    assert K.cost(m) == {"alone": 1.0, "steps": {1: 1.1, 2: 0.9, 4: 0.5}, "cost": 2}
    assert K.cost({**m, "steps": [1.1, 1.2, 1.3]})["cost"] is None
    f = K.Fit(0.0, 1e-3, 1e-4, 1e-9, 64, 10_000)                 # 0.256 s for 256 alone
    n = K.cost_modelled(f, 256, alone=0.256)
    assert n is not None and n > 1 and K.step_time(n, 256, f)["total"] < 0.256
    assert all(K.step_time(k, 256, f)["total"] >= 0.256 for k in range(2, n))
    assert K.cost_modelled(replace(f, alpha=1.0), 256, alone=0.256, up_to=64) is None
    # a model faster than the measured process at n = 1 does not make COST look small
    assert K.cost_modelled(f, 256, alone=10.0) == n


def test_measure_on_workers_has_every_ingredient():
    m = shared_cluster(3).run(K.measure, "digits-mlp", (8, 32), (1 << 10, 1 << 14), 48,
                              (1, 2, 3), 2)[0]
    assert m["ns"] == [1, 2, 3] and len(m["steps"]) == 3 and m["world"] == 3
    assert all(t > 0 for t in m["compute"] + m["allreduce"] + m["steps"])
    assert m["alone"] > 0 and m["flop_s"] > 0 and m["threads"] == 1
    f = K.fit(m)
    assert f.params == 8970 and f.per_example > 0 and np.isfinite(f.beta)
    assert K.cost(m)["cost"] in (None, 1, 2, 3)
