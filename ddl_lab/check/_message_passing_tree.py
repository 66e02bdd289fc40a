"""Lesson 04's shaped communication, judged by its shape as well as its result.

The binomial-tree gather: every message the learner's ranks send is recorded with the ranks
whose values it carries, and the shape must be the tree's — rank r ≠ 0 sends once, to
r − 2^k (2^k the lowest set bit of r), everything of its subtree r … r + 2^k − 1 in that
one message. A flat gather, a chain, a tree of another shape or a subtree sent in pieces
is named. The pipelined chain broadcast: every send and receive is logged in call order,
and each piece must go down the chain, one message per piece, each forwarded before the
next arrives. A flat broadcast, store-and-forward and a whole message forwarded at once
are named."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ddl_lab.message_passing.comm import ANY_SOURCE, ANY_TAG

from ._core import fail
from ._diagnose import describe_value


# ------------------------------------------------------------ gathers

class LatestFirst:
    """The root's communicator for the gather check: ``recv(ANY_SOURCE)`` (any tag) returns
    the message of the highest rank not yet received from — an order MPI allows."""

    def __init__(self, comm: Any):
        self._comm, self._left = comm, set(range(comm.size)) - {comm.rank}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def recv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
             timeout: float | None = None) -> Any:
        if source == ANY_SOURCE and tag == ANY_TAG and self._left:
            source = max(self._left)
        self._left.discard(source)
        return self._comm.recv(source, tag, timeout)


def gather_value(rank: int, case_index: int) -> dict:
    rng = np.random.default_rng([case_index, rank])
    return {"from rank": rank, "data": rng.integers(0, 100, size=int(rng.integers(0, 6)))}


def same_values(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        isinstance(g, dict) and g.get("from rank") == w["from rank"]
        and np.array_equal(g.get("data"), w["data"]) for g, w in zip(got, want))


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
    fault = shape_fault(sends)
    if fault:
        fail(f"{name} does not gather along the binomial tree ({n} ranks): {fault}")


# ------------------------------------------------------------ the pipelined chain

class Logged:
    """The learner's communicator, every send and receive logged in call order as
    ('send', destination, numbers sent) or ('recv', source, numbers received)."""

    def __init__(self, comm: Any):
        self._comm, self.log = comm, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self.log.append(("send", int(dest), _numbers(obj)))
        self._comm.send(obj, dest, tag)

    def recv(self, source: int = -1, tag: int = -1, timeout: float | None = None) -> Any:
        obj = self._comm.recv(source, tag, timeout)
        self.log.append(("recv", int(source), _numbers(obj)))
        return obj


def _numbers(obj: Any) -> int:
    size = getattr(obj, "size", None)
    if isinstance(size, int):
        return size
    if isinstance(obj, (list, tuple)):
        return sum(_numbers(o) for o in obj)
    return 1


def chain_worker(comm: Any, fn: Callable, numel: int, pieces: int) -> tuple[Any, list]:
    """Worker: ``fn(comm, data, pieces)`` on a logged communicator (data on rank 0 only)."""
    logged = Logged(comm)
    data = np.arange(numel, dtype=np.float64) * 0.5 if comm.rank == 0 else None
    return fn(logged, data, pieces), logged.log


def chain_fault(logs: list[list[tuple]], pieces: int) -> str | None:
    """What the logged calls show, if they are not a pipelined chain (None if they are)."""
    chain = ("Down a chain rank r receives only from r − 1 and sends only to r + 1 (the last "
             "rank sends nothing), one message per piece, and forwards each piece before it "
             "receives the next, so all the links work at the same time.")
    for r, log in enumerate(logs):
        stray = sorted({peer for op, peer, _ in log if op == "send" and peer != r + 1}
                       | {peer for op, peer, _ in log if op == "recv" and peer != r - 1})
        if stray:
            sent = sorted({peer for op, peer, _ in log if op == "send"})
            if r == 0 and len(sent) > 1:
                return (f"rank 0 sent pieces straight to ranks {sent} — a flat broadcast, not "
                        f"a chain: the root's link carries every copy, (n − 1)·S bytes. {chain}")
            return f"rank {r} exchanged messages with rank(s) {stray}. {chain}"
    for r, log in enumerate(logs[:-1]):
        sends = [k for op, _, k in log if op == "send"]
        if len(sends) != pieces:
            return (f"rank {r} sent {len(sends)} message(s) to rank {r + 1} for {pieces} "
                    f"pieces: forward each piece as its own message. {chain}")
        ops = [op for op, _, _ in log]
        if r and ops != ["recv", "send"] * pieces:
            return (f"rank {r} received {ops.index('send') if 'send' in ops else len(ops)} "
                    f"pieces before it forwarded the first (its calls: {' '.join(ops[:8])}"
                    f"{' …' if len(ops) > 8 else ''}) — store and forward: rank {r + 1} waits "
                    f"for the whole message, and the links work one after another. {chain}")
    return None


def judge_chain(name: str, results: list, logs: list, numel: int, pieces: int) -> None:
    """Fail with the named fault if the chain broadcast's results or shape are wrong."""
    want = np.arange(numel, dtype=np.float64) * 0.5
    fault = chain_fault(logs, pieces)
    if fault:
        fail(f"{name} does not pipeline down the chain ({len(logs)} ranks, {pieces} pieces of "
             f"{numel} numbers): {fault}")
    for r, got in enumerate(results):
        arr = np.asarray(got) if got is not None else None
        if arr is None or arr.shape != want.shape or not np.array_equal(arr, want):
            fail(f"rank {r} returned {describe_value(got)}, not the root's array of {numel} "
                 "numbers in order: every rank (the root too) returns the whole array, its "
                 "pieces joined in the order they were cut.")
