"""Lesson 04's binomial-tree gather, judged by its shape as well as its result: every
message the learner's ranks send is recorded with the ranks whose values it carries, and
the shape must be the tree's — rank r ≠ 0 sends once, to r − 2^k (2^k the lowest set bit
of r), everything of its subtree r … r + 2^k − 1 in that one message. A flat gather, a
chain, a tree of another shape or a subtree sent in pieces is named."""
from __future__ import annotations

from typing import Any, Callable

from ._core import fail


def lowbit(r: int) -> int:
    return r & -r


def subtree(r: int, n: int) -> list[int]:
    """The ranks whose values rank r forwards in the binomial tree of n ranks."""
    return list(range(r, min(r + lowbit(r), n))) if r else list(range(n))


def carried(obj: Any, depth: int = 0) -> list[int]:
    """The ranks whose values (dicts with a 'from rank' key) are inside a message."""
    if depth > 6:
        return []
    if isinstance(obj, dict):
        if "from rank" in obj:
            return [obj["from rank"]]
        obj = list(obj.values())
    if isinstance(obj, (list, tuple, set)):
        return sorted(r for item in obj for r in carried(item, depth + 1))
    return []


class Watched:
    """The learner's communicator, each send recorded as (destination, ranks carried)."""

    def __init__(self, comm: Any):
        self._comm, self.sends = comm, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self.sends.append((int(dest), carried(obj)))
        self._comm.send(obj, dest, tag)


def worker(comm: Any, fn: Callable, values: list) -> tuple[Any, list]:
    """Worker: ``fn(comm, value)`` on a watched communicator; (result, sends)."""
    watched = Watched(comm)
    return fn(watched, values[comm.rank]), watched.sends


def shape_fault(sends: list[list[tuple[int, list[int]]]]) -> str | None:
    """What the recorded sends show, if they are not the binomial tree's (None if they are)."""
    n = len(sends)
    tree = ("In the binomial tree rank r ≠ 0 sends exactly once, to r − 2^k where 2^k is the "
            "lowest set bit of r (1 → 0, 2 → 0, 3 → 2, 4 → 0, 5 → 4, …), and that one message "
            "carries everything it has collected: the values of ranks r … r + 2^k − 1.")
    if sends[0]:
        return f"rank 0, the root, sent {len(sends[0])} message(s); it only receives. {tree}"
    dests = {r: [d for d, _ in sends[r]] for r in range(1, n)}
    parent = {r: r - lowbit(r) for r in range(1, n)}
    if all(dests[r] == [parent[r]] and sends[r][0][1] == subtree(r, n) for r in range(1, n)):
        return None
    if all(d == [0] for d in dests.values()):
        return (f"every rank sent its value straight to rank 0 — a flat gather: the root takes "
                f"in n − 1 = {n - 1} messages one after another, (n − 1)·α, where the tree "
                f"needs ⌈log2 n⌉ rounds. {tree}")
    if all(d == [r - 1] for r, d in dests.items()):
        return (f"every rank sent to rank r − 1 — a chain: n − 1 = {n - 1} rounds, one after "
                f"another, where the tree needs ⌈log2 n⌉. {tree}")
    for r in range(1, n):
        if len(dests[r]) > 1 and set(dests[r]) == {parent[r]}:
            return (f"rank {r} sent {len(dests[r])} messages to rank {parent[r]}, carrying ranks "
                    f"{[c for _, c in sends[r]]}: send what you have collected in ONE message "
                    f"(each message pays α). {tree}")
    wrong = [r for r in range(1, n) if dests[r] != [parent[r]]]
    if wrong:
        r = wrong[0]
        other = (" — a tree, but not the binomial one" if all(len(d) == 1 for d in dests.values())
                 else "")
        return (f"rank {r} sent to {dests[r] or 'nobody'}; its parent in the binomial tree is "
                f"rank {parent[r]}{other}. {tree}")
    r = next(r for r in range(1, n) if sends[r][0][1] != subtree(r, n))
    return (f"rank {r}'s message to rank {parent[r]} carried the values of ranks "
            f"{sends[r][0][1]}, not its subtree {subtree(r, n)}: it must first receive from "
            f"its children (r + 1, r + 2, r + 4, … below r + 2^k and n) and then forward all "
            f"of it. {tree}")


def judge_tree(name: str, sends: list, n: int) -> None:
    """Fail with the named shape if the gather was not the binomial tree."""
    __tracebackhide__ = True
    fault = shape_fault(sends)
    if fault:
        fail(f"{name} does not gather along the binomial tree ({n} ranks): {fault}")
