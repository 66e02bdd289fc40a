"""The capstone's meter (lesson 15): every operation on the wire is charged what the ring
model says, whoever calls it (a plan, DDP's reducer, a parameter-server client); a new group,
the raw group behind the meter, a gloo backend, a store, rpc — everything that would talk
past it — is refused, and files and sockets are recorded; the examples each worker's models
ran on are recorded; batches stop at the step budget; the scaling table."""
import dataclasses

import numpy as np
import pytest
import torch

from ddl_lab.capstone.budget import BUDGET
from ddl_lab.capstone import plots
from ddl_lab.capstone.meter import Batches, Result, WorkerReport, measure, scaling_table, table_text
from ddl_lab.ml.data import digits

SMALL = dataclasses.replace(BUDGET, steps=4)
P = 9930                                   # the CNN's parameters

PLANS = """
import torch, torch.distributed as dist, torch.nn.functional as F
from ddl_lab.ml.models import flat_grads, flat_params, set_flat_params

def every_operation(model, batches, wire):
    n, r = wire.world_size, wire.rank
    wire.allreduce(torch.ones(100))                                      # 2(n-1)/n * 400
    wire.broadcast(torch.ones(100), 0)                                   # (n-1)/n * 400
    dist.all_gather([torch.zeros(100) for _ in range(n)], torch.ones(100))    # (n-1) * 400
    dist.all_gather_into_tensor(torch.zeros(100 * n), torch.ones(100))  # (n-1) * 400
    dist.reduce_scatter_tensor(torch.zeros(100 // n), torch.ones(100))  # (n-1)/n * 400
    if r == 0:
        dist.send(torch.ones(10), 1)                                     # 40
    elif r == 1:
        dist.recv(torch.zeros(10), 0)
    wire.barrier()
    try:
        wire.server
    except RuntimeError as e:
        assert "no parameter server" in str(e)
    try:
        dist.new_group([0, 1])
    except RuntimeError as e:
        assert "talk past the meter" in str(e)
        return {"model": model}
    raise AssertionError("a new group was allowed")

def ddp(model, batches, wire):
    from torch.nn.parallel import DistributedDataParallel as DDP
    net = DDP(model)
    for X, y in batches:
        net.zero_grad()
        F.cross_entropy(net(X), y).backward()
    return net

def through_a_server(model, batches, wire):
    for X, y in batches:
        got = wire.server.pull()
        set_flat_params(model, torch.from_numpy(got.theta).float())
        model.zero_grad()
        F.cross_entropy(model(X), y).backward()
        wire.server.push(flat_grads(model).double().numpy(), got.versions)
    set_flat_params(model, torch.from_numpy(wire.server.pull().theta).float())
    return model

def closed(what, call):
    try:
        call()
    except RuntimeError as e:
        assert "closes every channel the meter cannot count" in str(e), (what, e)
        return
    raise AssertionError(f"{what} was allowed")

def every_channel_past_the_meter(model, batches, wire):
    import os, socket, sys, tempfile
    sys.modules.pop("tabnanny", None)
    import tabnanny                 # an import reads code from sys.path: not recorded
    from torch.distributed import distributed_c10d as c10d, rpc
    t = torch.ones(3)
    raw = dist.group.WORLD.inner
    closed("the raw group, as an attribute", lambda: raw.allreduce([t]).wait())
    closed("the raw group, through dist", lambda: dist.all_reduce(t, group=wire._tap._inner))
    closed("the cluster's world group", lambda: [dist.broadcast(t, 0, group=g)
                                                 for g in list(c10d._world.pg_map)
                                                 if g.size() == 5])
    closed("a gloo backend", lambda: raw._get_backend(torch.device("cpu")).allreduce([t]))
    closed("the store", lambda: c10d._get_default_store().set("key", "value"))
    closed("split_group", lambda: raw.split_group([0, 1]))
    closed("rpc", lambda: rpc.init_rpc(f"w{wire.rank}", rank=wire.rank,
                                       world_size=wire.world_size))
    dist.all_reduce(t)                                      # the default group: metered
    assert t.tolist() == [wire.world_size] * 3
    path = os.path.join(tempfile.gettempdir(), f"ddl_lab_meter_{os.getpid()}.txt")
    with open(path, "w") as f:
        f.write("x")
    os.remove(path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
    for X, y in batches:
        model(X)
    from ddl_lab.ml.data import digits
    model(digits()[0].tensors()[0][:100])                    # 100 of the whole training set
    return model

def average_once(model, batches, wire):
    for X, y in batches:
        model.zero_grad()
        F.cross_entropy(model(X), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.3 * p.grad
    from ddl_lab.data_parallel.engine import average_params
    average_params(model)
    return model
"""


@pytest.fixture(scope="module")
def plans():
    from tests.conftest import define_cell
    return define_cell(PLANS)


