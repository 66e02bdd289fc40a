"""Checks for lesson 06 (ring allreduce): the learner's ring on real gloo workers, its cost.

``ring_allreduce(my_ring_allreduce)`` runs the learner's function on 3 and 4 workers
with tensor lengths that do and do not divide by the world size. Inside each worker,
the process group's methods are wrapped for the duration of the call: ``send`` counts
the bytes this rank sends (every ``dist.send``/``isend``/``batch_isend_irecv`` goes
through it, however it was imported) and the built-in collectives record that they
were called. The originals are restored in ``finally``.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ddl_lab.ring_allreduce.engine import chunk_bounds
from ._core import CheckFailed, call_local, fail, first_difference, passed, run_on_workers

__all__ = ["ring_allreduce", "ring_cost"]

# ProcessGroup method -> the torch.distributed function a learner would have called
_BUILTINS = {"allreduce": "all_reduce", "allreduce_coalesced": "all_reduce_coalesced",
             "reduce": "reduce", "broadcast": "broadcast", "allgather": "all_gather",
             "_allgather_base": "all_gather_into_tensor",
             "allgather_coalesced": "all_gather_coalesced",
             "allgather_into_tensor_coalesced": "all_gather_into_tensor",
             "all_gather_single": "all_gather_into_tensor",
             "reduce_scatter": "reduce_scatter",
             "_reduce_scatter_base": "reduce_scatter_tensor",
             "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
             "reduce_scatter_single": "reduce_scatter_tensor",
             "alltoall": "all_to_all", "alltoall_base": "all_to_all_single",
             "all_to_all_single": "all_to_all_single", "gather": "gather",
             "scatter": "scatter"}

# (world size, length, dtype): divisible first, then not, then large and not
_CASES = [(3, 12, "float32"), (3, 10, "float32"), (4, 2 ** 17 + 3, "float64")]
_SEED = 6


def _inputs(length: int, rank: int, dtype: str, seed: int = _SEED):
    """Rank ``rank``'s tensor: multiples of 1/4, so every order of summing is exact."""
    import torch
    g = torch.Generator().manual_seed(seed * 101 + rank)
    return torch.randint(-40, 40, (length,), generator=g).to(getattr(torch, dtype)) / 4


def _run_case(fn: Callable, length: int, dtype: str) -> dict:
    """Worker: call ``fn(tensor)`` with the process group instrumented; report what it did."""
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import ProcessGroup
    from ddl_lab.runtime import device
    tensor = _inputs(length, dist.get_rank(), dtype).to(device())
    before = tensor.clone()
    sent, used = [0], []
    # The class's own entries (pybind instance methods) go back as they were; calling
    # goes through the plain functions that getattr gives.
    raw = {name: ProcessGroup.__dict__[name]
           for name in ["send", *_BUILTINS] if name in ProcessGroup.__dict__}
    call = {name: getattr(ProcessGroup, name) for name in raw}

    def counting_send(pg, tensors, *args, **kwargs):
        sent[0] += sum(t.numel() * t.element_size() for t in tensors)
        return call["send"](pg, tensors, *args, **kwargs)

    def flagged(name: str) -> Callable:
        def builtin(pg, *args, **kwargs):
            used.append(_BUILTINS[name])
            return call[name](pg, *args, **kwargs)
        return builtin

    try:
        ProcessGroup.send = counting_send
        for name in raw:
            if name != "send":
                setattr(ProcessGroup, name, flagged(name))
        returned = fn(tensor)
    finally:
        for name, original in raw.items():
            setattr(ProcessGroup, name, original)
    other = (returned.detach().double().cpu().numpy().copy()
             if isinstance(returned, torch.Tensor) and returned is not tensor
             and returned.numel() == length else None)
    return {"result": tensor.double().cpu().numpy(), "returned": other, "sent": sent[0],
            "used": sorted(set(used)), "unchanged": bool(torch.equal(tensor, before))}


