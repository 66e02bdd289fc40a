"""Lesson 10's checks pass right answers written in several styles and name the mistakes
learners make: a ZeRO-2 step on real workers, ZeRO's bytes per rank, a memory plan."""
import math
import re

import numpy as np
import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.runtime.collectives import all_gather_single, reduce_scatter_single

STEM = "10_memory"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------------- ZeRO-2 step

def _scatter(grad, n):
    """Padded reduce-scatter: (this rank's summed chunk, chunk size, lo, hi)."""
    size = -(-grad.numel() // n)
    rank = dist.get_rank()
    lo, hi = min(rank * size, grad.numel()), min((rank + 1) * size, grad.numel())
    padded = torch.zeros(size * n, dtype=grad.dtype)
    padded[:grad.numel()] = grad
    mine = torch.empty(size, dtype=grad.dtype)
    reduce_scatter_single(mine, padded)
    return mine[:hi - lo], size, lo, hi


def ring_style(param, grad, state, make_optimizer):
    """Another right style: lesson 06's ring by hand (isend/irecv), tensor_split chunks, the
    optimizer on a view of param itself (no copy)."""
    n, r = dist.get_world_size(), dist.get_rank()
    chunks = list(grad.tensor_split(n))
    for s in range(n - 1):
        out, into = chunks[(r - s - 1) % n], chunks[(r - s - 2) % n]
        incoming = torch.empty_like(into)
        work = dist.isend(out.contiguous(), (r + 1) % n) if out.numel() else None
        if into.numel():
            dist.recv(incoming, (r - 1) % n)
            into += incoming
        if work:
            work.wait()
    mine = list(param.tensor_split(n))
    if "opt" not in state:
        state["opt"] = make_optimizer([mine[r]])
    state["opt"].param_groups[0]["params"][0].grad = chunks[r] / n
    state["opt"].step()
    state["opt"].param_groups[0]["params"][0].grad = None
    for s in range(n - 1):
        out, into = mine[(r - s) % n], mine[(r - s - 1) % n]
        work = dist.isend(out.contiguous(), (r + 1) % n) if out.numel() else None
        if into.numel():
            dist.recv(into, (r - 1) % n)
        if work:
            work.wait()


def ddp_like(param, grad, state, make_optimizer):
    dist.all_reduce(grad)
    state.setdefault("o", make_optimizer([param]))
    param.grad = grad / dist.get_world_size()
    state["o"].step()


def whole_state(param, grad, state, make_optimizer):
    """Reduce-scatter and all-gather the gradient, then the full vector on every rank."""
    n = dist.get_world_size()
    mine, size, lo, hi = _scatter(grad, n)
    out = torch.empty(size * n, dtype=grad.dtype)
    all_gather_single(out, torch.cat([mine, grad.new_zeros(size - (hi - lo))]))
    state.setdefault("o", make_optimizer([param]))
    param.grad = out[:param.numel()] / n
    state["o"].step()


def no_gather(param, grad, state, make_optimizer):
    n = dist.get_world_size()
    mine, size, lo, hi = _scatter(grad, n)
    state.setdefault("o", make_optimizer([param[lo:hi]]))
    state["o"].param_groups[0]["params"][0].grad = mine / n
    state["o"].step()


def summed(param, grad, state, make_optimizer):
    n = dist.get_world_size()
    mine, size, lo, hi = _scatter(grad, n)
    state.setdefault("o", make_optimizer([param[lo:hi]]))
    state["o"].param_groups[0]["params"][0].grad = mine.clone()
    state["o"].step()
    out = torch.empty(size * n, dtype=param.dtype)
    all_gather_single(out, torch.cat([param[lo:hi], param.new_zeros(size - (hi - lo))]))
    param.copy_(out[:param.numel()])


def gathers_whole_gradients(param, grad, state, make_optimizer):
    """Every rank gathers every rank's whole gradient and, after its step, every rank's whole
    parameters: (n−1)·S sent twice, not 2(n−1)/n·S."""
    n, rank = dist.get_world_size(), dist.get_rank()
    everyone = [torch.empty_like(grad) for _ in range(n)]
    dist.all_gather(everyone, grad)
    cuts = torch.arange(param.numel()).tensor_split(n)
    mine = cuts[rank]
    state.setdefault("o", make_optimizer([param[mine[0]:mine[-1] + 1]] if len(mine) else []))
    if len(mine):
        state["o"].param_groups[0]["params"][0].grad = (
            torch.stack(everyone).sum(0)[mine[0]:mine[-1] + 1] / n)
        state["o"].step()
    out = [torch.empty_like(param) for _ in range(n)]
    dist.all_gather(out, param)
    for r, c in enumerate(cuts):
        if len(c):
            param[c[0]:c[-1] + 1] = out[r][c[0]:c[-1] + 1]


def divides_first(param, grad, state, make_optimizer):
    """Another right style: the gradient divided by n BEFORE the reduce-scatter (as DDP and
    DeepSpeed do); float32 rounds it differently from dividing after."""
    n = dist.get_world_size()
    mine, size, lo, hi = _scatter(grad / n, n)
    state.setdefault("o", make_optimizer([param[lo:hi]]))
    state["o"].param_groups[0]["params"][0].grad = mine.clone()
    state["o"].step()
    out = torch.empty(size * n, dtype=param.dtype)
    all_gather_single(out, torch.cat([param[lo:hi], param.new_zeros(size - (hi - lo))]))
    param.copy_(out[:param.numel()])


class _Keeper:
    """A learner's small object holding the optimizer (not a dict, list or optimizer)."""
    __slots__ = ("opt",)

    def __init__(self, opt):
        self.opt = opt


def whole_state_in_an_object(param, grad, state, make_optimizer):
    """whole_state, its optimizer kept inside an object of the learner's."""
    n = dist.get_world_size()
    mine, size, lo, hi = _scatter(grad, n)
    out = torch.empty(size * n, dtype=grad.dtype)
    all_gather_single(out, torch.cat([mine, grad.new_zeros(size - (hi - lo))]))
    state.setdefault("k", _Keeper(make_optimizer([param])))
    param.grad = out[:param.numel()] / n
    state["k"].opt.step()


def keeps_padded_gradient(param, grad, state, make_optimizer):
    """Right step on its chunk, but the padded whole gradient is kept in state between steps."""
    n = dist.get_world_size()
    size = -(-grad.numel() // n)
    rank = dist.get_rank()
    lo, hi = min(rank * size, grad.numel()), min((rank + 1) * size, grad.numel())
    state["padded"] = torch.zeros(size * n, dtype=grad.dtype)
    state["padded"][:grad.numel()] = grad
    mine = torch.empty(size, dtype=grad.dtype)
    reduce_scatter_single(mine, state["padded"])
    state.setdefault("o", make_optimizer([param[lo:hi]]))
    state["o"].param_groups[0]["params"][0].grad = mine[:hi - lo] / n
    state["o"].step()
    out = torch.empty(size * n, dtype=param.dtype)
    all_gather_single(out, torch.cat([param[lo:hi], param.new_zeros(size - (hi - lo))]))
    param.copy_(out[:param.numel()])


def test_right_zero2_steps_pass(solution, capsys):
    check.zero2_step(ring_style)
    check.zero2_step(divides_first)
    out = capsys.readouterr().out
    assert out.count("✔ zero2_step: passed") == 2
    assert "4 ranks: 1.50·S sent" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (ddp_like, r"called dist.all_reduce .*needs only this rank's chunk"),
    (whole_state, r"keeps 12,004 bytes .*optimizer state of the whole vector"),
    (whole_state_in_an_object, r"keeps 12,004 bytes .*optimizer state of the whole vector"),
    (keeps_padded_gradient, r"state\['padded'\]: 1,002 values .*the whole vector, padded to n "
                            r"chunks"),
    (no_gather, r"own chunk is right but the other chunks are not.*all-gather"),
    (summed, r"summed over the ranks, not averaged"),
    (gathers_whole_gradients, r"sends too much .*2\(n−1\)/n·S"),
])
def test_zero2_step_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.zero2_step(wrong)


