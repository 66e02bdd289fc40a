"""Lesson 15's checks: the budget arithmetic names the ring's usual slips and accepts the
answer in a learner's number types; the capstone runs plans on 4 real workers, passes the
solution and another right style, and names a plan that sends fp32 at every step, one that
never communicates, one that reports its own bytes, one that averages too rarely on skewed
shards, one whose workers all train on the same data (silently, or beside a few bytes), one
that averages through files or shared memory, one that talks on the raw group behind the
meter, one that sets the meter's count back, and one that returns no model (issue 26)."""
import math
import os

import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed

PLANS = """
import os, torch, torch.distributed as dist, torch.nn.functional as F
from ddl_lab.compression.compressors import ErrorFeedback, TopK
from ddl_lab.data_parallel.engine import average_params
from ddl_lab.ml.models import flat_grads, flat_params, set_flat_params

def step(model, X, y, lr=0.3):
    model.zero_grad()
    F.cross_entropy(model(X), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad

def topk_every_step(model, batches, wire):
    # another right style: the gradient, top-k 1% with error feedback, at every step
    ef = ErrorFeedback(TopK(0.01))
    for X, y in batches:
        model.zero_grad()
        F.cross_entropy(model(X), y).backward()
        g = flat_grads(model)
        got = [ef.decode(m, g.numel()) for m in wire.all_gather_bytes(ef.encode(g))]
        set_flat_params(model, flat_params(model) - 0.3 * torch.stack(got).mean(0))
    return model

def fp32_every_step(model, batches, wire):
    for X, y in batches:
        model.zero_grad()
        F.cross_entropy(model(X), y).backward()
        g = flat_grads(model)
        dist.all_reduce(g)
        set_flat_params(model, flat_params(model) - 0.3 * g / dist.get_world_size())
    return model

def alone(model, batches, wire):
    for X, y in batches:
        step(model, X, y)
    return model

def reports_bytes(model, batches, wire):
    sent = 0
    for X, y in batches:
        step(model, X, y)
    g = flat_params(model)
    dist.all_reduce(g)
    sent += g.numel()                      # "one number per parameter"
    set_flat_params(model, g / dist.get_world_size())
    return model, sent

def rarely(model, batches, wire):
    for t, (X, y) in enumerate(batches, 1):
        step(model, X, y)
        if t % 50 == 0 or t == len(batches):
            average_params(model)
    return model

def forgets_return(model, batches, wire):
    for X, y in batches:
        step(model, X, y)
        break

def same_data(model, batches, wire):
    from ddl_lab.ml.data import digits
    X, y = digits()[0].tensors()          # everyone trains on all of it, in the same order
    for t, _ in enumerate(batches):
        rows = slice(16 * t % 1328, 16 * t % 1328 + 16)
        step(model, X[rows], y[rows])
    return model

def untrained(model, batches, wire):
    average_params(model)
    return model

def whole_set_few_bytes(model, batches, wire):
    # every worker: the whole training set, the same seed; a few bytes to look distributed
    from ddl_lab.ml.data import digits
    X, y = digits()[0].tensors()
    g = torch.Generator().manual_seed(0)
    for _ in batches:
        rows = torch.randint(len(y), (16,), generator=g)
        step(model, X[rows], y[rows])
    wire.allreduce(torch.zeros(1))
    return model

def through_files(model, batches, wire):
    # average through files in the temporary directory, beside one tiny allreduce
    import tempfile
    for X, y in batches:
        step(model, X, y)
    path = lambda r: os.path.join(tempfile.gettempdir(), f"ddl_lab_capstone_{TOKEN}_{r}.pt")
    torch.save(flat_params(model), path(wire.rank))
    wire.allreduce(torch.zeros(225))
    models = [torch.load(path(r)) for r in range(wire.world_size)]
    wire.barrier()
    os.remove(path(wire.rank))
    set_flat_params(model, sum(models) / len(models))
    return model

def through_shared_memory(model, batches, wire):
    import numpy as np
    from multiprocessing import resource_tracker, shared_memory
    for X, y in batches:
        step(model, X, y)
    mine = flat_params(model).numpy()
    name, n = f"ddl_lab_capstone_{TOKEN}", wire.world_size
    if wire.rank == 0:
        shm = shared_memory.SharedMemory(name=name, create=True, size=n * mine.nbytes)
    wire.barrier()
    if wire.rank != 0:
        shm = shared_memory.SharedMemory(name=name)
        resource_tracker.unregister(shm._name, "shared_memory")
    table = np.ndarray((n, mine.size), dtype=np.float32, buffer=shm.buf)
    table[wire.rank] = mine
    wire.barrier()
    set_flat_params(model, torch.from_numpy(table.mean(0)))
    del table
    wire.barrier()
    shm.close()
    if wire.rank == 0:
        shm.unlink()
    return model

def raw_group(model, batches, wire):
    # the process group the meter wraps, reached as an attribute of the wrapper
    for X, y in batches:
        step(model, X, y)
    theta = flat_params(model)
    dist.all_reduce(theta, group=dist.group.WORLD.inner)
    set_flat_params(model, theta / wire.world_size)
    wire.allreduce(torch.zeros(1))
    return model

def resets_the_meter(model, batches, wire):
    # lesson 05's plain synchronous SGD, then the meter's count set back to a few bytes
    for X, y in batches:
        model.zero_grad()
        F.cross_entropy(model(X), y).backward()
        g = wire.allreduce(flat_grads(model)) / wire.world_size
        set_flat_params(model, flat_params(model) - 0.3 * g)
    wire._tap.sent = 6.0
    return model

def world_group(model, batches, wire):
    # dist.group.WORLD is the metered group: its bytes count
    for X, y in batches:
        step(model, X, y)
        theta = flat_params(model)
        dist.all_reduce(theta, group=dist.group.WORLD)
        set_flat_params(model, theta / wire.world_size)
    return model
"""


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------ task 1: the arithmetic