def ring_allreduce(my_ring_allreduce: Callable, timeout: float = 20.0) -> None:
    """Lesson 06, task 2: ``my_ring_allreduce(tensor)`` sums in place over the default group,
    with point-to-point messages only, sending 2(n−1)/n·S bytes per rank (bandwidth-optimal).
    """
    __tracebackhide__ = True
    name = getattr(my_ring_allreduce, "__name__", "your function")
    divisible_ok: tuple[int, int] | None = None
    for n, length, dtype in _CASES:
        what = (f"{n} ranks and a {dtype} tensor of {length:,} elements"
                + ("" if length % n == 0 else f" (not a multiple of {n})"))
        try:
            got = run_on_workers(_run_case, n, my_ring_allreduce, length, dtype,
                                 timeout=timeout, learner_fn=my_ring_allreduce)
        except CheckFailed as e:
            raise CheckFailed(_explain_failure(str(e), what, length % n, divisible_ok)) from None
        used = sorted({u for g in got for u in g["used"]})
        if used:
            fail(f"{name} called {', '.join('dist.' + u for u in used)}: a hand-written "
                 "allreduce may use only point-to-point messages (dist.send, dist.recv, "
                 "dist.isend, dist.irecv). Build the ring from those.")
        expected = sum(_inputs(length, r, dtype).double() for r in range(n)).numpy()
        for rank, g in enumerate(got):
            if g["unchanged"] and g["returned"] is not None \
                    and first_difference(expected, g["returned"]) is None:
                fail(f"{name} returned the sum in a new tensor but left the tensor it was "
                     "given unchanged: write the result into `tensor` itself (in place, "
                     "as dist.all_reduce does), e.g. with `+=`, `.add_()` or `.copy_()`.")
            diff = first_difference(expected, g["result"], rtol=0, atol=1e-9)
            if diff:
                fail(f"with {what}, rank {rank} ends with a wrong sum: {diff}."
                     + _wrong_sum_hint(expected, g["result"], rank, n, length, dtype,
                                       divisible_ok))
        esize = 4 if dtype == "float32" else 8
        S = length * esize
        allowed = 2 * (n - 1) * math.ceil(length / n) * esize
        worst = max(range(n), key=lambda r: got[r]["sent"])
        if got[worst]["sent"] > allowed:
            fail(f"{name} gives the right sum but is not bandwidth-optimal: with {what} "
                 f"(S = {S:,} bytes), rank {worst} sent {got[worst]['sent']:,} bytes = "
                 f"{got[worst]['sent'] / S:.2f}·S, while a ring sends 2(n−1)/n·S = "
                 f"{2 * (n - 1) / n:.2f}·S = {2 * (n - 1) * S // n:,} bytes per rank. "
                 "Passing the whole tensor from rank to rank costs (n−1)·S or more: cut it "
                 "into n chunks and send one chunk (S/n bytes) per step, n−1 steps of "
                 "share-reduce then n−1 steps of share-only.")
        if length % n == 0:
            divisible_ok = (n, length)
    sent = [g["sent"] / S for g in got]
    passed("ring_allreduce", f"exact sums on 3 and 4 ranks, lengths divisible or not; on "
           f"{n} ranks each rank sent {min(sent):.3f}–{max(sent):.3f}·S (a ring: 2(n−1)/n = "
           f"{2 * (n - 1) / n:.3f}), with point-to-point messages only")


def _explain_failure(message: str, what: str, remainder: int,
                     divisible_ok: tuple[int, int] | None) -> str:
    head = f"with {what}: "
    if "not implemented yet" in message:
        return message
    if "timed out" in message:
        return (head + message + " In a ring every rank sends to (rank+1) % n and receives "
                "from (rank−1) % n in the same step. gloo's blocking dist.send waits until "
                "the receiver calls recv, so if every rank sends first, all of them wait "
                "forever. Start the send with dist.isend (or the receive with dist.irecv), "
                "then wait on both.")
    if remainder and divisible_ok:
        n, length = divisible_ok
        return (head + f"it works when the length divides by the world size ({length} on "
                f"{n} ranks) but fails here. Chunks must cover the whole tensor even when "
                "the length is not a multiple of n: some chunks are one element longer "
                "(torch.tensor_split(tensor, n) does this).\n\n" + message)
    return head + message


