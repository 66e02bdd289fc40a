"""Stages by hand, GPipe and 1F1B on real workers, torch's pipelining beside them: each
equals one process (lesson 09)."""
import pytest
import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.model_parallel import library as L
from ddl_lab.model_parallel import pipeline as P
from ddl_lab.model_parallel import stages as S
from ddl_lab.runtime import shared_cluster
from ddl_lab.timeline import Span, Timeline


@pytest.fixture(scope="module")
def cluster():
    return shared_cluster(5)


def textbook_train(kind, p, m, steps, batch, lr=0.1):
    """Worker: train with the lesson's ``stage_step`` (the textbook version)."""
    rank = dist.get_rank()
    S.group(list(range(p)))
    if rank >= p:
        return None
    stage = S.cut(S.build_layers(kind), p)[rank]
    prev, nxt = S.neighbours(rank, list(range(p)))
    losses = []
    for X, y in S.digits_batches(batch, steps):
        loss = S.stage_step(stage, S.microbatches(X, y, m), nn.CrossEntropyLoss(), prev, nxt)
        losses.append(loss)
        P.sgd_update(stage, lr)
    return losses, P.stage_params(stage)


def _same_as_one_process(runs, kind, p, steps, batch, losses=None):
    ref_losses, ref_params = P.single_process_run(kind, steps, batch, p=p)
    got = losses if losses is not None else runs[p - 1].losses
    assert got == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    for r in range(p):
        assert torch.allclose(runs[r].params, ref_params[r], atol=1e-6)


@pytest.mark.parametrize("p", [2, 3, 4])
def test_textbook_stages_train_like_one_process(cluster, p):
    kind, m = ("cnn", 3) if p == 3 else ("mlp", 1 if p == 2 else 5)   # m = 5 ∤ 26
    out = cluster.run(textbook_train, kind, p, m, 3, 26)
    ref_losses, ref_params = P.single_process_run(kind, 3, 26, p=p)
    assert out[p - 1][0] == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    for r in range(p):
        assert torch.allclose(out[r][1], ref_params[r], atol=1e-6)
    assert all(o is None for o in out[p:])


@pytest.mark.parametrize("schedule,m", [("gpipe", 4), ("1f1b", 7), ("serial", 3), ("none", 1)])
def test_every_schedule_equals_one_process(cluster, schedule, m):
    runs = cluster.run(P.pipeline_run, "mlp", 4, m, schedule, steps=2, batch=30)
    _same_as_one_process(runs, "mlp", 4, 2, 30)
    tl = runs[1].timelines[-1]
    assert tl.total("forward") > 0 and tl.total("backward") > 0 and tl.total("wait") > 0
    assert {s.step for s in tl.spans if s.kind == "forward"} == set(range(runs[1].m))


def test_engine_equals_textbook_step(cluster):
    """The instrumented engine with the GPipe order is the lesson's stage_step."""
    engine = cluster.run(P.pipeline_run, "cnn", 3, 4, "gpipe", steps=2, batch=21)
    book = cluster.run(textbook_train, "cnn", 3, 4, 2, 21)
    assert engine[2].losses == pytest.approx(book[2][0], rel=1e-6)
    for r in range(3):
        assert torch.allclose(engine[r].params, book[r][1], atol=1e-7)


def test_orders():
    for p, m in [(2, 1), (3, 2), (4, 8), (5, 3)]:
        for rank in range(p):
            for make in (P.gpipe_order, P.one_f_one_b_order, P.naive_order):
                assert P.validate_order(make(rank, p, m), m) is None
            assert P.in_flight(P.one_f_one_b_order(rank, p, m)) == min(p - rank, m)
            assert P.in_flight(P.gpipe_order(rank, p, m)) == m
    assert P.one_f_one_b_order(1, 4, 6) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3),
                                            ("B", 1), ("F", 4), ("B", 2), ("F", 5), ("B", 3),
                                            ("B", 4), ("B", 5)]
    assert "comes before" in P.validate_order([("B", 0), ("F", 0)], 1)
    assert "missing" in P.validate_order([("F", 0)], 1)
    assert "twice" in P.validate_order([("F", 0), ("F", 0), ("B", 0)], 1)


def test_one_f_one_b_keeps_fewer_activations(cluster):
    """Measured bytes autograd keeps: 1F1B holds min(p − rank, m) micro-batches, GPipe m."""
    gpipe = cluster.run(P.pipeline_run, "mlp", 4, 8, "gpipe", batch=32, hidden=128)
    ofob = cluster.run(P.pipeline_run, "mlp", 4, 8, "1f1b", batch=32, hidden=128)
    for r in range(1, 3):                 # stages 1, 2 keep only full micro-batch activations
        assert ofob[r].peak_activations * 8 == gpipe[r].peak_activations * (4 - r)
    assert max(r.peak_activations for r in ofob[:4]) <= 0.6 * max(
        r.peak_activations for r in gpipe[:4])


def test_stacked_outputs_are_the_layer_outputs(cluster):
    """ID2223 review question 2: the intermediate outputs, synchronised and stacked, are the model's."""
    runs = cluster.run(P.pipeline_run, "mlp", 2, 4, "gpipe", batch=20, keep_outputs=True)
    layers = S.build_layers("mlp")
    X, _ = S.digits_batches(20, 1)[0]
    with torch.no_grad():
        assert torch.allclose(runs[0].outputs, S.cut(layers, 2)[0](X), atol=1e-6)
        assert torch.allclose(runs[1].outputs, layers(X), atol=1e-6)


def test_bubble_fraction_of_a_known_timeline():
    def tl(rank, spans):
        t = Timeline(rank=rank)
        t.spans = [Span(k, a, b) for k, a, b in spans]
        return t
    a = P.StageRun(0, 2, 1, "gpipe", [tl(0, [("forward", 0, 1), ("backward", 3, 4)])])
    b = P.StageRun(1, 2, 1, "gpipe", [tl(1, [("wait", 0, 1), ("forward", 1, 2),
                                              ("backward", 2, 3)])])
    assert P.bubble_fraction([a, b]) == pytest.approx(0.5)
    assert P.ideal_bubble(2, 1) == 0.5 and P.ideal_bubble(4, 8) == pytest.approx(3 / 11)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_torch_pipelining_matches(cluster, schedule):
    runs = cluster.run(L.library_run, "mlp", 2, 4, schedule, steps=2, batch=32)
    _same_as_one_process(runs, "mlp", 2, 2, 32)


def test_cuts_and_models():
    layers = S.build_layers("mlp", 32, depth=5)
    by_params = S.cut(layers, 4, by="params")
    assert sum(len(s) for s in by_params) == len(layers) == 12
    sizes = [sum(q.numel() for q in s.parameters()) for s in by_params]
    assert max(sizes) < 0.4 * sum(sizes)
    assert [len(s) for s in S.cut(S.build_layers("cnn"), 3)] == [3, 3, 2]
    with pytest.raises(ValueError, match="cannot cut"):
        S.cut(layers, 13)
    with pytest.raises(ValueError, match="micro-batches"):
        S.microbatches(torch.zeros(3, 2), torch.zeros(3), 4)
    assert [len(y) for _, y in S.microbatches(torch.zeros(10, 2), torch.zeros(10), 4)] == \
        [3, 3, 2, 2]
    assert S.loss_share(nn.CrossEntropyLoss(reduction="sum"), 3, 10) == 1.0