def test_a_padded_gradient_is_not_called_optimizer_state():
    with pytest.raises(CheckFailed) as e:
        check.zero2_step(keeps_padded_gradient)
    assert "optimizer state of the whole vector" not in str(e.value)


def test_held_bytes_finds_state_wherever_it_is_kept():
    """Objects with slots or a __dict__, closures and numpy views count; a storage counts once;
    the caller's own tensors do not."""
    from ddl_lab.check.memory import held_bytes
    big, mine, arr = torch.zeros(100), torch.zeros(50), np.zeros(10)

    def step():
        return big
    keeper = _Keeper({"a": big[:10], "view": arr[2:], "arr": arr, "own": mine})
    total, held = held_bytes([("state", {"k": keeper}), ("step", step)],
                             {mine.untyped_storage().data_ptr()})
    assert total == 400 + 80 and len(held) == 2
    assert held_bytes([("step", step)], set())[0] == 400
    assert held_bytes([("state", {"k": keeper})], set())[1][0][2] == "state['k'].opt['a']"


def test_expected_and_got_never_print_alike():
    """A message prints more digits until got and expected differ (diagnose.apart), in
    every message built on ``differs``; zero2_step's summed gradient under Adam is one."""
    from ddl_lab.check._diagnose import apart, differs
    assert apart(0.37796112, 0.37796108) == ("0.37796112", "0.37796108")
    assert apart(1234567.0, 1234568.0, ",") == ("1,234,567", "1,234,568")
    assert apart(0.5, 0.5)[0] != apart(0.5, 0.5)[1]
    message = differs(np.array([1.0, 0.377961123]), np.array([1.0, 0.377961101]), rtol=1e-9)
    shown = re.search(r"is (\S+), expected (\S+)", message)
    assert shown and shown[1] != shown[2]


