"""check.halving_doubling and check.allreduce_choice (lesson 06 §7, tasks 5–6) pass right
answers in several styles and name the mistakes learners make: a ring, a binomial tree,
recursive doubling of whole tensors, a built-in collective, the package's own allreduce;
always the ring, always the tree, a name that is not an algorithm."""
import math

import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.ring_allreduce import cost
from ddl_lab.ring_allreduce.engine import allreduce

NB = "06_ring_allreduce"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------ task 5: halving and doubling

def hd_blocking_split(tensor):
    """Another style: tensor_split halves, blocking send/recv ordered by rank, and the
    rounds from the farthest partner to the nearest."""
    n, rank = dist.get_world_size(), dist.get_rank()
    rounds = int(math.log2(n))
    segment, trail = tensor, []
    for k in reversed(range(rounds)):
        lower, upper = torch.tensor_split(segment, 2)
        peer, low = rank ^ (1 << k), not rank & (1 << k)
        keep, give = (lower, upper) if low else (upper, lower)
        buf = torch.empty_like(keep)
        if low:
            dist.send(give, peer)
            dist.recv(buf, peer)
        else:
            dist.recv(buf, peer)
            dist.send(give, peer)
        keep.add_(buf)
        trail.append((k, keep, give))
        segment = keep
    for k, keep, give in reversed(trail):
        ops = [dist.P2POp(dist.isend, keep, rank ^ (1 << k)),
               dist.P2POp(dist.irecv, give, rank ^ (1 << k))]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    return tensor


def ring_instead(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(tensor, n)
    for s in range(2 * (n - 1)):
        out, into = chunks[(rank - s) % n], chunks[(rank - s - 1) % n]
        buf = torch.empty_like(into)
        w = dist.isend(out, (rank + 1) % n)
        dist.recv(buf, (rank - 1) % n)
        w.wait()
        into.add_(buf) if s < n - 1 else into.copy_(buf)
    return tensor


def doubling_whole(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    for k in range(int(math.log2(n))):
        buf = torch.empty_like(tensor)
        w = dist.isend(tensor.clone(), rank ^ (1 << k))
        dist.recv(buf, rank ^ (1 << k))
        w.wait()
        tensor += buf
    return tensor


def binomial_tree(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    rounds = int(math.log2(n))
    for k in range(rounds):                           # reduce to rank 0
        if rank % (1 << (k + 1)) == (1 << k):
            dist.send(tensor, rank ^ (1 << k))
        elif rank % (1 << (k + 1)) == 0:
            buf = torch.empty_like(tensor)
            dist.recv(buf, rank ^ (1 << k))
            tensor += buf
    for k in reversed(range(rounds)):                 # broadcast back
        if rank % (1 << (k + 1)) == 0:
            dist.send(tensor, rank ^ (1 << k))
        elif rank % (1 << (k + 1)) == (1 << k):
            dist.recv(tensor, rank ^ (1 << k))
    return tensor


def swap_without_adding(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    lo, hi = 0, tensor.numel()
    for k in range(int(math.log2(n))):
        mid = lo + (hi - lo + 1) // 2
        keep, give = ((lo, mid), (mid, hi)) if not rank >> k & 1 else ((mid, hi), (lo, mid))
        w = dist.isend(tensor[give[0]:give[1]].clone(), rank ^ (1 << k))
        dist.recv(tensor[keep[0]:keep[1]], rank ^ (1 << k))   # overwrites instead of adding
        w.wait()
        lo, hi = keep
    return tensor


def test_halving_doubling_right_answers_pass(solution, capsys):
    check.halving_doubling(hd_blocking_split, seed=3)
    assert capsys.readouterr().out.count("✔ halving_doubling: passed") == 1


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (ring_instead, "a ring"),
    (doubling_whole, "whole tensor.*recursive doubling"),
    (binomial_tree, "whole tensor.*binomial tree"),
    (lambda t: dist.all_reduce(t), "called dist.all_reduce"),
    (lambda t: allreduce(t, "halving_doubling"), "ddl_lab"),
    (swap_without_adding, "wrong sum"),
])
def test_halving_doubling_wrong_answers_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.halving_doubling(wrong)


# ------------------------------------------------------------ task 6: the choice

def choice_by_package_models(n, nbytes, alpha, beta):
    """Another style: the course's own models (they are not the task's answer)."""
    return min(("tree", "ring", "halving_doubling", "pipelined_tree"),
               key=lambda a: cost.cost_model(a, n, nbytes, alpha, beta))


def test_allreduce_choice_right_answers_pass(solution, capsys):
    check.allreduce_choice(choice_by_package_models, seed=5)
    assert capsys.readouterr().out.count("✔ allreduce_choice: passed") == 1


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda n, S, a, b: "ring", "ring takes.*rounds of α dominate"),
    (lambda n, S, a, b: "tree", "tree takes.*whole tensor"),
    (lambda n, S, a, b: "Ring", "return one of"),
    (lambda n, S, a, b: "tree" if S < 1 << 16 else "pipelined_tree", "pipelined_tree takes"),
])
def test_allreduce_choice_wrong_answers_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.allreduce_choice(wrong)
