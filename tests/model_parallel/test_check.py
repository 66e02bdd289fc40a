"""check.stage_step, check.one_f_one_b, check.row_parallel and check.bytes_per_rank pass right
answers written in two styles and name the mistakes learners make (lesson 09)."""
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.runtime import worlds
from ddl_lab.model_parallel.pipeline import one_f_one_b_order
from ddl_lab.model_parallel.stages import recv_tensor, send_tensor, stage_step
from ddl_lab.model_parallel.tensor_parallel import row_parallel

STEM = "09_model_parallel"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ---------------------------------------------------------------- the stage step

def step_one_backward(stage, batches, loss_fn, prev, nxt):
    """Another right style: the last stage runs one backward over all micro-batch losses."""
    B = sum(len(y) for _, y in batches)
    acts, outs, losses = [], [], []
    for x, y in batches:
        if prev is not None:
            x = recv_tensor(prev)
            x.requires_grad = True
        out = stage(x)
        if nxt is None:
            w = len(y) / B if loss_fn.reduction == "mean" else 1.0
            losses.append(loss_fn(out, y) * w)
        else:
            send_tensor(out.detach(), nxt)
        acts.append(x)
        outs.append(out)
    if nxt is None:
        total = torch.stack(losses).sum()
        total.backward()
    else:
        for out in outs:
            torch.autograd.backward(out, recv_tensor(nxt))
    if prev is not None:
        for x in acts:
            send_tensor(x.grad, prev)
    return total.item() if nxt is None else None


def _gpipe(stage, batches, loss_fn, prev, nxt, weight, grad_to=None, leaf=True):
    outs, acts = [], []
    for x, y in batches:
        if prev is not None:
            x = recv_tensor(prev)
            if leaf:
                x.requires_grad_()
        out = stage(x)
        if nxt is None:
            out = loss_fn(out, y) * weight(len(y), sum(len(t) for _, t in batches), len(batches))
        else:
            send_tensor(out, nxt)
        acts.append(x)
        outs.append(out)
    for x, out in zip(acts, outs):
        out.backward(None if nxt is None else recv_tensor(nxt))
        if prev is not None:
            send_tensor(x.grad, {"prev": prev, "nxt": nxt}[grad_to or "prev"])
    return float(sum(outs)) if nxt is None else None


def summed(stage, batches, loss_fn, prev, nxt):
    return _gpipe(stage, batches, loss_fn, prev, nxt, lambda n, B, m: 1.0)


def divided_by_m(stage, batches, loss_fn, prev, nxt):
    return _gpipe(stage, batches, loss_fn, prev, nxt,
                  lambda n, B, m: 1.0 / m if loss_fn.reduction == "mean" else 1.0)


def always_share(stage, batches, loss_fn, prev, nxt):
    return _gpipe(stage, batches, loss_fn, prev, nxt, lambda n, B, m: n / B)


def no_requires_grad(stage, batches, loss_fn, prev, nxt):
    return _gpipe(stage, batches, loss_fn, prev, nxt, lambda n, B, m: n / B, leaf=False)


def grad_to_next(stage, batches, loss_fn, prev, nxt):
    return _gpipe(stage, batches, loss_fn, prev, nxt, lambda n, B, m: n / B, grad_to="nxt")


def grad_onward_in_the_middle(stage, batches, loss_fn, prev, nxt):
    """The last stage gets it right; a middle stage sends its input's gradient on to nxt."""
    return _gpipe(stage, batches, loss_fn, prev, nxt, lambda n, B, m: n / B,
                  grad_to="nxt" if nxt is not None else "prev")


def forward_then_backward_each(stage, batches, loss_fn, prev, nxt):
    """Same gradients, not GPipe: each micro-batch's backward right after its forward."""
    B, total = sum(len(y) for _, y in batches), 0.0
    for x, y in batches:
        if prev is not None:
            x = recv_tensor(prev).requires_grad_()
        out = stage(x)
        if nxt is None:
            out = loss_fn(out, y) * (len(y) / B if loss_fn.reduction == "mean" else 1.0)
            total += out.item()
            out.backward()
        else:
            send_tensor(out, nxt)
            out.backward(recv_tensor(nxt))
        if prev is not None:
            send_tensor(x.grad, prev)
    return total if nxt is None else None


