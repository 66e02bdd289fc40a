"""check.ring_cost and check.ring_allreduce pass right answers written in several styles and
name the mistakes learners make (lesson 06)."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.runtime import worlds


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------------- cost model

def cost_factored(n, nbytes, alpha, beta):
    if n == 1:
        return 0.0
    return (n - 1) * (2 * alpha + 2 * nbytes * beta / n)


def test_ring_cost_right_answers_pass(solution, capsys):
    check.ring_cost(cost_factored)
    check.ring_cost(lambda n, S, a, b: torch.tensor(2.0 * (n - 1) * (a + S * b / n)))
    assert capsys.readouterr().out.count("✔ ring_cost: passed") == 2


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda n, S, a, b: None, "returned None"),
    (lambda n, S, a, b: 2 * (n - 1) * a + 2 * (n - 1) * S * b, "whole tensor S per step"),
    (lambda n, S, a, b: (n - 1) * a + (n - 1) / n * S * b, "factor 2"),
    (lambda n, S, a, b: 2 * (n - 1) * a + (n - 1) / n * S * b, "factor 2 is on the latency"),
    (lambda n, S, a, b: 2 * n * a + 2 * S * b, "n−1 steps per phase"),
    (lambda n, S, a, b: 2 * (n - 1) / n * S * b, "latency term is missing"),
    (lambda n, S, a, b: 2 * (n - 1) * b + 2 * (n - 1) / n * S * a, "swapped"),
    (lambda n, S, a, b: 6 * a + 1.5 * S * b, r"cost for n = 4 ranks.*right for n = 4"),
    (lambda n, S, a, b: 2 * a * (n - 1) + 2 * S * b / (n - 1) * (n - 1) ** 2 / n
     if n > 1 else S / (n - 1), "divided by zero"),
])
def test_ring_cost_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.ring_cost(wrong)


def test_ring_cost_refuses_the_package_model():
    from ddl_lab.ring_allreduce import cost as engine

    def my_ring_cost(n, nbytes, alpha, beta):
        return engine.cost_model("ring", n, nbytes, alpha, beta)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.ring_cost(my_ring_cost)


def test_ring_cost_refuses_the_shared_cost_layer():
    from ddl_lab.runtime.costs import ring_time

    def my_ring_cost(n, nbytes, alpha, beta):
        return ring_time(n, nbytes, alpha, beta)
    with pytest.raises(CheckFailed, match="runtime.costs.ring_time, the package's own"):
        check.ring_cost(my_ring_cost)


def test_ring_cost_failure_quotes_a_replayable_case():
    with pytest.raises(CheckFailed, match=r"case \d+ \(n=\d+.*replay: check\.ring_cost\(…, "
                                          r"seed=7\)"):
        check.ring_cost(lambda n, S, a, b: 2 * (n - 1) * a + 2 * (n - 1) * S * b, seed=7)


# ---------------------------------------------------------------- learner rings

def ring_loop_bounds(tensor):
    """Another right style: bounds computed by hand, irecv into scratch buffers, no return."""
    n, rank = dist.get_world_size(), dist.get_rank()
    base, extra = divmod(tensor.numel(), n)
    starts = [i * base + min(i, extra) for i in range(n + 1)]
    chunk = [tensor[starts[i]:starts[i + 1]] for i in range(n)]
    for s in range(2 * (n - 1)):
        out = chunk[(rank - s) % n]
        into = chunk[(rank - s - 1) % n]
        buf = torch.zeros_like(into)
        reqs = [dist.irecv(buf, (rank - 1) % n), dist.isend(out, (rank + 1) % n)]
        for r in reqs:
            r.wait()
        if s < n - 1:
            into.add_(buf)
        else:
            into.copy_(buf)


def ring_batched(tensor):
    """Another right style: batch_isend_irecv, one flat view, returns the tensor."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = tensor.tensor_split(n)
    for phase in ("reduce", "share"):
        for s in range(n - 1):
            k_out = (rank - s) % n if phase == "reduce" else (rank + 1 - s) % n
            k_in = (k_out - 1) % n
            buf = torch.empty_like(chunks[k_in])
            ops = [dist.P2POp(dist.isend, chunks[k_out], (rank + 1) % n),
                   dist.P2POp(dist.irecv, buf, (rank - 1) % n)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            if phase == "reduce":
                chunks[k_in].add_(buf)
            else:
                chunks[k_in].copy_(buf)
    return tensor


def ring_by_parity(tensor):
    """Another right style: blocking send/recv, even ranks send first, odd ranks receive
    first (no isend), so the ring never deadlocks."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(tensor, n)

    def step(out, buf):
        if rank % 2 == 0:
            dist.send(out, (rank + 1) % n)
            dist.recv(buf, (rank - 1) % n)
        else:
            dist.recv(buf, (rank - 1) % n)
            dist.send(out, (rank + 1) % n)
    for s in range(n - 1):
        into = chunks[(rank - s - 1) % n]
        buf = torch.empty_like(into)
        step(chunks[(rank - s) % n], buf)
        into += buf
    for s in range(n - 1):
        into = chunks[(rank - s) % n]
        buf = torch.empty_like(into)
        step(chunks[(rank + 1 - s) % n], buf)
        into.copy_(buf)


def all_to_all_by_hand(tensor):
    """Not a ring: every rank sends chunk c straight to rank c, which sums the n pieces and
    sends the sum straight back to everyone — the ring's 2(n−1)/n·S bytes, every pair linked."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(tensor, n)
    mine = chunks[rank]
    bufs = {r: torch.empty_like(mine) for r in range(n) if r != rank}
    works = [dist.isend(chunks[r], r) for r in range(n) if r != rank]
    works += [dist.irecv(b, r) for r, b in bufs.items()]
    for w in works:
        w.wait()
    for b in bufs.values():
        mine += b
    works = [dist.isend(mine, r) for r in range(n) if r != rank]
    works += [dist.irecv(chunks[r], r) for r in range(n) if r != rank]
    for w in works:
        w.wait()
    return tensor


def star_through_rank_0(tensor):
    """Not a ring: chunk by chunk, everything goes to rank 0, which sums and sends back."""
    n, rank = dist.get_world_size(), dist.get_rank()
    for chunk in torch.tensor_split(tensor, n):
        if rank == 0:
            for r in range(1, n):
                buf = torch.empty_like(chunk)
                dist.recv(buf, r)
                chunk += buf
            for r in range(1, n):
                dist.send(chunk, r)
        else:
            dist.send(chunk, 0)
            dist.recv(chunk, 0)
    return tensor


def ring_the_other_way(tensor):
    """A ring in the other direction: sends to (p−1) % n."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(tensor, n)
    for s in range(2 * (n - 1)):
        out, into = chunks[(rank + s) % n], chunks[(rank + s + 1) % n]
        buf = torch.empty_like(into)
        w = dist.isend(out, (rank - 1) % n)
        dist.recv(buf, (rank + 1) % n)
        w.wait()
        if s < n - 1:
            into += buf
        else:
            into.copy_(buf)


def ring_from_any_source(tensor):
    """A ring whose receives name no source."""
    n, rank = dist.get_world_size(), dist.get_rank()
    chunks = torch.tensor_split(tensor, n)
    for s in range(2 * (n - 1)):
        k = (rank - s) % n if s < n - 1 else (rank + 1 - s) % n
        into = chunks[(k - 1) % n]
        buf = torch.empty_like(into)
        w = dist.isend(chunks[k], (rank + 1) % n)
        dist.recv(buf)
        w.wait()
        if s < n - 1:
            into += buf
        else:
            into.copy_(buf)


def _ring(tensor, split, n=None, buffer=torch.empty_like, add_in_share=False):
    n = n or dist.get_world_size()
    rank = dist.get_rank()
    chunks = split(tensor, n)
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        out, into = chunks[(rank - s) % n], chunks[(rank - s - 1) % n]
        incoming = buffer(into)
        sending = dist.isend(out, right)
        dist.recv(incoming, left)
        sending.wait()
        into += incoming
    for s in range(n - 1):
        out, into = chunks[(rank + 1 - s) % n], chunks[(rank - s) % n]
        sending = dist.isend(out, right)
        if add_in_share:
            incoming = buffer(into)
            dist.recv(incoming, left)
            into += incoming
        else:
            dist.recv(into, left)
        sending.wait()
    return tensor


def ring_chunk(tensor):
    return _ring(tensor, lambda t, n: t.chunk(n))


def ring_divisible_only(tensor):
    def split(t, n):
        size = t.numel() // n
        return [t[i * size:(i + 1) * size] for i in range(n)]
    return _ring(tensor, split)


def ring_float32_buffer(tensor):
    return _ring(tensor, torch.tensor_split, buffer=lambda c: torch.zeros(c.numel()))


def ring_four_ranks(tensor):
    return _ring(tensor, torch.tensor_split, n=4)


def ring_adds_in_share_only(tensor):
    return _ring(tensor, torch.tensor_split, add_in_share=True)


def ring_returns_new(tensor):
    out = tensor.clone()
    _ring(out, torch.tensor_split)
    return out


def uses_builtin(tensor):
    dist.all_reduce(tensor)
    return tensor


def builtin_on_a_group_of_its_own(tensor):
    """A built-in allreduce on a fresh group, out of sight of the default group's wiretap."""
    group = dist.new_group(list(range(dist.get_world_size())))
    dist.all_reduce(tensor, group=group)
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


# ---------------------------------------------------------------------- tests

def test_right_rings_pass(solution, capsys):
    check.ring_allreduce(ring_loop_bounds)
    check.ring_allreduce(ring_batched)
    check.ring_allreduce(ring_by_parity)
    out = capsys.readouterr().out
    assert out.count("✔ ring_allreduce: passed") == 3 and "1.600·S on 5 ranks" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (ring_chunk, r"tensor\.chunk\(4\) gives only 3 chunks"),
    (ring_divisible_only, r"not a multiple of 3.*remainder out"),
    (ring_float32_buffer, r"dist\.recv with a float32 buffer while the tensor being summed "
                          r"is float64"),
    (ring_four_ranks, r"failed on rank \d of 3.*right for 4 ranks but not for 3 ranks"),
    (ring_adds_in_share_only, "share-only phase does not"),
    (ring_returns_new, "left the tensor it was given unchanged"),
    (uses_builtin, r"called dist\.all_reduce.*point-to-point"),
    (builtin_on_a_group_of_its_own, r"dist\.new_group was called: the ring runs on the group"),
    (whole_tensor_ring, r"not bandwidth-optimal.*3\.00·S.*1\.50·S"),
    (all_to_all_by_hand, r"not a ring.*an all-to-all exchange.*same 2\(n−1\)/n·S bytes"),
    (star_through_rank_0, r"not a ring.*to or from rank 0 — a star"),
    (ring_the_other_way, r"not a ring.*runs the other way"),
    (ring_from_any_source, r"not a ring.*received from any source"),
])
def test_ring_mistakes_are_named(wrong, fault, monkeypatch):
    monkeypatch.setattr(worlds, "OP_TIMEOUT_S", 5.0)       # a ring stuck in a receive: 5 s
    with pytest.raises(CheckFailed, match=fault):
        check.ring_allreduce(wrong)


