"""The loops lesson 04 prints compute exactly what the instrumented engine computes."""
import numpy as np
import pytest

from ddl_lab.message_passing import textbook
from ddl_lab.message_passing.comm import comm_run
from ddl_lab.message_passing.pregel import _pagerank_vertex, pregel, web_graph
from ddl_lab.ml.data import linear_regression
from ddl_lab.message_passing.parallel_gd import run_parallel_gd


@pytest.mark.parametrize("workers, sizes, steps", [(2, [1, 299], 7), (3, [100, 37, 163], 12),
                                                   (4, None, 1)])
def test_parallel_gd_gives_the_engines_theta_bit_for_bit(workers, sizes, steps):
    ds = linear_regression(m=300, d=5, seed=workers)
    X, y = ds.X.astype(np.float64), ds.y.astype(np.float64)
    engine = run_parallel_gd(X, y, workers, steps=steps, lr=0.3, sizes=sizes)
    cuts = np.cumsum(sizes or [75] * 4)[:-1]
    shards = list(zip(np.split(X, cuts), np.split(y, cuts)))
    for theta in comm_run(textbook.parallel_gd, workers, shards, steps, 0.3):
        np.testing.assert_array_equal(theta, engine[0].theta)


def _assemble(parts: list[dict[int, float]], n: int) -> np.ndarray:
    values = np.full(n, np.nan)
    for part in parts:
        values[list(part)] = list(part.values())
    return values


@pytest.mark.parametrize("workers, n, supersteps", [(2, 40, 60), (3, 97, 5), (4, 13, 60)])
def test_pregel_loop_gives_the_engines_pagerank_bit_for_bit(workers, n, supersteps):
    graph = web_graph(n=n, avg_degree=3, dangling=0.2, seed=n)
    engine = pregel(graph, workers, _pagerank_vertex, max_supersteps=supersteps)
    parts = comm_run(textbook.run_pregel, workers, graph, _pagerank_vertex, supersteps)
    np.testing.assert_array_equal(_assemble(parts, n), engine.values)