def budget_loop(params, workers, steps, period, value_bytes):
    """Another right style: step through the run, count the bytes of each averaging."""
    sent = 0.0
    for t in range(1, steps + 1):
        if t % period == 0 or t == steps:
            sent += 2 * (workers - 1) / workers * params * value_bytes
    return int(round(sent)) if sent == int(sent) else sent


def test_right_budget_arithmetic_passes(solution, capsys):
    from tests.learner_types import in_learner_types
    mine = solution("15_capstone", "my_budget_bytes")
    check.budget_bytes(mine)
    check.budget_bytes(budget_loop, seed=3)
    check.budget_bytes(in_learner_types(mine, "float32"), seed=1)       # np.float32, 10.0
    check.budget_bytes(in_learner_types(mine, "numpy"), seed=2)         # np.float64, np.int64
    check.budget_bytes(lambda *a: round(mine(*a)), seed=4)              # whole bytes
    out = capsys.readouterr().out
    assert out.count("✔ budget_bytes: passed") == 5 and "period of 30 steps" in out


def ring(p, n, T, H, b, rounds=math.ceil, share=None):
    return rounds(T / H) * (2 * (n - 1) / n if share is None else share(n)) * p * b


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda p, n, T, H, b: ring(p, n, T, H, b, rounds=math.floor), "⌈steps/period⌉"),
    (lambda p, n, T, H, b: ring(p, n, T, H, b, share=lambda n: 1), "you charged S per allreduce"),
    (lambda p, n, T, H, b: ring(p, n, T, H, b, share=lambda n: 2), "you charged 2S"),
    (lambda p, n, T, H, b: ring(p, n, T, H, b, share=lambda n: n - 1), "an all-gather"),
    (lambda p, n, T, H, b: ring(p, n, T, H, b, share=lambda n: 2 * (n - 1)),
     "each of the ring's 2\\(n−1\\) steps"),
    (lambda p, n, T, H, b: 8 * ring(p, n, T, H, b), "in bits"),
    (lambda p, n, T, H, b: ring(p, n, T, 1, b), "at every step"),
    (lambda p, n, T, H, b: ring(p, n, T, H, 4), "4 bytes per value"),
    (lambda p, n, T, H, b: None, "returned None"),
])
def test_wrong_budget_arithmetic_is_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.budget_bytes(wrong)


# ------------------------------------------------------------ task 2: the capstone

@pytest.fixture(scope="module")
def plans():
    from tests.conftest import define_cell
    return define_cell(PLANS, TOKEN=f"test{os.getpid()}")


def test_the_solution_and_another_right_style_pass(solution, plans, capsys):
    check.capstone(plans["topk_every_step"])
    out = capsys.readouterr().out
    assert out.count("✔ capstone: passed") == 1 and "plain synchronous SGD would send" in out


@pytest.mark.parametrize("plan, faults", [
    ("fp32_every_step", ["8.94 MB per worker", "150 all_reduce calls of 39,720 B",
                         "the whole model in fp32", "one every step", "lesson 08"]),
    ("alone", ["never communicated", "different models", "combine"]),
    ("reports_bytes", ["as if reporting a byte count", "counted by the meter"]),
    ("same_data", ["without sending a byte", "their own shards"]),
    ("whole_set_few_bytes", ["every worker's model ran on training examples outside its own "
                             "shard", "examples of other workers' shards", "digits.csv.gz",
                             "the whole training set"]),
    ("through_files", ["passed data past the meter, through files",
                       f"ddl_lab_capstone_test{os.getpid()}_1.pt read by ranks 0, 1, 2, 3, "
                       "removed by rank 1", "counted 1.35 KB per worker"]),
    ("through_shared_memory", ["passed data past the meter, through shared memory",
                               f"/dev/shm/ddl_lab_capstone_test{os.getpid()}",
                               "mapped by ranks 0, 1, 2, 3"]),
    ("raw_group", ["failed on rank 0 of 4", "allreduce was called on a process group the "
                   "meter does not watch", "the raw group behind it"]),
    ("resets_the_meter", ["changed the meter's own count", "on rank 0 it reads 6 B, but "
                          "8.94 MB went out"]),
    ("world_group", ["8.94 MB per worker", "150 all_reduce calls of 39,720 B"]),
    ("rarely", ["below the 94% target", "drifts"]),
    ("forgets_return", ["returned None", "return the trained model"]),
    ("untrained", ["never trained"]),
])
def test_wrong_plans_are_named(plans, plan, faults):
    with pytest.raises(CheckFailed) as e:
        check.capstone(plans[plan])
    for fault in faults:
        assert fault in str(e.value), str(e.value)
