"""Hogwild! (lesson 03): the update, the three modes, collisions, lost steps, staleness."""
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ddl_lab.hogwild import engine as hogwild
from ddl_lab.hogwild import plots
from ddl_lab.ml.models import logistic_grad


@pytest.fixture(scope="module")
def sparse():
    return hogwild.sparse_problem(m=3000, d=300, nnz=5)


@pytest.fixture(scope="module")
def dense():
    return hogwild.dense_problem(m=1000, d=50)


def test_the_sparse_update_is_sgd_on_the_logistic_loss(sparse):
    rng = np.random.default_rng(1)
    theta = rng.normal(size=sparse.d)
    x = np.zeros((1, sparse.d))
    x[0, sparse.idx[0]] = sparse.val[0]
    want = theta - sparse.lr * logistic_grad(theta, x, sparse.y[:1])
    hogwild.sgd_update(theta, sparse.idx[0], sparse.val[0], float(sparse.y[0]), sparse.lr)
    np.testing.assert_allclose(theta, want, rtol=1e-6)


def test_one_process_is_plain_serial_sgd(sparse, dense):
    for p in (sparse, dense):
        r = hogwild.run(p, "serial", epochs=1)
        want = hogwild.reference_sgd(p, np.random.default_rng(0).permutation(len(p)), p.lr)
        np.testing.assert_allclose(r.theta, want, rtol=1e-9, atol=1e-12)
        assert r.updates == len(p) and r.collisions == 0 and r.overwritten == 0
        assert r.losses[-1] == pytest.approx(p.loss(want)) and r.losses[-1] < r.losses[0]


def test_locked_runs_never_collide_or_lose_a_step(sparse):
    r = hogwild.run(sparse, "locked", processes=2)
    assert r.lock_acquisitions == r.updates == len(sparse)
    assert r.collisions == 0 and r.overwritten == 0 and r.lost_fraction < 1e-9


def test_lock_free_processes_train_the_shared_vector_without_the_lock(sparse, dense):
    for p in (sparse, dense):
        r = hogwild.run(p, "lock-free", processes=2, epochs=2)
        assert r.lock_acquisitions == 0 and r.updates == 2 * len(p)
        assert r.losses[-1] < 0.8 * p.loss(np.zeros(p.d))
        assert r.collided.sum() >= r.collisions >= 0
        assert len(r.windows) == 2 and all(len(w[0]) == len(p) for w in r.windows)


def test_delayed_steps_are_all_applied_and_a_delay_of_zero_changes_nothing(sparse):
    plain = hogwild.run(sparse, "serial")
    late = hogwild.run(sparse, "serial", delay=8)
    assert late.updates == plain.updates == len(sparse)
    assert late.overwritten == 0                      # every late step reached θ
    assert not np.allclose(late.theta, plain.theta)   # but computed from a stale θ


def test_collisions_need_overlapping_windows_and_a_common_coordinate():
    idx = np.array([[0, 1], [2, 3], [4, 5], [0, 9], [7, 8], [4, 6]])
    p = hogwild.Problem("sparse", idx, np.ones((6, 2), np.float32), np.zeros(6), 10, 0.1)
    a = (np.array([0.0, 10.0, 20.0]), np.array([5.0, 15.0, 25.0]), np.array([0, 1, 2]))
    b = (np.array([4.0, 16.0, 26.0]), np.array([11.0, 19.0, 30.0]), np.array([3, 4, 5]))
    # a0 [0,5] and b0 [4,11] overlap and share coordinate 0; a1 overlaps b0 in time only;
    # a2 and b2 share coordinate 4 but not time.
    total, collided = hogwild._collisions([a, b], p)
    assert total == 2 and collided.tolist() == [2] + [0] * 9
    dense = hogwild.Problem("dense", None, np.ones((6, 10), np.float32), np.zeros(6), 10, 0.1)
    total, collided = hogwild._collisions([a, b], dense)      # a0, a1 and b0 overlap in time
    assert total == 3 and (collided == 3).all()


def test_time_to_target_uses_the_first_run_as_the_baseline(sparse):
    runs = hogwild.compare_modes(sparse, processes=2, modes=("serial", "lock-free"),
                                 record=False)
    target, times = hogwild.time_to_target(runs, at=0.5)
    assert times[0] <= runs[0].seconds and all(t > 0 for t in times)
    assert runs[0].time_to(-1.0) == float("inf")


def test_bad_arguments_say_what_to_do(sparse):
    with pytest.raises(ValueError, match="mode"):
        hogwild.run(sparse, "wild")
    with pytest.raises(ValueError, match="processes"):
        hogwild.run(sparse, "lock-free", processes=0)
    with pytest.raises(ValueError, match="delay"):
        hogwild.run(sparse, delay=-1)


def test_contention_and_the_pictures(sparse):
    rows = hogwild.contention(sizes=(10, 100), processes=2, work=2000)
    assert [r["d"] for r in rows] == [10, 100]
    assert all(r["shared"] > 0 and r["private"] > 0 for r in rows)
    assert len(plots.plot_contention(rows).patches) == 4               # 2 sizes × 2 bars
    r = hogwild.run(sparse, "lock-free", processes=2)
    writes = plots.figure_writes(r, sparse, coords=10, span_ms=1.0)
    assert writes.axes[0].get_images()[0].get_array().shape == (10, 120)
    assert plots.plot_loss_vs_time([r], target=0.5).lines[0].get_label() == r.label
    assert plots.plot_delays([r]).lines[0].get_label() == "delay τ = 0"
    plt.close("all")
    with pytest.raises(ValueError, match="record=False"):
        plots.figure_writes(hogwild.run(sparse, "serial", record=False), sparse)
