"""Shared memory between processes (lesson 02): the lost-update race and its fixes."""
import time

import matplotlib.pyplot as plt
import numpy as np
import pytest

from ddl_lab import WorkerError, WorkerTimeout
from ddl_lab.parallel_models import plots, shared_memory
from ddl_lab.parallel_models.processes import run_processes
from ddl_lab.parallel_models.shared_memory import (HARDWARE_ATOMICS, CountingLock, SharedArray,
                                                   atomic_add, claim_all, count_race)


def _write_rank(rank, handle):
    a = SharedArray.attach(handle)
    a.array[rank] = 10 + rank
    a.close()
    return rank


def test_processes_attach_by_name_and_see_one_memory():
    with SharedArray(3, np.int64) as a:
        assert run_processes(_write_rank, 3, a.handle) == [0, 1, 2]
        assert a.array.tolist() == [10, 11, 12]
        name = a.name
    with pytest.raises(FileNotFoundError):              # unlinked when the block ends
        SharedArray.attach((name, (3,), "<i8"))


def _fail(rank):
    if rank == 1:
        raise ValueError("process 1 could not start")
    return rank


def _hang(rank):
    time.sleep(60)


def test_a_failing_process_is_named_and_a_hanging_one_times_out():
    with pytest.raises(WorkerError, match="process 1 raised ValueError: process 1 could not"):
        run_processes(_fail, 2)
    t0 = time.perf_counter()
    with pytest.raises(WorkerTimeout, match="still running after 1 s"):
        run_processes(_hang, 2, timeout=1)
    assert time.perf_counter() - t0 < 10


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="processes"):
        run_processes(_write_rank, 0)
    with pytest.raises(ValueError, match="method"):
        count_race(method="atomically")
    with pytest.raises(TypeError, match="int64"):
        atomic_add(np.zeros(2), 0, 1)
    with pytest.raises(IndexError):
        atomic_add(np.zeros(2, np.int64), 2, 1)


@pytest.mark.skipif(not HARDWARE_ATOMICS, reason="no libatomic on this system")
def test_atomic_add_returns_the_old_value():
    a = np.zeros(2, np.int64)
    assert atomic_add(a, 1, 5) == 0 and atomic_add(a, 1, 2) == 5
    assert a.tolist() == [0, 7]


def test_unsynchronised_increments_lose_updates_and_every_fix_loses_none():
    results = {r.method: r for r in shared_memory.compare_fixes(2, 300_000)}
    race = results["none"]
    assert race.expected == 600_000 and race.lost > 0, str(race)
    for method in ("lock", "atomic", "reduction"):
        if method in results:
            assert results[method].lost == 0, str(results[method])
    fig = plots.figure_race(list(results.values()))
    assert [p.get_height() for p in fig.axes[0].patches][0] == 100 * race.lost / race.expected
    plt.close(fig)


def _take(rank, lock):
    for _ in range(100):
        with lock:
            pass


def test_counting_lock_counts_across_processes_and_times_out():
    lock = CountingLock(timeout=0.2)
    run_processes(_take, 2, lock)
    assert lock.acquisitions == 200
    lock.acquire()
    try:
        with pytest.raises(TimeoutError, match="waited 0.2 s"):
            lock.acquire()
    finally:
        lock.release()


def test_exercise_02s_dispenser_hands_out_every_iteration_once_across_processes(solution):
    claims = claim_all(solution("02_parallel_models", "my_next_chunk"), 30_000, chunk=7,
                       processes=2)
    seen = np.zeros(30_000, np.int64)
    for pairs in claims:
        for lo, hi in pairs:
            seen[lo:hi] += 1
    assert (seen == 1).all()
    assert all(hi - lo == 7 for pairs in claims for lo, hi in pairs if hi != 30_000)


def test_memory_facts_and_the_architecture_picture():
    facts = shared_memory.memory_facts()
    assert facts["cores"] >= 1
    fig = plots.figure_memory_architectures()
    assert [len(ax.patches) for ax in fig.axes] == [5, 6, 6, 4]          # the boxes drawn
    plt.close(fig)