def star_through_rank0(stage, batches, loss_fn, prev, nxt):
    """Rank 0 relays every activation and gradient between the stages: a star, not a chain
    (right on 2 ranks, where the star is the chain)."""
    rank, p = dist.get_rank(), dist.get_world_size()
    B = sum(len(y) for _, y in batches)
    if rank == 0:
        outs = []
        for x, _ in batches:
            outs.append(stage(x))
            send_tensor(outs[-1], 1)
            for r in range(1, p - 1):                    # relays the activation on
                send_tensor(recv_tensor(r), r + 1)
        for out in outs:
            for r in range(p - 1, 1, -1):                # relays the gradient back
                send_tensor(recv_tensor(r), r - 1)
            out.backward(recv_tensor(1))
        return None
    xs, outs = [], []
    for _, y in batches:
        xs.append(recv_tensor(0).requires_grad_())
        out = stage(xs[-1])
        if nxt is None:
            out = loss_fn(out, y) * (len(y) / B if loss_fn.reduction == "mean" else 1.0)
        else:
            send_tensor(out, 0)
        outs.append(out)
    for x, out in zip(xs, outs):
        out.backward(None if nxt is None else recv_tensor(0))
        send_tensor(x.grad, 0)
    return float(sum(outs)) if nxt is None else None


def straight_to_the_last(stage, batches, loss_fn, prev, nxt):
    """The activations sent to the last rank, whatever the stage: skips the chain."""
    last = dist.get_world_size() - 1
    return _gpipe(stage, batches, loss_fn, prev, last if nxt is not None else None,
                  lambda n, B, m: n / B)


def borrowed(stage, batches, loss_fn, prev, nxt):
    return stage_step(stage, batches, loss_fn, prev, nxt)


def test_stage_step(solution, capsys):
    check.stage_step(step_one_backward)
    assert capsys.readouterr().out.count("✔ stage_step: passed") == 1
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.stage_step(stub)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.stage_step(borrowed)
    with pytest.raises(CheckFailed, match="summed where they must be averaged"):
        check.stage_step(summed)
    with pytest.raises(CheckFailed, match="divided each micro-batch's loss by m"):
        check.stage_step(divided_by_m)
    with pytest.raises(CheckFailed, match="averaged where they must be summed"):
        check.stage_step(always_share)
    with pytest.raises(CheckFailed, match="no gradient flowed back.*requires_grad"):
        check.stage_step(no_requires_grad)
    with pytest.raises(CheckFailed, match="gradients sent to the wrong neighbour"):
        check.stage_step(grad_to_next)
    with pytest.raises(CheckFailed, match="wrong neighbour: rank 1 sent .* gradient to nxt"):
        check.stage_step(grad_onward_in_the_middle)


