"""Lesson 04's gradient descent as a real Spark job: the same θ as the MapReduce emulation,
bit for bit, whether the RDD is re-read from the files every iteration or cached."""
import numpy as np

from ddl_lab.message_passing.mapreduce import compare_iterative
from ddl_lab.message_passing.spark_rdd import compare_spark
from ddl_lab.ml.data import linear_regression


def test_spark_re_read_and_cached_take_the_emulation_s_steps(spark):
    ds = linear_regression(m=2_000, d=5, seed=3)
    reread, cached = compare_spark(spark, ds.X, ds.y, k=3, iterations=4, lr=0.2)
    emulated, _ = compare_iterative(ds.X, ds.y, k=3, iterations=4, lr=0.2)
    assert np.array_equal(reread.theta, emulated.theta)
    assert np.array_equal(cached.theta, emulated.theta)
    assert reread.losses == emulated.losses and len(cached.seconds) == 4
    assert not spark.sparkContext._jsc.getPersistentRDDs()          # the cache was released
