"""MapReduce-style iteration (re-read from disk) vs in-memory workers (lesson 04)."""
import os

import matplotlib
import numpy as np
import pytest

from ddl_lab.ml.data import linear_regression
from ddl_lab.message_passing.mapreduce import (compare_iterative, in_memory_gd, mapreduce_gd,
                                               read_split, write_splits)
from ddl_lab.message_passing.parallel_gd import batch_gd_losses
from ddl_lab.message_passing.plots import figure_iteration_times

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def data():
    ds = linear_regression(m=3000, d=6, seed=2)
    return ds.X.astype(np.float64), ds.y.astype(np.float64)


def test_text_splits_read_back_exactly(data, tmp_path):
    X, y = data
    paths = write_splits(X, y, 3, tmp_path)
    parts = [read_split(p) for p in paths]
    np.testing.assert_array_equal(np.vstack([p[0] for p in parts]), X)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), y)


def test_both_ways_compute_the_same_model_as_batch_gd(data, tmp_path):
    X, y = data
    write_splits(X, y, 3, tmp_path)
    mr = mapreduce_gd(tmp_path, 3, iterations=5, lr=0.3)
    mem = in_memory_gd(tmp_path, 3, iterations=5, lr=0.3)
    theta, losses = batch_gd_losses(X, y, 5, 0.3)
    np.testing.assert_array_equal(mr.theta, mem.theta)           # same sums, same order
    np.testing.assert_allclose(mr.theta, theta, rtol=0, atol=1e-12)
    np.testing.assert_allclose(mem.losses, losses, rtol=1e-12)
    # every MapReduce job went through the disk: a map output per iteration and split
    assert {f"map-{i}-{r}.npy" for i in range(5) for r in range(3)} <= set(os.listdir(tmp_path))
    assert len(mr.seconds) == len(mem.seconds) == 5


def test_compare_iterative_times_both_ways_on_the_same_splits(data):
    # how much faster in memory is: benchmarks/message_passing_bench.py
    X, y = data
    mr, mem = compare_iterative(X, y, k=3, iterations=4)
    np.testing.assert_array_equal(mr.theta, mem.theta)
    assert len(mr.seconds) == len(mem.seconds) == 4 and min(mr.seconds + mem.seconds) > 0
    fig = figure_iteration_times(mr, mem)
    assert [line.get_label() for line in fig.axes[0].lines] == [mr.name, mem.name]


def test_bad_input_is_refused(data):
    X, y = data
    with pytest.raises(ValueError, match="need iterations >= 1"):
        compare_iterative(X, y, k=3, iterations=0)
    with pytest.raises(ValueError, match="cannot split 3000 examples into k=0 splits"):
        write_splits(X, y, 0, "/tmp/never")