def _wrong_sum_hint(expected: np.ndarray, got: np.ndarray, rank: int, n: int, length: int,
                    dtype: str, divisible_ok: tuple[int, int] | None) -> str:
    own = _inputs(length, rank, dtype).double().numpy()
    bad = ~np.isclose(got, expected, rtol=0, atol=1e-9)
    if np.allclose(got, own):
        return (" It still holds only its own data: nothing was added or received into "
                "the tensor (are you working on a copy, e.g. after .tolist() or .clone()?).")
    tail = length - length % n
    if length % n and bad[tail:].all() and not bad[:tail].any():
        return (f" Only the last {length % n} element(s) are wrong: with a length that is not "
                f"a multiple of {n}, your chunks leave the remainder out. Some chunks must be "
                "one element longer (torch.tensor_split(tensor, n) gives such chunks).")
    if length % n and divisible_ok:
        return (f" The length is not a multiple of {n}, and it works when it is: chunks must "
                "cover every element; some chunks are one element longer (torch.tensor_split"
                "(tensor, n) gives such chunks).")
    right = [c for c, (a, b) in enumerate(chunk_bounds(length, n)) if not bad[a:b].any()]
    if len(right) == 1:
        return (f" Exactly one chunk (chunk {right[0]}) is right on rank {rank}: the "
                "share-reduce phase works, the share-only phase does not. In share-only the "
                "chunk a rank receives is already the full sum: copy it over its own chunk "
                "(do not add it) and pass it on.")
    return (" Check which chunk each rank sends at step s: in share-reduce rank p sends "
            "chunk (p − s) % n and adds what it receives into chunk (p − s − 1) % n.")


# ------------------------------------------------------------------ the cost model

def ring_cost(my_ring_cost: Callable) -> None:
    """Lesson 06, task 1: ``my_ring_cost(n, nbytes, alpha, beta)`` returns the seconds of a
    ring allreduce in the α–β model: 2(n−1)·α + 2(n−1)/n · S·β."""
    __tracebackhide__ = True
    cases = [(2, 1e6, 1e-5, 1e-9), (4, 64e6, 5e-5, 2e-10), (8, 4096, 1e-4, 1e-9),
             (5, 1e9, 0.0, 1e-10), (3, 0, 2e-5, 1e-9), (1, 1e6, 1e-5, 1e-9)]
    variants = {
        "the bandwidth term uses the whole tensor S per step: each of the 2(n−1) steps "
        "sends one chunk of S/n bytes, so the term is 2(n−1)/n · S·β":
            lambda n, S, a, b: 2 * (n - 1) * a + 2 * (n - 1) * S * b,
        "only one phase is counted: the ring has n−1 steps of share-reduce AND n−1 steps "
        "of share-only, hence the factor 2":
            lambda n, S, a, b: (n - 1) * a + (n - 1) / n * S * b,
        "there are n−1 steps per phase, not n":
            lambda n, S, a, b: 2 * n * a + 2 * S * b,
        "the latency term is missing: each of the 2(n−1) steps pays α":
            lambda n, S, a, b: 2 * (n - 1) / n * S * b,
    }
    for n, S, a, b in cases:
        got = call_local(my_ring_cost, n, S, a, b)
        try:
            got = float(got)
        except (TypeError, ValueError):
            fail(f"my_ring_cost({n}, {S:g}, {a:g}, {b:g}) returned {got!r}; return the "
                 "predicted seconds as a number.")
        want = 2 * (n - 1) * a + 2 * (n - 1) / n * S * b
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-15):
            why = next((msg for msg, f in variants.items()
                        if math.isclose(got, f(n, S, a, b), rel_tol=1e-6, abs_tol=1e-15)),
                       "compare with 2(n−1)·α + 2(n−1)/n · S·β")
            fail(f"my_ring_cost(n={n}, nbytes={S:g}, alpha={a:g}, beta={b:g}) returned "
                 f"{got:.6g} s, expected {want:.6g} s: {why}.")
    passed("ring_cost", f"matches 2(n−1)·α + 2(n−1)/n·S·β on {len(cases)} cases, n = 1 to 8")
