"""check.sync_sgd_step and check.local_sgd pass right answers written in several styles and
name the mistakes learners make (lesson 05)."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ---------------------------------------------------------------- synchronous step

def step_flat(model, loss_fn, X, y, lr):
    """Another right style: one flat vector, one all_reduce, parameters_to_vector."""
    params = list(model.parameters())
    for p in params:
        p.grad = None
    loss = loss_fn(model(X), y)
    grads = torch.autograd.grad(loss, params)
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    vec = torch.nn.utils.parameters_to_vector(params).detach() - lr * flat
    torch.nn.utils.vector_to_parameters(vec, params)
    return float(loss.detach())


def step_data(model, loss_fn, X, y, lr):
    """Another right style: p.data, the mean taken before the reduce, the loss as a tensor."""
    model.zero_grad()
    loss = loss_fn(model(X), y)
    loss.backward()
    n = dist.get_world_size()
    for p in model.parameters():
        g = p.grad / n
        dist.all_reduce(g)
        p.data = p.data - lr * g
    return loss.detach()


def _step(model, loss_fn, X, y, lr, reduce=True, divide=None, zero=True, sign=1.0,
          rate=None, ret="item"):
    if zero:
        model.zero_grad()
    loss = loss_fn(model(X), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            g = p.grad.clone()
            if reduce:
                dist.all_reduce(g)
            g /= dist.get_world_size() if divide is None else divide
            p -= sign * (rate or lr) * g
    return {"item": loss.item(), "none": None, "after": loss_fn(model(X), y).item()}[ret]


def no_allreduce(model, loss_fn, X, y, lr):
    return _step(model, loss_fn, X, y, lr, reduce=False, divide=1)


def no_divide(model, loss_fn, X, y, lr):
    return _step(model, loss_fn, X, y, lr, divide=1)


def divides_by_three(model, loss_fn, X, y, lr):
    return _step(model, loss_fn, X, y, lr, divide=3)


def fixed_rate(model, loss_fn, X, y, lr):
    return _step(model, loss_fn, X, y, lr, rate=0.1)


def uphill(model, loss_fn, X, y, lr):
    return _step(model, loss_fn, X, y, lr, sign=-1.0)


def no_zero_grad(model, loss_fn, X, y, lr):
    return _step(model, loss_fn, X, y, lr, zero=False)


def returns_nothing(model, loss_fn, X, y, lr):
    _step(model, loss_fn, X, y, lr, ret="none")


def returns_loss_after(model, loss_fn, X, y, lr):
    return _step(model, loss_fn, X, y, lr, ret="after")


def spent_generator(model, loss_fn, X, y, lr):
    model.zero_grad()
    loss = loss_fn(model(X), y)
    loss.backward()
    params = model.parameters()
    for p in params:
        dist.all_reduce(p.grad)
    with torch.no_grad():
        for p in params:                      # empty: the generator is used up
            p -= lr * p.grad / dist.get_world_size()
    return loss.item()


def rebinds(model, loss_fn, X, y, lr):
    model.zero_grad()
    loss = loss_fn(model(X), y)
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p = p - lr * p.grad / dist.get_world_size()
    return loss.item()


def scales_the_data(model, loss_fn, X, y, lr):
    X /= X.abs().max()                        # "normalises" the caller's batch in place
    return _step(model, loss_fn, X, y, lr)


def package_step(model, loss_fn, X, y, lr):
    from ddl_lab.data_parallel.textbook import sync_sgd
    sync_sgd(model, loss_fn, [(X, y)], lr)
    return loss_fn(model(X), y).item()


def test_right_steps_pass(solution, capsys):
    check.sync_sgd_step(step_flat)
    check.sync_sgd_step(step_data)
    assert capsys.readouterr().out.count("✔ sync_sgd_step: passed") == 2


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (no_allreduce, "different parameters.*dist.all_reduce"),
    (no_divide, "3× too large.*divide by the world size"),
    (divides_by_three, r"divided by 3, not by the world size R = 2: use dist.get_world_size"),
    (fixed_rate, r"learning rate 0\.1, not the lr passed in \(lr = 0\.07\)"),
    (uphill, "goes uphill"),
    (no_zero_grad, "step 2 is not.*zero the gradients"),
    (returns_nothing, "returned None.*return this rank's loss"),
    (returns_loss_after, "the loss after the update"),
    (spent_generator, r"iterated model\.parameters\(\) a second time"),
    (rebinds, "update them in place"),
    (scales_the_data, "changed its input X in place"),
    (package_step, "package's own implementation"),
])
def test_step_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.sync_sgd_step(wrong)


# ----------------------------------------------------------------------- local SGD

def _sgd(model, loss_fn, X, y, lr):
    model.zero_grad()
    loss_fn(model(X), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


def _average(model, divisor=None):
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p)
            p /= dist.get_world_size() if divisor is None else divisor


def local_flat(model, loss_fn, batches, lr, H):
    """Another right style: a step counter from 1 and one flat all_reduce per averaging."""
    params = list(model.parameters())
    for step, (X, y) in enumerate(batches, start=1):
        _sgd(model, loss_fn, X, y, lr)
        if step % H == 0:
            vec = torch.nn.utils.parameters_to_vector(params).detach()
            dist.all_reduce(vec)
            torch.nn.utils.vector_to_parameters(vec / dist.get_world_size(), params)


def _local(model, loss_fn, batches, lr, H, when, divisor=None, at_end=False):
    for t, (X, y) in enumerate(batches):
        _sgd(model, loss_fn, X, y, lr)
        if when(t, H):
            _average(model, divisor)
    if at_end:
        _average(model, divisor)


def every_step(model, loss_fn, batches, lr, H):
    _local(model, loss_fn, batches, lr, H, lambda t, H: True)


def off_by_one(model, loss_fn, batches, lr, H):
    _local(model, loss_fn, batches, lr, H, lambda t, H: t % H == 0)


def summed(model, loss_fn, batches, lr, H):
    _local(model, loss_fn, batches, lr, H, lambda t, H: (t + 1) % H == 0, divisor=1)


def divided_by_H(model, loss_fn, batches, lr, H):
    _local(model, loss_fn, batches, lr, H, lambda t, H: (t + 1) % H == 0, divisor=H)


def also_at_the_end(model, loss_fn, batches, lr, H):
    _local(model, loss_fn, batches, lr, H, lambda t, H: (t + 1) % H == 0,
           at_end=len(batches) % H != 0)


def averages_gradient(model, loss_fn, batches, lr, H):
    """The ID2223 answers' formula read literally: at t+1 ∈ I_T, step with the mean gradient."""
    for t, (X, y) in enumerate(batches):
        model.zero_grad()
        loss_fn(model(X), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                if (t + 1) % H == 0:
                    dist.all_reduce(p.grad)
                    p.grad /= dist.get_world_size()
                p -= lr * p.grad


def local_spent(model, loss_fn, batches, lr, H):
    params = model.parameters()
    for t, (X, y) in enumerate(batches):
        _sgd(model, loss_fn, X, y, lr)
        if (t + 1) % H == 0:
            with torch.no_grad():
                for p in params:
                    dist.all_reduce(p)
                    p /= dist.get_world_size()


def test_right_local_sgd_passes(solution, capsys):
    check.local_sgd(local_flat)
    assert capsys.readouterr().out.count("✔ local_sgd: passed") == 1


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (every_step, "averaged after every step"),
    (off_by_one, "off by one"),
    (summed, "did not divide by the world size"),
    (divided_by_H, r"divided the sum of the parameters by H = 2, not by the world size 3"),
    (also_at_the_end, "also averaged after the last step"),
    (averages_gradient, "only that step's gradient"),
    (local_spent, r"iterated model\.parameters\(\) a second time"),
])
def test_local_sgd_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.local_sgd(wrong)


def test_local_sgd_refuses_the_package_loop():
    from ddl_lab.data_parallel import textbook

    def my_local_sgd(model, loss_fn, batches, lr, H):
        textbook.local_sgd(model, loss_fn, batches, lr, range(H, len(batches) + 1, H))
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.local_sgd(my_local_sgd)


def test_same_verdict_five_times(solution, capsys):
    right = solution("05_data_parallel", "my_sync_sgd_step")
    verdicts = set()
    for _ in range(5):
        check.sync_sgd_step(right)
        with pytest.raises(CheckFailed) as e:
            check.local_sgd(divided_by_H)
        verdicts.add(str(e.value))
    assert capsys.readouterr().out.count("passed") == 5 and len(verdicts) == 1
