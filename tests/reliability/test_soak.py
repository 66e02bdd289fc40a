"""Soak: many start/run/shutdown cycles of Cluster(4), many runs on one cluster.
Open files, threads, processes, /dev/shm segments, temporary files and the notebook's
resident memory must not grow beyond a small bound.

The default sizes keep the phase short; ``DDL_SOAK_SCALE=20`` runs the full soak: 200 cycles
(and 20,000 runs).
"""
import torch
import torch.distributed as dist

from ddl_lab import Cluster

from .conftest import SCALE
from .system import descendants, usage

CYCLES = max(3, round(8 * SCALE))
RUNS = max(100, round(1000 * SCALE))
MB = 1 << 20


def add_rank(t):
    return t + dist.get_rank()


def test_cluster_start_run_shutdown_cycles_leave_nothing_behind(leftovers):
    def cycle():
        with Cluster(4, timeout=60) as c:
            assert c.run(add_rank, torch.ones(4))[3].tolist() == [4.0] * 4
    cycle()                                   # first use: imports, caches, pools
    before, children = usage(), descendants()
    for _ in range(CYCLES):
        cycle()
    after = usage()
    print(f"\n  {CYCLES} cycles of Cluster(4): before {before}; after {after}")
    assert descendants() == children, "a cycle left a process behind"
    assert after.fds - before.fds <= 2
    assert after.threads - before.threads <= 1
    assert after.rss - before.rss < 30 * MB
    assert leftovers() == []


def test_many_runs_on_one_cluster_leave_nothing_behind(leftovers):
    with Cluster(4, timeout=60) as c:
        x = torch.arange(64.0)
        for _ in range(50):                   # warm up: first tasks, lazy imports
            c.run(add_rank, x)
        before, workers = usage(), [usage(p) for p in c.pids]
        for i in range(RUNS):
            out = c.run(add_rank, x)
        assert out[2].equal(x + 2)
        after, workers_after = usage(), [usage(p) for p in c.pids]
        print(f"\n  {RUNS} runs on Cluster(4): notebook before {before}; after {after}\n"
              f"  rank 0 before {workers[0]}; after {workers_after[0]}")
        assert after.fds - before.fds <= 2 and after.threads - before.threads <= 1
        assert after.rss - before.rss < 20 * MB
        for w0, w1 in zip(workers, workers_after):
            assert w1.fds - w0.fds <= 2 and w1.threads - w0.threads <= 1
            assert w1.rss - w0.rss < 20 * MB
    assert leftovers() == []
