"""OpenMP-style threads (lesson 02): parallel_for, schedules, clauses, the GIL, a thread race."""
import threading

import matplotlib.pyplot as plt
import numpy as np
import pytest

from ddl_lab.parallel_models import plots, threads
from ddl_lab.parallel_models.shared_memory import atomic_add
from ddl_lab.parallel_models.threads import (critical, dynamic, guided, next_chunk, parallel_for,
                                             static_chunks)


@pytest.mark.parametrize("n,t,chunk", [(50, 4, None), (7, 3, None), (2, 4, None), (50, 4, 3),
                                       (10, 2, 20)])
def test_static_chunks_cover_every_iteration_once(n, t, chunk):
    plan = static_chunks(n, t, chunk)
    seen = sorted(i for ranges in plan for r in ranges for i in r)
    assert seen == list(range(n))
    if chunk is None:                       # one block per thread, sizes differ by <= 1
        sizes = [sum(len(r) for r in ranges) for ranges in plan]
        assert max(sizes) - min(sizes) <= 1
    else:                                   # chunks dealt in turn
        assert plan[0][0] == range(0, min(chunk, n))


def test_dynamic_claims_truncate_the_last_chunk_then_return_none():
    counter, lock = np.zeros(1, np.int64), threading.Lock()
    got = [next_chunk(counter, lock, 10, dynamic(4)) for _ in range(4)]
    assert got == [range(0, 4), range(4, 8), range(8, 10), None]
    assert counter[0] == 10


def test_guided_chunks_shrink_but_never_below_chunk():
    counter, lock = np.zeros(1, np.int64), threading.Lock()
    sizes = []
    while (r := next_chunk(counter, lock, 100, guided(2, 4))) is not None:
        sizes.append(len(r))
    assert sum(sizes) == 100 and sizes[0] == 25
    assert sizes == sorted(sizes, reverse=True)
    assert min(sizes[:-1]) >= 2


@pytest.mark.parametrize("schedule,chunk", [("static", None), ("static", 3), ("dynamic", None),
                                            ("dynamic", 4), ("guided", 2)])
def test_the_seeds_loop_gives_1225_with_every_schedule(schedule, chunk):
    b = np.zeros(1, np.int64)
    r = parallel_for(lambda a: atomic_add(b, 0, a), range(50), num_threads=4,
                     schedule=schedule, chunk=chunk)
    assert b[0] == 1225
    assert sorted(i for c in r.chunks for i in range(c.start, c.stop)) == list(range(50))
    assert len(r.busy) == 4


def test_critical_and_reduction_give_the_same_answer():
    c = [0]

    def body(a):
        with critical("sum"):
            c[0] += a

    parallel_for(body, 50, num_threads=3, schedule="dynamic")
    assert c[0] == 1225
    assert parallel_for(lambda a: a, 50, num_threads=3, reduction="+").value == 1225
    assert parallel_for(lambda a: a + 1, 5, 2, reduction="*").value == 120
    assert parallel_for(lambda a: -a, 9, 2, reduction="max").value == 0
    assert parallel_for(lambda a: frozenset({a}), 6, 2, reduction=lambda x, y: x | y,
                        identity=frozenset()).value == set(range(6))


def test_the_team_really_uses_several_threads():
    seen = set()
    parallel_for(lambda i: seen.add(threading.current_thread().name), 64, num_threads=3,
                 schedule="static")
    assert len(seen) == 3


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="schedule"):
        parallel_for(print, 3, schedule="auto")
    with pytest.raises(ValueError, match="num_threads"):
        parallel_for(print, 3, num_threads=0)
    with pytest.raises(ValueError, match="chunk"):
        parallel_for(print, 3, chunk=0)
    with pytest.raises(ValueError, match="identity"):
        parallel_for(print, 3, reduction=max)
    with pytest.raises(ValueError, match="reduction"):
        parallel_for(print, 3, reduction="avg")


def test_an_exception_in_a_thread_reaches_the_caller():
    def body(i):
        if i == 7:
            raise KeyError("iteration 7")
    with pytest.raises(KeyError, match="iteration 7"):
        parallel_for(body, 20, num_threads=2, schedule="dynamic")


def test_a_thread_that_never_finishes_times_out():
    stop = threading.Event()
    try:
        with pytest.raises(TimeoutError, match="still running"):
            parallel_for(lambda i: stop.wait(5) if i == 1 else None, 2, num_threads=2,
                         timeout=0.3)
    finally:
        stop.set()


def test_a_read_modify_write_across_a_gil_release_loses_updates():
    # The loss needs the two threads' read-sum-write windows to overlap; on a busy
    # machine one thread can run its whole share alone, so longer sums (wider windows)
    # are tried before the race is declared absent.
    runs = []
    for size in (20_000, 200_000, 1_000_000):
        r = threads.thread_race(num_threads=2, updates=1000, size=size)
        assert r["expected"] == 2000 and r["got"] + r["lost"] == 2000
        runs.append(r)
        if r["lost"] > 0:
            break
    assert 0 < runs[-1]["lost"] < 2000, runs


def test_gil_speedups_measure_both_kinds_and_plot():
    g = threads.gil_speedups(num_threads=2, tasks=4, repeats=1,
                             sizes={"pure Python": 2000, "numpy (releases the GIL)": 20_000})
    assert set(g) == {"pure Python", "numpy (releases the GIL)"}
    assert all(v["t1"] > 0 and v["tn"] > 0 for v in g.values())
    ax = plots.plot_gil(g)
    assert [p.get_width() for p in ax.patches] == [v["speedup"] for v in g.values()]
    run = parallel_for(lambda i: threads.numpy_work(1000), 8, 2, schedule="dynamic", chunk=2)
    assert len(plots.plot_schedule(run).patches) == len(run.chunks) == 4
    plt.close("all")


# ------------------------------------------------- speedup and Amdahl (lesson 02, §8)

def test_amdahl_and_its_fit():
    from ddl_lab.parallel_models.speedup import amdahl, fit_parallel_fraction
    assert amdahl(0.9, 1) == pytest.approx(1.0)
    assert amdahl(0.9, 10) == pytest.approx(1 / (0.1 + 0.09))
    assert amdahl(0.9, 1e9) == pytest.approx(10, rel=1e-6)            # the 1/(1-p) ceiling
    ns = [1, 2, 4, 8]
    assert fit_parallel_fraction(ns, amdahl(0.75, ns)) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="between 0 and 1"):
        amdahl(1.5, 2)
    with pytest.raises(ValueError, match="more than one worker"):
        fit_parallel_fraction([1], [1.0])


def test_measured_scaling_and_torch_threads_are_restored():
    import torch
    from ddl_lab.parallel_models import speedup
    with pytest.raises(ValueError, match="start with 1"):
        speedup.measure_scaling(lambda n: None, [2, 4])
    s = speedup.measure_scaling(lambda n: speedup.amdahl_workload(n, 0.5, tasks=4, size=10_000),
                                [1, 2], repeats=1, label="test")
    assert s.speedup[0] == 1.0 and len(s.efficiency) == 2 and "efficiency" in s.table()
    before = torch.get_num_threads()
    mm = speedup.torch_matmul_scaling(64, [1, 2], repeats=1)
    assert torch.get_num_threads() == before and len(mm.seconds) == 2
    fig = plots.figure_speedup([s, mm], max_n=16)
    assert len(fig.axes) == 2 and fig.axes[0].lines[1].get_label() == "test (measured)"
    plt.close(fig)
