"""Checks for lesson 00 (welcome): every rank returns its rank; an allreduce of ranks."""
from __future__ import annotations

from typing import Callable

from ._core import fail, passed, run_on_workers

__all__ = ["welcome_rank", "welcome_allreduce"]


def welcome_rank(my_rank: Callable[[], int], world_size: int = 4) -> None:
    """Lesson 00, task 1: ``my_rank()`` run on every worker returns that worker's rank."""
    __tracebackhide__ = True
    got = run_on_workers(my_rank, world_size, learner_fn=my_rank)
    for rank, value in enumerate(got):
        if not _is_int(value):
            fail(f"rank {rank} returned {value!r} ({type(value).__name__}); return the "
                 "rank as a plain int, e.g. `return dist.get_rank()`.")
        if int(value) != rank:
            hint = (" — that is the world size, not the rank" if value == world_size else
                    " — is this rank counted from 1? Ranks start at 0" if value == rank + 1
                    else "")
            fail(f"rank {rank} returned {value}, expected {rank}{hint}. "
                 f"All ranks returned {list(got)}.")
    passed("welcome_rank", f"each of {world_size} workers returned its own rank {list(got)}")


def welcome_allreduce(sum_of_ranks: Callable[[], int],
                      world_sizes: tuple[int, ...] = (3, 4)) -> None:
    """Lesson 00, task 2: every rank returns the allreduce-sum of all ranks, n(n-1)/2."""
    __tracebackhide__ = True
    for n in world_sizes:
        want = n * (n - 1) // 2
        got = run_on_workers(sum_of_ranks, n, learner_fn=sum_of_ranks)
        for rank, value in enumerate(got):
            if not _is_int(value):
                fail(f"with {n} ranks, rank {rank} returned {value!r} "
                     f"({type(value).__name__}); return a plain int, e.g. `t.item()` "
                     "converted with int().")
            if int(value) != want:
                fail(f"with {n} ranks, rank {rank} returned {value}, expected "
                     f"0+1+…+{n - 1} = {want}. All ranks returned {list(got)}."
                     + _allreduce_hint(list(got), n))
    passed("welcome_allreduce", "every rank returned n(n-1)/2 for n in "
           f"{list(world_sizes)}: {', '.join(str(n * (n - 1) // 2) for n in world_sizes)}")


def _is_int(value: object) -> bool:
    if isinstance(value, (str, bytes)):
        return False
    try:
        return float(value) == int(value)          # 3, 3.0 and tensor(3.) all count
    except (TypeError, ValueError, RuntimeError):
        return False


def _allreduce_hint(got: list, n: int) -> str:
    values = [int(v) for v in got]
    if values == list(range(n)):
        return " Each rank returned only its own rank: did you call dist.all_reduce?"
    if all(v == n * (n + 1) // 2 for v in values):
        return " That is 1+…+n: ranks start at 0."
    if all(v == n - 1 for v in values):
        return " That is the largest rank: use the default op, ReduceOp.SUM, not MAX."
    if len(set(values)) > 1:
        return " The ranks disagree: every rank must take part in the same all_reduce."
    return ""
