"""check.ring_allreduce and check.ring_cost accept a correct answer and reject the usual
mistakes, each with a message that says why (lesson 06)."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed


# ---------------------------------------------------------------- learner code

def good_ring(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = list(torch.tensor_split(tensor, n))
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):                                   # share-reduce
        out, into = chunks[(rank - s) % n], chunks[(rank - s - 1) % n]
        buf = torch.empty_like(into)
        send = dist.isend(out, right)
        dist.recv(buf, left)
        send.wait()
        into += buf
    for s in range(n - 1):                                   # share-only
        out, into = chunks[(rank + 1 - s) % n], chunks[(rank - s) % n]
        send = dist.isend(out, right)
        dist.recv(into, left)
        send.wait()
    return tensor


def stub(tensor):
    raise NotImplementedError("replace this line with your code")


def divisible_only(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    size = tensor.numel() // n                             # drops the remainder
    chunks = [tensor[i * size:(i + 1) * size] for i in range(n)]
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        out, into = chunks[(rank - s) % n], chunks[(rank - s - 1) % n]
        buf = torch.empty_like(into)
        send = dist.isend(out, right)
        dist.recv(buf, left)
        send.wait()
        into += buf
    for s in range(n - 1):
        out, into = chunks[(rank + 1 - s) % n], chunks[(rank - s) % n]
        send = dist.isend(out, right)
        dist.recv(into, left)
        send.wait()
    return tensor


def uses_builtin(tensor):
    dist.all_reduce(tensor)
    return tensor


def whole_tensor_ring(tensor):
    """The tutorial's ring: the whole tensor goes round the ring n−1 times."""
    n, rank = dist.get_world_size(), dist.get_rank()
    passing, buf = tensor.clone(), torch.empty_like(tensor)
    for _ in range(n - 1):
        send = dist.isend(passing, (rank + 1) % n)
        dist.recv(buf, (rank - 1) % n)
        send.wait()
        tensor += buf
        passing.copy_(buf)
    return tensor


def blocking_ring(tensor):
    """Every rank sends first with a blocking send: nobody ever receives."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = list(torch.tensor_split(tensor, n))
    for s in range(n - 1):
        buf = torch.empty_like(chunks[(rank - s - 1) % n])
        dist.send(chunks[(rank - s) % n], (rank + 1) % n)
        dist.recv(buf, (rank - 1) % n)
        chunks[(rank - s - 1) % n] += buf
    return tensor


def adds_in_allgather(tensor):
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = list(torch.tensor_split(tensor, n))
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(2 * (n - 1)):
        out, into = chunks[(rank - s) % n], chunks[(rank - s - 1) % n]
        buf = torch.empty_like(into)
        send = dist.isend(out, right)
        dist.recv(buf, left)
        send.wait()
        into += buf                                        # wrong in the second phase
    return tensor


def returns_new(tensor):
    out = tensor.clone()
    good_ring(out)
    return out


# ---------------------------------------------------------------------- tests

def test_correct_ring_passes(capsys):
    check.ring_allreduce(good_ring)
    assert "✔ ring_allreduce: passed" in capsys.readouterr().out


def test_package_ring_passes(capsys):
    from ddl_lab.ring_allreduce.engine import ring_allreduce
    check.ring_allreduce(ring_allreduce)
    assert "passed" in capsys.readouterr().out


def test_stub_is_rejected():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.ring_allreduce(stub)


def test_divisible_only_is_rejected():
    with pytest.raises(CheckFailed, match=r"not a multiple of 3.*remainder out"):
        check.ring_allreduce(divisible_only)


def test_builtin_collective_is_rejected():
    with pytest.raises(CheckFailed, match=r"called dist\.all_reduce.*point-to-point"):
        check.ring_allreduce(uses_builtin)


def test_whole_tensor_ring_is_not_bandwidth_optimal():
    with pytest.raises(CheckFailed, match=r"not bandwidth-optimal.*2\.00·S.*1\.33·S"):
        check.ring_allreduce(whole_tensor_ring)


def test_wrong_sum_names_rank_and_element():
    with pytest.raises(CheckFailed, match=r"rank \d ends with a wrong sum: element \d+ .*"
                                          r"share-only phase does not"):
        check.ring_allreduce(adds_in_allgather)


def test_result_must_be_in_place():
    with pytest.raises(CheckFailed, match="left the tensor it was given unchanged"):
        check.ring_allreduce(returns_new)


@pytest.mark.slow
def test_deadlock_times_out_with_a_message():
    with pytest.raises(CheckFailed, match=r"timed out after 4 s.*gloo's blocking dist\.send"):
        check.ring_allreduce(blocking_ring, timeout=4)


# ------------------------------------------------------------------- cost model

def test_ring_cost():
    check.ring_cost(lambda n, S, a, b: 2 * (n - 1) * a + 2 * (n - 1) / n * S * b)
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.ring_cost(stub_cost)
    with pytest.raises(CheckFailed, match="whole tensor S per step"):
        check.ring_cost(lambda n, S, a, b: 2 * (n - 1) * a + 2 * (n - 1) * S * b)
    with pytest.raises(CheckFailed, match="factor 2"):
        check.ring_cost(lambda n, S, a, b: (n - 1) * a + (n - 1) / n * S * b)
    with pytest.raises(CheckFailed, match="returned None"):
        check.ring_cost(lambda n, S, a, b: None)


def stub_cost(n, nbytes, alpha, beta):
    raise NotImplementedError("replace this line with your code")


def _collectives_still_work():
    t = torch.ones(3)
    dist.all_reduce(t)
    w = dist.isend(t, (dist.get_rank() + 1) % dist.get_world_size())
    dist.recv(torch.empty(3), (dist.get_rank() - 1) % dist.get_world_size())
    w.wait()
    return float(t[0])


def test_check_restores_the_process_group():
    from ddl_lab.runtime import shared_cluster
    with pytest.raises(CheckFailed):
        check.ring_allreduce(uses_builtin)
    assert shared_cluster(3).run(_collectives_still_work) == [3.0, 3.0, 3.0]
