"""check.sync_sgd_step and check.local_sgd accept a correct answer and name the usual
mistakes (lesson 05)."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed


def good_step(model, loss_fn, X, y, lr):
    model.zero_grad()
    loss = loss_fn(model(X), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p -= lr * p.grad / dist.get_world_size()
    return loss.item()


def no_allreduce(model, loss_fn, X, y, lr):
    model.zero_grad()
    loss_fn(model(X), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


def no_divide(model, loss_fn, X, y, lr):
    model.zero_grad()
    loss_fn(model(X), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p -= lr * p.grad


def no_zero_grad(model, loss_fn, X, y, lr):
    loss_fn(model(X), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            g = p.grad.clone()
            dist.all_reduce(g)
            p -= lr * g / dist.get_world_size()


def stub(*args):
    raise NotImplementedError("replace this line with your code")


def test_sync_step(capsys):
    check.sync_sgd_step(good_step)
    assert "✔ sync_sgd_step: passed" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.sync_sgd_step(stub)
    with pytest.raises(CheckFailed, match="different parameters.*dist.all_reduce"):
        check.sync_sgd_step(no_allreduce)
    with pytest.raises(CheckFailed, match="3× too large.*divide by the world size"):
        check.sync_sgd_step(no_divide)
    with pytest.raises(CheckFailed, match="second is not.*zero the gradients"):
        check.sync_sgd_step(no_zero_grad)


def _average(model):
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p)
            p /= dist.get_world_size()


def _sgd(model, loss_fn, X, y, lr):
    model.zero_grad()
    loss_fn(model(X), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


def good_local(model, loss_fn, batches, lr, H):
    for t, (X, y) in enumerate(batches):
        _sgd(model, loss_fn, X, y, lr)
        if (t + 1) % H == 0:
            _average(model)


def every_step(model, loss_fn, batches, lr, H):
    for X, y in batches:
        _sgd(model, loss_fn, X, y, lr)
        _average(model)


def off_by_one(model, loss_fn, batches, lr, H):
    for t, (X, y) in enumerate(batches):
        _sgd(model, loss_fn, X, y, lr)
        if t % H == 0:
            _average(model)


def summed(model, loss_fn, batches, lr, H):
    for t, (X, y) in enumerate(batches):
        _sgd(model, loss_fn, X, y, lr)
        if (t + 1) % H == 0:
            with torch.no_grad():
                for p in model.parameters():
                    dist.all_reduce(p)


def averages_gradient(model, loss_fn, batches, lr, H):
    """The seed's formula read literally: at t+1 ∈ I_T, step with the mean gradient."""
    for t, (X, y) in enumerate(batches):
        model.zero_grad()
        loss_fn(model(X), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                if (t + 1) % H == 0:
                    dist.all_reduce(p.grad)
                    p.grad /= dist.get_world_size()
                p -= lr * p.grad


def test_local_sgd(capsys):
    check.local_sgd(good_local)
    assert "✔ local_sgd: passed" in capsys.readouterr().out
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.local_sgd(stub)
    with pytest.raises(CheckFailed, match="averaged after every step"):
        check.local_sgd(every_step)
    with pytest.raises(CheckFailed, match="off by one"):
        check.local_sgd(off_by_one)
    with pytest.raises(CheckFailed, match="did not divide by the world size"):
        check.local_sgd(summed)
    with pytest.raises(CheckFailed, match="only that step's gradient"):
        check.local_sgd(averages_gradient)