@pytest.mark.parametrize("wrong, fault", [
    (forward_then_backward_each, r"order is not GPipe's.*backward ran right after its forward "
     r"\(F0 B0 F1 B1 F2 B2 F3 B3\).*only one stage is ever busy.*2·p·m = 24 slots instead of "
     r"GPipe's 2\(m \+ p − 1\) = 12.*idles 67% of the step instead of .* = 33%"),
    (star_through_rank0, "routed through rank 0, a star — pipeline pieces go down the chain"),
    (straight_to_the_last, "sent straight to the last stage.*go down the chain"),
])
def test_stage_step_judges_the_pipeline_s_shape(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.stage_step(wrong)


# ---------------------------------------------------------------- the 1F1B order

def order_by_counting(rank, p, m):
    """Another right style: forward while fewer than p − rank are in flight, else backward."""
    order, f, b = [], 0, 0
    while b < m:
        if f < m and f - b < p - rank:
            order.append(("F", f))
            f += 1
        else:
            order.append(("B", b))
            b += 1
    return order


def gpipe(rank, p, m):
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


def _warm(rank, p, m, warmup):
    warmup = max(0, min(warmup, m))
    order = [("F", i) for i in range(warmup)]
    for i in range(warmup, m):
        order += [("F", i), ("B", i - warmup)]
    return order + [("B", i) for i in range(m - warmup, m)]


def one_too_many(rank, p, m):
    return _warm(rank, p, m, p - rank)


def reversed_warmup(rank, p, m):
    return _warm(rank, p, m, rank)


def backward_first(rank, p, m):
    return [("B", 0)] + [("F", i) for i in range(m)] + [("B", i) for i in range(1, m)]


def test_one_f_one_b(solution, capsys, monkeypatch):
    monkeypatch.setattr(worlds, "OP_TIMEOUT_S", 5.0)       # the deadlock below waits 5 s, not 15
    check.one_f_one_b(order_by_counting)
    assert capsys.readouterr().out.count("✔ one_f_one_b: passed") == 1
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.one_f_one_b(stub)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.one_f_one_b(lambda rank, p, m: one_f_one_b_order(rank, p, m))
    with pytest.raises(CheckFailed, match="too many forwards in flight.*GPipe"):
        check.one_f_one_b(gpipe)
    with pytest.raises(CheckFailed, match="too many forwards in flight"):
        check.one_f_one_b(one_too_many)
    with pytest.raises(CheckFailed, match="comes before"):
        check.one_f_one_b(backward_first)
    with pytest.raises(CheckFailed, match="deadlock.*waiting"):
        check.one_f_one_b(reversed_warmup)


# ---------------------------------------------------------------- row-parallel layer

def row_bias_on_rank0(x_part, weight_cols, bias):
    """Another right style: the bias joins the partial sum of rank 0 only."""
    y = F.linear(x_part, weight_cols, bias if dist.get_rank() == 0 else None)
    dist.all_reduce(y)
    return y


def row_no_allreduce(x_part, weight_cols, bias):
    return x_part @ weight_cols.T + bias


def row_bias_everywhere(x_part, weight_cols, bias):
    y = x_part @ weight_cols.T + bias
    dist.all_reduce(y)
    return y


def test_row_parallel(solution, capsys):
    check.row_parallel(row_bias_on_rank0)
    assert capsys.readouterr().out.count("✔ row_parallel: passed") == 1
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.row_parallel(stub)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.row_parallel(row_parallel)
    with pytest.raises(CheckFailed, match="only its own partial sum.*all_reduce"):
        check.row_parallel(row_no_allreduce)
    with pytest.raises(CheckFailed, match="bias was added on every rank"):
        check.row_parallel(row_bias_everywhere)


# ---------------------------------------------------------------- memory per rank

def bytes_table(scheme, params, ranks, state_bytes=8):
    """Another right style: what is sharded, per component."""
    sharded = {"one process": (), "ddp": (), "zero1": ("state",),
               "zero2": ("state", "grads"), "fsdp": ("state", "grads", "params"),
               "pipeline": ("state", "grads", "params")}[scheme]
    sizes = {"params": 4, "grads": 4, "state": state_bytes}
    return sum(params * b / (ranks if k in sharded else 1) for k, b in sizes.items())


def zero1_shards_grads(scheme, params, ranks, state_bytes=8):
    if scheme == "zero1":
        scheme = "zero2"
    return bytes_table(scheme, params, ranks, state_bytes)


def test_bytes_per_rank(solution, capsys):
    check.bytes_per_rank(bytes_table)
    assert capsys.readouterr().out.count("✔ bytes_per_rank: passed") == 1
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.bytes_per_rank(stub)
    with pytest.raises(CheckFailed, match="sharded the gradients too"):
        check.bytes_per_rank(zero1_shards_grads)
