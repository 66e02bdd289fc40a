"""Speedup, Amdahl's and Gustafson's laws (lesson 02, §8): the fit on n <= cores, the
oversubscribed points shown apart, and the weak-scaling run."""
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ddl_lab.parallel_models import plots, speedup
from ddl_lab.parallel_models.speedup import (OVERSUBSCRIBED, Scaling, WeakScaling, amdahl,
                                             fit_parallel_fraction, gustafson)


def synthetic(p: float = 0.9, cores: int = 2) -> Scaling:
    """Times of a program with parallel fraction p on 1..4 threads of a ``cores``-core
    machine: Amdahl's times up to the core count, then flat (the threads take turns on
    the cores, so the time stops falling, plus 5 % for switching between them)."""
    on_cores = [(1 - p) + p / n for n in range(1, cores + 1)]
    turns = [1.05 * on_cores[-1]] * (4 - cores)
    return Scaling([1, 2, 3, 4], on_cores + turns, "synthetic", cores=cores)


def test_usable_cores_is_the_affinity_mask_capped_by_a_cgroup_quota(tmp_path):
    import os
    mask = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    none = tmp_path / "missing"
    assert speedup.usable_cores(str(none)) == mask
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert speedup.usable_cores(str(tmp_path / "cpu.max")) == mask
    (tmp_path / "cpu.max").write_text("50000 100000\n")             # half a core
    assert speedup.usable_cores(str(tmp_path / "cpu.max")) == 1
    (tmp_path / "cpu.max").write_text(f"{100000 * (mask + 4)} 100000\n")
    assert speedup.usable_cores(str(tmp_path / "cpu.max")) == mask    # the mask caps it
    assert 1 <= speedup.usable_cores() <= mask


def test_the_fit_ignores_counts_beyond_the_cores():
    s = synthetic(0.9, cores=2)
    assert list(s.oversubscribed) == [False, False, True, True]
    assert s.parallel_fraction() == pytest.approx(0.9)
    assert fit_parallel_fraction(s.counts, s.speedup, cores=2) == pytest.approx(0.9)
    biased = fit_parallel_fraction(s.counts, s.speedup, cores=4)      # the turns fitted too
    assert biased < 0.8
    with pytest.raises(ValueError, match="usable cores"):
        fit_parallel_fraction(s.counts[:1] + s.counts[3:], [1.0, 3.0], cores=2)


def test_one_usable_core_fits_every_count_and_says_it_reads_low():
    """A one-core laptop still gets a fit (the only one there is) and is told why it is low."""
    s = synthetic(0.9, cores=2)
    assert fit_parallel_fraction(s.counts, s.speedup, cores=1) == \
        pytest.approx(fit_parallel_fraction(s.counts, s.speedup, cores=4))
    one = type(s)(s.counts, s.seconds, cores=1)
    assert "one usable core" in one.table() and "not fitted" not in one.table()


def test_the_table_marks_the_oversubscribed_rows():
    rows = synthetic(0.9, cores=2).table().splitlines()[1:]
    assert [OVERSUBSCRIBED in r for r in rows] == [False, False, True, True]
    assert all("not fitted" in r for r in rows[2:])


def test_the_speedup_plot_draws_the_oversubscribed_points_apart():
    s = synthetic(0.9, cores=2)
    ax = plots.plot_speedup([s])
    lines = {line.get_label(): line for line in ax.lines}
    assert list(lines["synthetic (measured)"].get_xdata()) == [1, 2]
    assert list(lines[OVERSUBSCRIBED].get_xdata()) == [3, 4]
    assert lines[OVERSUBSCRIBED].get_marker() != lines["synthetic (measured)"].get_marker()
    fitted = [k for k in lines if k.startswith("Amdahl")]
    assert fitted == ["Amdahl, p = 0.90 fitted on n ≤ 2"]
    np.testing.assert_allclose(lines[fitted[0]].get_ydata(), amdahl(0.9, [1, 2, 3, 4]))
    plt.close("all")


def test_gustafson_s_law():
    assert gustafson(0.0, 8) == pytest.approx(8)
    assert gustafson(1.0, 8) == pytest.approx(1)
    assert gustafson(0.1, 1024) == pytest.approx(1024 - 0.1 * 1023)
    with pytest.raises(ValueError, match="between 0 and 1"):
        gustafson(-0.1, 2)


def test_weak_scaling_grows_the_problem_and_times_it_on_n_and_on_one():
    calls = []
    w = speedup.measure_weak_scaling(lambda n, grow: calls.append((n, grow)), [1, 2, 4],
                                     repeats=1, label="w")
    assert calls == [(1, 1), (2, 2), (4, 4), (1, 2), (1, 4)]
    assert len(w.seconds) == len(w.one_worker_seconds) == 3 and w.label == "w"
    assert w.one_worker_seconds[0] == w.seconds[0]
    with pytest.raises(ValueError, match="start with 1"):
        speedup.measure_weak_scaling(lambda n, grow: None, [2, 4])


def test_weak_scaling_semantics_match_gustafson_on_ideal_times():
    f, counts = 0.2, [1, 2, 3, 4]
    grown = [f + (1 - f) * n for n in counts]          # serial time of the grown problem
    w = WeakScaling(counts, [1.0] * 4, grown, "ideal", cores=2)    # the time stays flat
    np.testing.assert_allclose(w.scaled_speedup, gustafson(f, counts))
    np.testing.assert_allclose(w.efficiency, 1.0)
    assert list(w.oversubscribed) == [False, False, True, True]
    rows = w.table(f).splitlines()
    assert "Gustafson" in rows[0] and len(rows) == 5
    assert [OVERSUBSCRIBED in r for r in rows[1:]] == [False, False, True, True]


def test_the_figure_puts_weak_scaling_beside_strong_scaling():
    s = synthetic(0.8, cores=2)
    w = WeakScaling([1, 2, 3, 4], [1.0, 1.0, 1.5, 2.0], [1.0, 1.8, 2.6, 3.4], "grown", cores=2)
    fig = plots.figure_speedup([s], max_n=16, weak=w)
    assert len(fig.axes) == 3
    lines = {line.get_label(): line for line in fig.axes[2].lines}
    assert list(lines["grown (measured)"].get_xdata()) == [1, 2]
    assert list(lines[OVERSUBSCRIBED].get_xdata()) == [3, 4]
    np.testing.assert_allclose(lines["Gustafson n − f(n − 1), f = 0.20"].get_ydata(),
                               gustafson(0.2, [1, 2, 3, 4]))
    assert len(plots.figure_speedup([s], max_n=16).axes) == 2
    plt.close("all")


def test_the_workload_grows_only_its_parallel_part(monkeypatch):
    from ddl_lab.parallel_models import threads
    sizes: list[int] = []
    monkeypatch.setattr(threads, "numpy_work", lambda size: sizes.append(size) or 0.0)
    speedup.amdahl_workload(2, 0.25, tasks=8, size=10, grow=3)
    assert len(sizes) == 2 + 3 * 6                     # 2 serial tasks, 6 parallel ones × 3
