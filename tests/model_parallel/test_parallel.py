"""Tensor parallelism, DistBelief's partitions, hybrid data + model parallelism, and the
lesson's pictures, on real workers (lesson 09; memory per scheme: tests/memory)."""
import matplotlib
import pytest
import torch

from ddl_lab.model_parallel import distbelief as D
from ddl_lab.model_parallel import hybrid as H
from ddl_lab.model_parallel import pipeline as P
from ddl_lab.model_parallel import plots
from ddl_lab.model_parallel import tensor_parallel as T
from ddl_lab.model_parallel.stages import build_layers, digits_batches, full_step
from ddl_lab.runtime import shared_cluster

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def cluster():
    return shared_cluster(5)


def test_column_and_row_parallel_equal_the_layer(cluster):
    for out in cluster.run(T.split_layer, 7, 10, 3, seed=3):
        assert out["my columns"].shape == (3, 2)
        assert torch.allclose(out["columns"], out["whole"], atol=1e-6)
        assert torch.allclose(out["rows"], out["whole"], atol=1e-6)


@pytest.mark.parametrize("library", [False, True])
def test_tensor_parallel_training_equals_one_process(cluster, library):
    out = cluster.run(T.tp_run, 80, 2, 20, depth=3, library=library)   # 80: 5 equal blocks
    ref = build_layers("mlp", 80, 0, 3)
    losses = []
    for X, y in digits_batches(20, 2):
        losses.append(full_step(ref, [(X, y)], torch.nn.CrossEntropyLoss()))
        P.sgd_update(ref, 0.1)
    full = dict(ref.named_parameters())
    assert out[0]["losses"] == pytest.approx(losses, rel=1e-5)
    for name, param in full.items():
        shards = [o["shards"][name] for o in out]
        if shards[0].shape == param.shape:                       # replicated
            assert all(torch.allclose(s, param, atol=1e-6) for s in shards)
        else:
            dim = next(d for d in range(param.dim()) if shards[0].shape[d] != param.shape[d])
            assert torch.allclose(torch.cat(shards, dim), param, atol=1e-6)


def test_partitioned_layers_equal_one_machine(cluster):
    sent = {}
    for kind in D.KINDS:
        want = D.one_machine(kind, layers=2, batch=4)
        for n in (1, 3):
            cuts = cluster.run(D.distbelief_run, kind, n, layers=2, batch=4, cost=0.0, steps=1,
                               network=None)
            got = torch.cat([c.output for c in cuts[:n]], dim=1)
            assert torch.allclose(got, want, atol=1e-5)
            assert all(c is None for c in cuts[n:])
            sent[kind, n] = cuts[n // 2].sent
    assert sent[D.KINDS[0], 1] == sent[D.KINDS[1], 1] == 0
    assert sent[D.KINDS[1], 3] > 10 * sent[D.KINDS[0], 3]      # an FC cut: many more edges
    curve = {n: cluster.run(D.distbelief_run, D.KINDS[1], n, layers=1, batch=2, cost=1e-9,
                            steps=2, network=D.Network(1e-4)) for n in (1, 2)}
    assert set(D.speedups(curve)) == {1, 2} and D.speedups(curve)[1] == 1.0
    fig = plots.figure_diminishing_returns({D.KINDS[1]: curve})
    said = fig._suptitle.get_text()              # the emulation, read from the cuts
    assert "emulated" in said and "α = 0.1 ms" in said and "β = 8 ns/B" in said
    assert "1 ns per edge" in said and "emulated" in fig.axes[0].get_title()


def test_hybrid_equals_one_process(cluster):
    out = [o for o in cluster.run(H.hybrid_run, 2, 2, 2, 2, 24) if o is not None]
    ref_losses, ref_params = P.single_process_run("mlp", 2, 24, p=2)
    assert len(out) == 4 and {(o["replica"], o["stage"]) for o in out} == {
        (0, 0), (0, 1), (1, 0), (1, 1)}
    for o in out:
        assert torch.allclose(o["params"], ref_params[o["stage"]], atol=1e-6)
    mean = [(a + b) / 2 for a, b in zip(out[1]["losses"], out[3]["losses"])]
    assert mean == pytest.approx(ref_losses, rel=1e-5)
    assert H.layout(2, 2) == ([[0, 1], [2, 3]], [[0, 2], [1, 3]])


def test_pictures(cluster):
    runs = cluster.run(P.pipeline_run, "mlp", 3, 2, "1f1b", steps=1, batch=12)
    ax = plots.plot_pipeline(runs)
    assert len(ax.get_yticks()) == 3 and "bubble" in ax.get_title()
    plots.figure_pipelines({"1F1B": runs, "again": runs})
    plots.plot_bubbles({(2, 1): 0.5, (2, 4): 0.22, (4, 2): 0.6})
    plots.plot_step_times({"p = 2": {1: 0.01, 2: 0.012}})