def test_deadlock_is_reported_in_seconds(monkeypatch):
    monkeypatch.setattr(worlds, "OP_TIMEOUT_S", 5.0)       # a deadlock's wait, short in a test
    with pytest.raises(CheckFailed, match=r"deadlocked on 4 ranks.*gloo's blocking dist\.send"):
        check.ring_allreduce(blocking_ring)


def test_same_verdict_five_times(solution, capsys):
    right = solution("06_ring_allreduce", "my_ring_allreduce")
    for _ in range(5):
        check.ring_allreduce(right)
    verdicts = set()
    for _ in range(5):
        with pytest.raises(CheckFailed) as e:
            check.ring_allreduce(ring_chunk)
        verdicts.add(str(e.value))
    assert capsys.readouterr().out.count("passed") == 5 and len(verdicts) == 1


def _collectives_still_work():
    t = torch.ones(3)
    dist.all_reduce(t)
    w = dist.isend(t, (dist.get_rank() + 1) % dist.get_world_size())
    dist.recv(torch.empty(3), (dist.get_rank() - 1) % dist.get_world_size())
    w.wait()
    return float(t[0]), dist.get_world_size()


def test_check_restores_the_process_group():
    from ddl_lab.runtime.worlds import MAX_WORLD
    from ddl_lab.runtime import shared_cluster
    with pytest.raises(CheckFailed):
        check.ring_allreduce(uses_builtin)
    with pytest.raises(CheckFailed):
        check.ring_allreduce(ring_chunk)
    assert shared_cluster(MAX_WORLD).run(_collectives_still_work) == [(5.0, 5)] * MAX_WORLD