def test_every_operation_is_charged_what_the_ring_model_says(plans):
    r = measure(plans["every_operation"], SMALL)
    n, S = 4, 400
    for rep in r.reports:
        assert rep.by_op["all_reduce"] == pytest.approx(2 * (n - 1) / n * S)
        assert rep.by_op["broadcast"] == pytest.approx((n - 1) / n * S)
        assert rep.by_op["all_gather"] == pytest.approx(2 * (n - 1) * S)
        assert rep.by_op["reduce_scatter"] == pytest.approx((n - 1) / n * S)
        assert rep.by_op.get("send", 0) == (40 if rep.rank == 0 else 0)
        assert rep.params is None and rep.returned == "a dict"
    assert r.sent[0] - r.sent[1] == 40


def test_every_channel_past_the_meter_is_closed_or_recorded(plans):
    r = measure(plans["every_channel_past_the_meter"], SMALL)
    for rep in r.reports:
        assert rep.by_op == {"all_reduce": pytest.approx(2 * 3 / 4 * 12)}   # only dist.*
        kinds = {t.kind for t in rep.touched if "ddl_lab_meter_" in t.what}
        assert kinds == {"wrote", "removed"}
        assert any(t.kind == "socket" and "127.0.0.1" in t.what for t in rep.touched)
        assert not any("tabnanny" in t.what for t in rep.touched)
        assert rep.handed == SMALL.steps * SMALL.batch_size <= rep.own   # + some of the 100
        assert 50 < rep.foreign <= 100 and rep.shard in (336, 337)    # most of 100: others'
    assert "other workers' shards" in r.summary() and "data past the meter" in r.summary()
    measure(plans["average_once"], SMALL)                   # and all is open again after


def test_ddp_is_metered_inside_backward(plans):
    r = measure(plans["ddp"], SMALL)
    for rep in r.reports:
        assert rep.calls["all_reduce"] == SMALL.steps           # one bucket per step
        assert rep.by_op["all_reduce"] == pytest.approx(SMALL.steps * 1.5 * 4 * P)
        assert rep.by_op["broadcast"] >= 0.75 * 4 * P           # DDP's initial broadcast
        assert rep.tampered is None and not rep.touched and rep.foreign == 0
    assert r.spread == 0 and r.steps == SMALL.steps


def test_a_parameter_server_client_is_metered(plans):
    r = measure(plans["through_a_server"], SMALL,
                parameter_server=dict(shards=2, rule="sgd", lr=0.3, mode="bsp"))
    for rep in r.reports:
        # each step: θ pulled from 2 shards, a gradient pushed to them (float64, pickled)
        assert rep.calls["parameter server"] >= 4 * (SMALL.steps + 1)
        assert rep.by_op["parameter server"] > 2 * 8 * P * SMALL.steps
        assert "all_reduce" not in rep.by_op and rep.tampered is None   # the tally agrees
    assert r.spread == 0


def test_one_worker_sends_nothing_and_the_table_reads(plans, capsys):
    results = scaling_table(plans["average_once"], (1, 2), SMALL)
    assert [r.world_size for r in results] == [1, 2] and results[0].bytes == 0
    assert results[1].bytes == pytest.approx(4 * P)         # 2(n-1)/n = 1 for n = 2
    text = table_text(results)
    assert text.splitlines()[0].split()[:3] == ["workers", "accuracy", "sent/worker"]
    assert len(text.splitlines()) == 3 and "misses the brief" in results[0].summary()


def test_batches_stop_at_the_step_budget_and_reshuffle_each_pass():
    train, _ = digits()
    small = train.subset(np.arange(40))
    b = Batches(small, 16, 7, seed=0)
    got = list(b)
    assert len(got) == 7 == b.drawn and list(b) == []
    assert all(X.shape == (16, 64) and X.dtype == torch.float32 for X, _ in got)
    first, second = torch.cat([y for _, y in got[:2]]), torch.cat([y for _, y in got[2:4]])
    assert not torch.equal(first, second)          # a new order in the second pass


def test_the_budget_figure_colours_what_misses_the_brief():
    def result(accuracy, sent):
        return Result(BUDGET, 4, [WorkerReport(0, sent, {}, {}, {}, 150, 1.0, np.zeros(3),
                                               accuracy, "", None)])
    fig = plots.figure_budget({"over": result(0.97, 9e6), "within": result(0.96, 2e5)})
    left, right = fig.axes
    assert [t.get_text() for t in left.get_yticklabels()] == ["over", "within"]
    red, green = (tuple(round(c, 2) for c in p.get_facecolor()) for p in left.patches)
    assert red != green and len({tuple(p.get_facecolor()) for p in right.patches}) == 1
    assert left.get_xlim()[0] < BUDGET.bytes < left.get_xlim()[1]
