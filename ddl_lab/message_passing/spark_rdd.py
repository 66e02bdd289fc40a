"""The same iterative gradient descent as a real Spark job (lesson 04).

``spark_gd`` runs ``mapreduce``'s batch gradient descent on a local Spark (``local[2]``)
over the same text splits: an RDD of the files, one parsed (X, y) block per partition, one
``map``/``reduce`` job per iteration. Without ``cache`` every job re-reads and re-parses
the files (what Hadoop does); with ``cache`` the first job keeps the parsed partitions in
the executors' memory (Zaharia et al., HotCloud 2010) and later jobs only ship θ.
``mapreduce.py``'s emulation stays the way to see inside; this is the engine itself.
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from ddl_lab.message_passing.mapreduce import IterativeRun, _shape, _sums, write_splits

__all__ = ["spark_gd", "compare_spark"]


def _parse(lines: Iterable[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """One partition's lines ``y,x_1,…,x_d`` → one (X, y) block (none for an empty one)."""
    rows = [np.array(ln.split(","), dtype=float) for ln in lines if ln]
    if rows:
        a = np.vstack(rows)
        yield a[:, 1:], a[:, 0]


def spark_gd(spark: Any, folder: str | Path, k: int, iterations: int, lr: float,
             cache: bool) -> IterativeRun:
    """Batch GD as Spark jobs over the k splits in ``folder``; seconds per iteration."""
    m, d = _shape(str(folder), k)
    blocks = spark.sparkContext.textFile(f"{folder}/part-*.csv", minPartitions=k) \
        .mapPartitions(_parse)
    if cache:
        blocks = blocks.cache()
    run = IterativeRun("Spark RDD, cached (.cache())" if cache else
                       "Spark RDD, re-read from the files every iteration")
    theta, start = np.zeros(d), time.perf_counter()
    try:
        for _ in range(iterations):
            t0 = time.perf_counter()
            th = theta                                          # shipped with each job
            total = blocks.map(lambda b: _sums(th, *b)).reduce(np.add)
            run.losses.append(float(total[-1]) / m)
            theta = theta - lr * total[:-1] / m
            run.seconds.append(time.perf_counter() - t0)
    finally:
        if cache:
            blocks.unpersist()
    run.theta, run.wall_s = theta, time.perf_counter() - start
    return run


def compare_spark(spark: Any, X: np.ndarray, y: np.ndarray, k: int = 4, iterations: int = 10,
                  lr: float = 0.1) -> tuple[IterativeRun, IterativeRun]:
    """Write (X, y) as k text splits, run Spark re-reading them and Spark caching them."""
    if iterations < 1 or not lr > 0:
        raise ValueError(f"need iterations >= 1 and lr > 0, got {iterations!r}, {lr!r}")
    folder = tempfile.mkdtemp(prefix="ddl_lab_spark_")
    spark.sparkContext.parallelize(range(k), k).count()     # start the Python workers first
    try:
        write_splits(X, y, k, folder)
        return (spark_gd(spark, folder, k, iterations, lr, cache=False),
                spark_gd(spark, folder, k, iterations, lr, cache=True))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
