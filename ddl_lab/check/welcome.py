"""Checks for lesson 00 (welcome): every rank returns its rank; one all_reduce of the ranks.

Both run the learner's function on real workers with 4 ranks (the lesson's) and then 3, so
a hard-coded world size shows; lesson 04's checks use the same two warm clusters."""
from __future__ import annotations

from typing import Any, Callable

from ._core import fail, passed, run_on_workers
from ._diagnose import only_right_for, refuse

__all__ = ["rank", "sum_of_ranks"]

WORLD_SIZES = (4, 3)


def _is_int(value: object) -> bool:
    if isinstance(value, (str, bytes, bool)) or value is None:
        return False
    try:
        return float(value) == int(value)          # 3, 3.0 and tensor(3) all count
    except (TypeError, ValueError, RuntimeError):
        return False


def _not_an_int(name: str, n: int, r: int, value: Any) -> str:
    what = ("None: the function has no `return`" if value is None else
            f"{value!r:.40} ({type(value).__name__})")
    return (f"{name} on rank {r} of {n} returned {what}; return the value as a plain int, "
            "e.g. `return dist.get_rank()` or `int(t.item())`.")


# ------------------------------------------------------------------ task 1

def rank(my_rank: Callable[[], int], world_sizes: tuple[int, ...] = WORLD_SIZES) -> None:
    """Lesson 00, task 1: ``my_rank()`` run on every worker returns that worker's rank."""
    __tracebackhide__ = True
    name, right = getattr(my_rank, "__name__", "my_rank"), []
    for n in world_sizes:
        got = run_on_workers(my_rank, n, learner_fn=my_rank)
        for r, value in enumerate(got):
            if not _is_int(value):
                fail(_not_an_int(name, n, r, value))
        values = [int(v) for v in got]
        if values == list(range(n)):
            right.append(f"{n} ranks")
            continue
        hint = (" — that is the world size, not the rank" if all(v == n for v in values) else
                " — ranks counted from 1? They start at 0" if values == list(range(1, n + 1))
                else " — every rank returned the same number" if len(set(values)) == 1
                else "")
        bad = next(r for r, v in enumerate(values) if v != r)
        fail(f"with {n} ranks, rank {bad} returned {values[bad]}, expected {bad}{hint}. "
             f"All ranks returned {values}." + only_right_for(right, f"{n} ranks"))
    passed("rank", f"every worker returned its own rank, with {' and '.join(right)}")


# ------------------------------------------------------------------ task 2

def _spied_sum_of_ranks(fn: Callable) -> tuple[Any, list[tuple[list, str, list]]]:
    """On a worker: run the learner's ``fn`` with every dist.all_reduce recorded as
    (tensor before, op, tensor after)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d
    original, calls = c10d.all_reduce, []

    def spy(tensor: Any, op: Any = dist.ReduceOp.SUM, *args: Any, **kwargs: Any) -> Any:
        before = tensor.detach().flatten().tolist()
        out = original(tensor, op, *args, **kwargs)
        calls.append((before, str(op).rsplit(".", 1)[-1], tensor.detach().flatten().tolist()))
        return out

    glb = getattr(fn, "__globals__", {})
    aliases = [k for k, v in glb.items() if v is original]   # `from … import all_reduce`
    dist.all_reduce = c10d.all_reduce = spy
    for k in aliases:
        glb[k] = spy
    try:
        return fn(), calls
    finally:
        dist.all_reduce = c10d.all_reduce = original
        for k in aliases:
            glb[k] = original


def sum_of_ranks(my_sum_of_ranks: Callable[[], int],
                 world_sizes: tuple[int, ...] = WORLD_SIZES) -> None:
    """Lesson 00, task 2: every rank returns 0+1+…+(n−1) = n(n−1)/2, computed with ONE
    ``dist.all_reduce`` (sum) of a tensor holding the rank."""
    __tracebackhide__ = True
    refuse(my_sum_of_ranks, "sum_of_ranks", "ddl_lab.welcome", "sum_of_ranks")
    name, right, runs = getattr(my_sum_of_ranks, "__name__", "my_sum_of_ranks"), [], []
    for n in world_sizes:                   # the sums first, at every size; then the calls
        want = n * (n - 1) // 2
        out = run_on_workers(_spied_sum_of_ranks, n, my_sum_of_ranks, learner_fn=my_sum_of_ranks)
        got, calls = [v for v, _ in out], [c for _, c in out]
        runs.append((n, calls))
        for r, value in enumerate(got):
            if not _is_int(value):
                fail(_not_an_int(name, n, r, value))
        values = [int(v) for v in got]
        if values != [want] * n:
            fail(f"with {n} ranks, the ranks returned {values}, expected 0+1+…+{n - 1} = "
                 f"{want} on every rank. " + _sum_hint(values, calls, n, right))
        right.append(f"{n} ranks")
    for n, calls in runs:
        fault = _allreduce_fault(name, calls, n)
        if fault:
            fail(fault)
    passed("sum_of_ranks", "one all_reduce of the rank on every worker gave n(n−1)/2 — "
           + ", ".join(f"{n} ranks: {n * (n - 1) // 2}" for n in world_sizes))


def _allreduce_fault(name: str, calls: list[list], n: int) -> str | None:
    """What is wrong with the all_reduce calls of a run whose results were right."""
    counts = [len(c) for c in calls]
    if counts == [0] * n:
        return (f"with {n} ranks {name} returned the right sum without calling "
                "dist.all_reduce (a closed form such as n·(n−1)/2?): the task is the "
                "collective — put the rank in a tensor and all_reduce it, once.")
    if any(k != 1 for k in counts):
        return (f"with {n} ranks, the ranks called dist.all_reduce {counts} times: one "
                "all_reduce of a tensor holding the rank is enough.")
    ops = sorted({c[0][1] for c in calls if not c[0][1].endswith("SUM")})
    if ops:
        return (f"with {n} ranks the all_reduce used op={ops[0]}, which happens to give the "
                "sum here: use the default op, ReduceOp.SUM.")
    held = [c[0][0] for c in calls]
    if any(not before or any(x != r for x in before) for r, before in enumerate(held)):
        return (f"with {n} ranks, the tensors given to dist.all_reduce held {held} on ranks "
                f"0…{n - 1}: each rank's tensor should hold its own rank.")
    return None


def _sum_hint(values: list[int], calls: list[list], n: int, right: list[str]) -> str:
    ops = {c[1] for rank_calls in calls for c in rank_calls}
    if not any(calls):
        if values == list(range(n)):
            return "Each rank returned only its own rank: did you call dist.all_reduce?"
        return "dist.all_reduce was never called." + only_right_for(right, f"{n} ranks")
    other = sorted(op for op in ops if not op.endswith("SUM"))
    if other:
        return f"The all_reduce used op={other[0]}: use the default op, ReduceOp.SUM."
    if all(v == n * (n + 1) // 2 for v in values):
        return "That is 1+…+n: ranks start at 0 (put dist.get_rank() itself in the tensor)."
    if len(set(values)) > 1:
        return ("The ranks disagree: every rank must take part in the same all_reduce, and "
                "return the tensor's value after it.")
    return (only_right_for(right, f"{n} ranks").strip()
            or "Put the rank in a tensor and all_reduce it.")