# ------------------------------------------------------------------- bytes per rank

def bytes_as_tensor(params, ranks, stage, precision, optimizer):
    """Another right style: a table of parts, numpy and torch numbers."""
    e = np.float32(2 if precision in ("bf16", "fp16") else 4)
    parts = {"p": e, "g": e,
             "s": {"sgd": 0, "momentum": 4, "adam": 8}[optimizer] + (4 if e == 2 else 0)}
    shard = "sgp"[:stage]
    return torch.tensor(sum(b * params / (ranks if k in shard else 1) for k, b in parts.items()),
                        dtype=torch.float64)


def bytes_padded_shards(params, ranks, stage, precision, optimizer):
    """Another right style: each shard padded to ⌈params/ranks⌉ whole parameters, integers."""
    e = 2 if precision in ("bf16", "fp16") else 4
    state = {"sgd": 0, "momentum": 4, "adam": 8}[optimizer] + (4 if e == 2 else 0)
    shard = -(-params // ranks)
    return sum(b * (shard if sharded else params)
               for b, sharded in ((e, stage >= 3), (e, stage >= 2), (state, stage >= 1)))


def test_right_zero_bytes_pass(solution, capsys):
    check.zero_bytes(bytes_as_tensor)
    check.zero_bytes(bytes_padded_shards)
    assert capsys.readouterr().out.count("✔ zero_bytes: passed") == 2


def _no_master(P, n, stage, precision, optimizer):
    low = precision != "fp32"
    e, K = (2 if low else 4), {"sgd": 0, "momentum": 4, "adam": 8}[optimizer]
    return P * (e / (n if stage >= 3 else 1) + e / (n if stage >= 2 else 1)
                + K / (n if stage >= 1 else 1))


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda *a: None, "returned None"),
    (_no_master, "master copy is missing"),
    (lambda P, n, s, p, o: (16 if o == "adam" else 8 if o == "momentum" else 4) * P
     / (n if s else 1) * (1 if p == "fp32" else 1), "nothing is divided|everything was divided|"
     "stages are off by one|state per parameter"),
    (lambda P, n, s, p, o: (_no_master(P, 1, 0, p, o) + (4 * P if p != "fp32" else 0))
     / (n if s else 1), r"everything was divided by n"),
    (lambda P, n, s, p, o: _no_master(P, n, s, p, o) + (P * (2 / (n if s >= 2 else 1)
                                                             + 4 / (n if s else 1))
                                                        if p != "fp32" else 0),
     r"gradients are counted in fp32"),
    (lambda P, n, s, p, o: (2 + 2 + 12 if p != "fp32" else 16), "bytes per parameter, not per rank"),
    (lambda P, n, s, p, o: _no_master(P, n, s, "fp32", o) if p == "fp16" else
     _no_master(P, n, s, p, o) + (4 * P / (n if s else 1) if p == "bf16" else 0),
     r"precision='fp16'.*fp16 was counted as fp32"),
    (lambda P, n, s, p, o: bytes_padded_shards(P, n, s, p, o) + 16 * (P % n > 0),
     r"returned .*expected"),
])
def test_zero_bytes_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.zero_bytes(wrong)


