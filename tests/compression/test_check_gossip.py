"""check.gossip_step passes right answers written in several styles and names the mistakes
learners make (lesson 08, gossip on a ring); D-PSGD against allreduce SGD on the same warm
5-rank cluster — bytes per step counted, replicas apart under gossip only."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.compression.gossip import run_gossip
from ddl_lab.runtime import shared_cluster


def stub(tensor):
    raise NotImplementedError("replace this line with your code")


def _ring(rank, n):
    return (rank - 1) % n, (rank + 1) % n


def gossip_returns_new(tensor):
    """Another right style: blocking-free exchange, a new tensor returned, float64 sums."""
    n, rank = dist.get_world_size(), dist.get_rank()
    peers = sorted(set(_ring(rank, n)) - {rank})
    bufs = {p: torch.empty_like(tensor) for p in peers}
    ops = [dist.P2POp(dist.isend, tensor, p) for p in peers] + \
          [dist.P2POp(dist.irecv, bufs[p], p) for p in peers]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    total = tensor.double() + sum(b.double() for b in bufs.values())
    return (total / (len(peers) + 1)).to(tensor.dtype)


def gossip_blocking(tensor):
    """Another right style: blocking send/recv ordered so that no two ranks wait on each
    other (send right and receive left, then send left and receive right, with isend)."""
    n, rank = dist.get_world_size(), dist.get_rank()
    left, right = _ring(rank, n)
    got = []
    for to, frm in ((right, left), (left, right)) if n > 2 else ((right, left),):
        req = dist.isend(tensor, to)
        buf = torch.empty_like(tensor)
        dist.recv(buf, frm)
        req.wait()
        got.append(buf)
    tensor.copy_((tensor + sum(got)) / (1 + len(got)))


def with_allreduce(tensor):
    dist.all_reduce(tensor)
    tensor /= dist.get_world_size()


def _exchange(tensor, peers):
    bufs = [torch.empty_like(tensor) for _ in peers]
    reqs = [dist.isend(tensor, p) for p in peers] + \
           [dist.irecv(b, p) for b, p in zip(bufs, peers)]
    for r in reqs:
        r.wait()
    return bufs


def with_everyone(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    bufs = _exchange(tensor, [p for p in range(n) if p != rank])
    tensor.copy_((tensor + sum(bufs)) / n)


def summed(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    tensor += sum(_exchange(tensor, sorted(set(_ring(rank, n)) - {rank})))


def without_self(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    bufs = _exchange(tensor, sorted(set(_ring(rank, n)) - {rank}))
    tensor.copy_(sum(bufs) / len(bufs))


def right_only(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    b = torch.empty_like(tensor)
    reqs = [dist.isend(tensor, (rank - 1) % n), dist.irecv(b, (rank + 1) % n)]
    for r in reqs:
        r.wait()
    tensor.copy_((tensor + b) / 2)


def twice_on_two(tensor):
    """The ring formula (x_left + x + x_right)/3 even when left and right are one rank."""
    n, rank = dist.get_world_size(), dist.get_rank()
    left, right = _ring(rank, n)
    a, b = torch.empty_like(tensor), torch.empty_like(tensor)
    reqs = [dist.isend(tensor, left), dist.isend(tensor, right), dist.irecv(a, left),
            dist.irecv(b, right)]
    for r in reqs:
        r.wait()
    tensor.copy_((a + tensor + b) / 3)


def over_n(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    tensor.copy_((tensor + sum(_exchange(tensor, sorted(set(_ring(rank, n)) - {rank})))) / n)


def any_source(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    req = dist.isend(tensor, (rank + 1) % n)
    b = torch.empty_like(tensor)
    dist.recv(b)
    req.wait()
    tensor.copy_((tensor + b) / 2)


def test_right_answers_pass(solution, capsys):
    check.gossip_step(gossip_returns_new)
    check.gossip_step(gossip_blocking, seed=1)
    out = capsys.readouterr().out
    assert out.count("✔ gossip_step: passed") == 2
    assert "|λ₂| = 0.333" in out                     # the 4-rank ring's rate, measured


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (with_allreduce, "called dist.all_reduce"),
    (with_everyone, r"sent to rank \d, which is not one of its ring neighbours"),
    (summed, "summed, not averaged"),
    (without_self, "left its own value out"),
    (right_only, r"one neighbour only \(the right"),
    (over_n, "divided by the world size"),
    (any_source, r"received from any source"),
])
def test_wrong_answers_name_the_fault(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.gossip_step(wrong)


def test_counting_the_one_neighbour_of_two_ranks_twice_is_named():
    with pytest.raises(CheckFailed, match="counted it twice"):
        check.gossip_step(twice_on_two, seed=3)


def test_gossip_and_allreduce_on_real_workers():
    cluster = shared_cluster(5)
    d = 8970                                             # the digits MLP's parameters
    gossip = run_gossip(cluster, "gossip", steps=10, eval_every=5, skew=1.0)
    allreduce = run_gossip(cluster, "allreduce", steps=10, eval_every=5, skew=1.0)
    assert gossip.bytes_per_step == pytest.approx(2 * 4 * d)   # its tensor to 2 neighbours
    assert allreduce.bytes_per_step == pytest.approx(2 * 4 / 5 * 4 * d)   # the ring's 2(n−1)/n·S
    assert allreduce.consensus.max() < 1e-9 < 1e-3 < gossip.consensus.min()
    assert list(gossip.eval_steps) == [5, 10]
    assert (gossip.worst_accuracy <= gossip.mean_accuracy + 1e-9).all()
    assert allreduce.loss[-3:].mean() < allreduce.loss[:3].mean()


def test_the_package_own_gossip_is_refused():
    from ddl_lab.compression.gossip import _gossip_average

    def my_gossip_step(tensor):
        _gossip_average(tensor)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.gossip_step(my_gossip_step)
