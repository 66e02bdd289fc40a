"""BSP / Pregel supersteps on message-passing workers; PageRank equals power iteration."""
import matplotlib
import numpy as np
import pytest

from ddl_lab.message_passing.plots import figure_pagerank_convergence, plot_partitioned_graph
from ddl_lab.message_passing.pregel import (Graph, pagerank_exact, pagerank_power, pagerank_step,
                                            pregel, pregel_pagerank, web_graph)

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def graph():
    return web_graph(n=120, avg_degree=4, dangling=0.15, seed=5)


def test_web_graph_is_a_simple_digraph_with_dangling_pages(graph):
    again = web_graph(n=120, avg_degree=4, dangling=0.15, seed=5)
    assert np.array_equal(graph.src, again.src) and np.array_equal(graph.dst, again.dst)
    assert not np.any(graph.src == graph.dst)
    assert len(set(zip(graph.src, graph.dst))) == len(graph.src)
    assert 5 < (graph.out_degree() == 0).sum() < 40


def test_power_iteration_keeps_the_total_and_the_variants_lose_it(graph):
    r = np.full(graph.n, 1 / graph.n)
    assert pagerank_step(graph, r).sum() == pytest.approx(1.0)
    assert pagerank_step(graph, r, dangling=False).sum() < 0.99
    assert pagerank_step(graph, r, teleport=False).sum() < 0.99
    iterates = pagerank_power(graph)
    assert np.abs(iterates[-1] - iterates[-2]).sum() < 1e-10
    exact = pagerank_exact(graph)
    np.testing.assert_allclose(iterates[-1], exact, rtol=0, atol=1e-10)
    np.testing.assert_allclose(pagerank_step(graph, exact), exact, rtol=0, atol=1e-15)


def test_pregel_pagerank_equals_power_iteration_superstep_by_superstep(graph):
    iterates = pagerank_power(graph)
    run = pregel_pagerank(graph, 3)
    np.testing.assert_allclose(run.values, iterates[-1], rtol=0, atol=1e-12)
    k = len(iterates)
    np.testing.assert_allclose(run.snapshots[:k], np.array(iterates), rtol=0, atol=1e-12)
    last = run.history[-1]
    assert last["active"] == 0 and last["messages"] == 0          # everyone voted to halt
    assert run.history[0]["messages"] == len(graph.src)
    assert 0 < run.history[0]["crossing"] < len(graph.src)       # combined before sending
    assert len(figure_pagerank_convergence(run, iterates, pagerank_exact(graph)).axes) == 2
    plot_partitioned_graph(graph, run.values, 3)


def max_label(vertex, messages, ctx):
    """Pregel's first example: every vertex learns the largest id that reaches it."""
    if ctx.superstep == 0:
        vertex.value = float(vertex.id)
    elif max(messages) > vertex.value:
        vertex.value = max(messages)
    else:
        vertex.vote_to_halt()
        return
    for w in vertex.out_edges:
        ctx.send(w, vertex.value)
    vertex.vote_to_halt()


def test_halted_vertices_wake_up_on_messages_and_the_run_ends():
    ring = Graph(6, np.arange(6), (np.arange(6) + 1) % 6)
    run = pregel(ring, 3, max_label, max_supersteps=20, combine=max)
    assert run.values.tolist() == [5.0] * 6
    assert len(run.history) < 20 and run.history[-1]["active"] == 0
    run_raw = pregel(ring, 3, max_label, max_supersteps=20, combine=None)
    assert run_raw.values.tolist() == [5.0] * 6


def test_bad_input_is_refused(graph):
    with pytest.raises(ValueError, match="damping must be between 0 and 1"):
        pregel_pagerank(graph, 3, damping=1.5)
    with pytest.raises(ValueError, match="max_supersteps must be >= 1"):
        pregel(graph, 3, max_label, max_supersteps=0)
    with pytest.raises(ValueError, match="need n >= 3"):
        web_graph(n=2)
