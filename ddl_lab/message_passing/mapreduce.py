"""Iterative training MapReduce-style vs in memory (lesson 04; Do's lecture, "Naive MapReduce
is not good for ML", "HDFS bottleneck", "Spark ... RDDs cached in memory").

Hadoop runs every iteration of an iterative algorithm as an independent job: each map
task re-reads (and re-parses) its input split from the distributed file system, writes
its output to disk; the reduce task reads those files and writes the new model back for
the next job. Nothing stays in memory between jobs. Spark instead keeps each worker's
partition in memory (a cached RDD): only the first iteration reads the input, and only
the small model travels afterwards.

``mapreduce_gd`` and ``in_memory_gd`` run the same batch gradient descent on the same text
splits with real workers, timed per iteration; they compute the same θ bit for bit.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ddl_lab.message_passing.comm import Comm, comm_run
from ddl_lab.runtime import shared_cluster

__all__ = ["SPARK_2010", "write_splits", "read_split", "IterativeRun", "mapreduce_gd",
           "in_memory_gd", "compare_iterative"]

# Zaharia et al., "Spark: Cluster Computing with Working Sets", HotCloud 2010: logistic
# regression on 29 GB, 20 machines; seconds per iteration.
SPARK_2010 = {"hadoop_s": 127.0, "spark_first_s": 174.0, "spark_later_s": 6.0}


def write_splits(X: np.ndarray, y: np.ndarray, k: int, folder: str | Path) -> list[Path]:
    """Write k text splits ``part-0000r.csv`` of lines ``y,x_1,…,x_d`` (as on HDFS).

    Numbers are written with 17 significant digits, so reading them back is exact.
    """
    if not 1 <= k <= len(y):
        raise ValueError(f"cannot split {len(y)} examples into k={k} splits")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for r, rows in enumerate(np.array_split(np.arange(len(y)), k)):
        path = folder / f"part-{r:05d}.csv"
        np.savetxt(path, np.column_stack([y[rows], X[rows]]), delimiter=",", fmt="%.17g")
        paths.append(path)
    return paths


def read_split(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Parse one text split into (X, y), float64."""
    a = np.loadtxt(path, delimiter=",", ndmin=2)
    return a[:, 1:], a[:, 0]


def _sums(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[Σ (x·θ − y) x, Σ ½ (x·θ − y)²] over one split."""
    r = X @ theta - y
    return np.append(X.T @ r, 0.5 * (r @ r))


@dataclass
class IterativeRun:
    """Seconds per iteration, the loss before each, the final θ, total wall time."""

    name: str
    seconds: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    theta: np.ndarray | None = None
    wall_s: float = 0.0


# ------------------------------------------------------------------ MapReduce-style

def _map_task(folder: str, it: int) -> None:
    """Map task of job ``it`` on split ``rank``: read θ and the split from disk, write sums."""
    import torch.distributed as dist
    rank = dist.get_rank()
    theta = np.load(f"{folder}/theta-{it}.npy")
    X, y = read_split(f"{folder}/part-{rank:05d}.csv")
    np.save(f"{folder}/map-{it}-{rank}.npy", _sums(theta, X, y))


def _reduce_task(folder: str, it: int, k: int, m: int, lr: float) -> float | None:
    """Reduce task of job ``it`` (rank 0): add the map outputs, write the next θ."""
    import torch.distributed as dist
    if dist.get_rank() != 0:
        return None
    total = sum(np.load(f"{folder}/map-{it}-{r}.npy") for r in range(k))
    theta = np.load(f"{folder}/theta-{it}.npy") - lr * total[:-1] / m
    np.save(f"{folder}/theta-{it + 1}.npy", theta)
    return float(total[-1]) / m


def _shape(folder: str, k: int) -> tuple[int, int]:
    """(examples, features) of k splits, from their lines (the driver parses nothing)."""
    m, d = 0, 0
    for r in range(k):
        with open(f"{folder}/part-{r:05d}.csv") as f:
            for m_r, line in enumerate(f, 1):
                d = d or line.count(",")
        m += m_r
    return m, d


def mapreduce_gd(folder: str | Path, k: int, iterations: int, lr: float) -> IterativeRun:
    """Batch GD as a chain of MapReduce jobs on k workers; one job per iteration."""
    folder = str(folder)
    m, d = _shape(folder, k)
    cluster = shared_cluster(k)
    run = IterativeRun("MapReduce-style: re-read from disk every iteration")
    np.save(f"{folder}/theta-0.npy", np.zeros(d))
    start = time.perf_counter()
    for it in range(iterations):
        t0 = time.perf_counter()
        cluster.run(_map_task, folder, it)                       # map phase
        run.losses.append(cluster.run(_reduce_task, folder, it, k, m, lr)[0])  # reduce
        run.seconds.append(time.perf_counter() - t0)
    run.wall_s = time.perf_counter() - start
    run.theta = np.load(f"{folder}/theta-{iterations}.npy")
    return run


# ------------------------------------------------------------------- in memory

def _in_memory_worker(comm: Comm, folder: str, iterations: int, lr: float
                      ) -> tuple[list[float], list[float], np.ndarray]:
    """Read this rank's split once, keep it in memory, iterate with allreduce."""
    t0 = time.perf_counter()
    X, y = read_split(f"{folder}/part-{comm.rank:05d}.csv")      # the cached partition
    m = comm.allreduce(len(y))
    theta = np.zeros(X.shape[1])
    seconds, losses = [], []
    for _ in range(iterations):
        total = comm.allreduce(_sums(theta, X, y))
        losses.append(float(total[-1]) / m)
        theta = theta - lr * total[:-1] / m
        t1 = time.perf_counter()
        seconds.append(t1 - t0)
        t0 = t1
    return seconds, losses, theta


def in_memory_gd(folder: str | Path, k: int, iterations: int, lr: float) -> IterativeRun:
    """Batch GD on k workers that keep their split in memory across iterations."""
    start = time.perf_counter()
    seconds, losses, theta = comm_run(_in_memory_worker, k, str(folder), iterations, lr)[0]
    return IterativeRun("in memory: read once, keep the partition (Spark's cached RDD)",
                        seconds, losses, theta, time.perf_counter() - start)


def compare_iterative(X: np.ndarray, y: np.ndarray, k: int = 4, iterations: int = 10,
                      lr: float = 0.1) -> tuple[IterativeRun, IterativeRun]:
    """Write (X, y) as k text splits in a temporary folder, run both ways, clean up."""
    if iterations < 1 or not lr > 0:
        raise ValueError(f"need iterations >= 1 and lr > 0, got {iterations!r}, {lr!r}")
    folder = tempfile.mkdtemp(prefix="ddl_lab_mapreduce_")
    try:
        write_splits(X, y, k, folder)
        return (mapreduce_gd(folder, k, iterations, lr),
                in_memory_gd(folder, k, iterations, lr))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