# ------------------------------------------------------------------- the memory plan

def most_sharded_that_fits(params, ranks, batch, act, act_recompute, budget, max_sent):
    """Another right style: stage 3 first, bf16, recomputation, then fall back on sending."""
    per = math.ceil(batch / ranks)
    for stage, precision, recompute in [(3, "bf16", False), (2, "bf16", True), (3, "bf16", True),
                                        (2, "bf16", False), (1, "bf16", True), (0, "bf16", True),
                                        (3, "fp32", True), (2, "fp32", True)]:
        e = 2 if precision == "bf16" else 4
        kept = params * (e / (ranks if stage == 3 else 1) + e / (ranks if stage >= 2 else 1)
                         + 12 / (ranks if stage else 1)) \
            + per * (act_recompute if recompute else act) * e / 4
        sent = ((4 if recompute else 3) if stage == 3 else 2) * (ranks - 1) / ranks * params * e
        if kept <= budget and sent <= max_sent:
            return {"stage": np.int64(stage), "precision": precision, "recompute": recompute}
    raise ValueError("nothing fits")


def stage3_sends_like_the_others(params, ranks, batch, act, act_recompute, budget, max_sent):
    """The right planner with one wrong cost: stage 3 sends 2(n−1)/n·Ψ, like stages 0–2."""
    per = math.ceil(batch / ranks)
    for recompute in (False, True):
        for precision in ("fp32", "bf16"):
            for stage in range(4):
                e = 2 if precision == "bf16" else 4
                kept = params * (e / (ranks if stage == 3 else 1)
                                 + e / (ranks if stage >= 2 else 1)
                                 + (8 + (4 if e == 2 else 0)) / (ranks if stage else 1)) \
                    + per * (act_recompute if recompute else act) * e / 4
                if kept <= budget and 2 * (ranks - 1) / ranks * params * e <= max_sent:
                    return {"stage": stage, "precision": precision, "recompute": recompute}
    raise ValueError("nothing fits")


def test_right_memory_plans_pass(solution, capsys):
    check.memory_plan(most_sharded_that_fits)
    out = capsys.readouterr().out
    assert out.count("✔ memory_plan: passed") == 1 and "on real workers — 2 ranks" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda *a: {"stage": 0, "precision": "fp32", "recompute": False},
     r"over the budget .*stage 1 would divide the optimizer state"),
    (lambda *a: {"stage": 3, "precision": "fp32", "recompute": True},
     r"sends .* a step .*over .*stage 3 3\(n−1\)/n·Ψ"),
    (stage3_sends_like_the_others, r"chose stage 3, fp32, recompute=False: a rank sends .* a "
                                   r"step .*over"),
    (lambda *a: {"stage": 4, "precision": "fp32", "recompute": False}, "ZeRO's stages are"),
    (lambda *a: {"stage": 1, "precision": "fp8", "recompute": False}, "choose 'fp32' or 'bf16'"),
    (lambda *a: {"stage": 1, "precision": "bf16", "recompute": "yes"}, "say True or False"),
    (lambda *a: (3, "bf16", True), "return a dict with the keys stage"),
])
def test_memory_plan_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.memory_plan(wrong)
