"""Code run on n-rank worlds carved out of one warm cluster (the checks of lessons 00–12,
the capstone's meter).

A check draws world sizes 2–5, but starting a cluster per size would cost seconds each.
So every case runs on the one shared cluster of ``MAX_WORLD`` ranks: ranks 0…n−1 make a
fresh gloo group of n ranks, which becomes the default group while the learner's code
runs (``dist.get_world_size()`` is n, ``dist.send(t, 1)`` goes to rank 1, ``all_reduce``
sums over the n ranks); the other ranks wait. All of a check's cases go to the workers in
one call and run one after the other; after each, the whole cluster agrees whether it
failed, and stops there if so.

Each call makes fresh groups (one per world size), so a message an earlier answer left
unreceived cannot leak into it, and they have an operation timeout, so a deadlock is
reported in seconds rather than at the cluster's time limit. When the learner's code raises
on one rank, that rank closes the group: its neighbours, blocked in a receive from it, fail
at once. Each rank reports every case it leaves (``runtime.progress``), so when the call
outlives its time limit the parent names the case's world and, of its ranks only, those
still in the learner's code: computing or waiting, and where.

Failures come back structured: each rank that raised sends home a ``Raised`` saying, beside
the traceback, what its exception was (decided on the worker, where the exception exists),
and the parent sums them up in one ``RankFailure`` per case.
"""
from __future__ import annotations

import datetime
import traceback
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from .errors import WorkerError, WorkerTimeout, caused_by, exception_chain
from .launch import shared_cluster
from .patience import patience
from .progress import WORKER, on_progress


MAX_WORLD = 5               # the largest world size a check draws; the cluster's size
OP_TIMEOUT_S = 15.0 * patience()    # a send/recv/collective that waits longer is a deadlock
CASES_TIMEOUT = 60.0 * patience()   # seconds all of a call's cases may take together
# what gloo says (it raises a plain RuntimeError) when an operation waited past the group's
# timeout, and when the rank at the other end closed its connection
_GLOO_TIMED_OUT = "Timed out waiting"
_GLOO_CLOSED = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                "connectFullMesh failed")


@dataclass
class Raised:
    """Worker → parent: the learner's code raised on this rank.

    ``text``: the whole traceback; ``exception``: the exception's type name; ``stub``: it
    was (or was caused by) a NotImplementedError, a stub not written yet; ``timed_out``: a
    send, receive or collective waited past the operation timeout; ``closed``: another rank
    closed its connection (a failure that follows another rank's).
    """
    text: str
    exception: str = ""
    stub: bool = False
    timed_out: bool = False
    closed: bool = False


# ------------------------------------------------------------------ on the workers

def raised(error: BaseException) -> Raised:
    """Worker side: what ``error`` was, for the parent."""
    said = [str(e) for e in exception_chain(error)]
    return Raised("".join(traceback.format_exception(error)).rstrip(), type(error).__name__,
                  caused_by(error, NotImplementedError),
                  any(_GLOO_TIMED_OUT in s for s in said),
                  any(c in s for s in said for c in _GLOO_CLOSED))


def _default_group(group: Any) -> None:
    from torch.distributed import distributed_c10d as c10d
    c10d._update_default_pg(group)         # the one private hook: make ``group`` the default


class _ranks_within:
    """While active, a send/recv to a rank outside 0…n−1 raises a ValueError (gloo itself
    would crash the process)."""

    def __init__(self, n: int):
        from torch._C._distributed_c10d import ProcessGroup
        self.n, self.pg = n, ProcessGroup
        self.raw = {m: ProcessGroup.__dict__[m] for m in ("send", "recv")}

    def __enter__(self) -> None:
        for method in self.raw:
            setattr(self.pg, method, self._guarded(method, getattr(self.pg, method)))

    def _guarded(self, method: str, call: Callable) -> Callable:
        n = self.n

        def guarded(pg, tensors, peer, *args, **kwargs):
            if not 0 <= int(peer) < n:
                way = "to" if method == "send" else "from"
                raise ValueError(f"dist.{method} {way} rank {peer}, but the world has {n} "
                                 f"ranks (0 … {n - 1}): read the world size from "
                                 "dist.get_world_size() and wrap neighbours with % n.")
            return call(pg, tensors, peer, *args, **kwargs)
        return guarded

    def __exit__(self, *exc: Any) -> None:
        for method, original in self.raw.items():
            setattr(self.pg, method, original)


def _one_case(group: Any, n: int, body: Callable, args: tuple) -> Any:
    """``body(*args)`` on this rank with ``group`` (n ranks) as the default group; a
    ``Raised`` if it failed here."""
    from torch.distributed import distributed_c10d as c10d
    world = c10d._get_default_group()
    try:
        _default_group(group)
        with _ranks_within(n):
            return body(*args)
    except Exception as e:                 # the learner's error, sent home described
        return raised(e)
    finally:
        _default_group(world)


def in_worlds(body: Callable, cases: Sequence[tuple[int, tuple]],
              op_timeout: float = OP_TIMEOUT_S) -> list:
    """Worker: each case ``(n, args)`` in turn, ranks 0…n−1 in one gloo group per n (made
    fresh for this call); stops after the first case that failed on any rank (the whole
    cluster agrees on it with one all_reduce). One entry per case run; None on the ranks
    outside a case."""
    import gc
    import torch
    import torch.distributed as dist
    rank, groups, out = dist.get_rank(), {}, []
    for k, (n, args) in enumerate(cases):
        if n not in groups:
            groups[n] = dist.new_group(list(range(n)), backend="gloo",
                                       timeout=datetime.timedelta(seconds=op_timeout))
            if rank < n:
                dist.barrier(group=groups[n])     # all connected before anyone may close
        out.append(_one_case(groups[n], n, body, args) if rank < n else None)
        _left(k + 1, len(cases))
        failed = torch.tensor([int(isinstance(out[-1], Raised))])
        if failed.item():                  # close it now: peers blocked in a recv from this
            dist.destroy_process_group(groups.pop(n))      # rank fail at once
            gc.collect()
        dist.all_reduce(failed)
        if failed.item():
            break
    for n, group in groups.items():
        if rank < n:
            try:
                dist.barrier(group=group)  # nobody closes a group while a peer still reads
            except RuntimeError:           # its peer already closed it after a failure
                pass
            dist.destroy_process_group(group)
    return out


def _left(done: int, total: int) -> None:
    """Worker: tell the parent this rank has left ``done`` of the ``total`` cases (unthrottled,
    unlike ``progress``: a timeout's report relies on every one)."""
    if "conn" in WORKER:
        with WORKER["lock"]:
            WORKER["conn"].send(("progress", done, total))


# ------------------------------------------------------------------ in the parent

@dataclass
class RankFailure:
    """How the learner's code failed on the workers.

    kind: 'stub' (it raised NotImplementedError on ``rank``), 'raised' (``line`` is the
    exception's last line, ``exception`` its type name, on ``rank``), 'deadlock' (every
    waiting rank timed out in a send/recv/collective), 'died' (a rank's process was killed,
    e.g. by gloo), 'timeout' (ranks of a case never finished within the time limit: ``line``
    says which, after how long, computing or waiting, and where each was). ``text``: the
    rank's traceback or the whole report.
    """
    kind: str
    rank: int
    line: str
    text: str
    exception: str = ""
    op_timeout: float | None = None     # a deadlock's wait, if not OP_TIMEOUT_S

    def message(self, name: str, n: int) -> str:
        """The usual sentence for this failure; checks add their task's hint."""
        if self.kind == "stub":
            return self.line
        if self.kind == "deadlock":
            waited = self.op_timeout or OP_TIMEOUT_S
            return (f"{name} deadlocked on {n} ranks: every rank waited more than "
                    f"{waited:g} s in a send, receive or collective that no other rank "
                    "matched (two ranks both receiving first, a blocking send to a rank that "
                    "is itself sending, or a collective not every rank called).")
        if self.kind == "timeout":
            return f"{name} {self.line}"
        if self.kind == "died":
            return f"{name} killed a worker process: {self.line}"
        return f"{name} failed on rank {self.rank} of {n}: {self.line}"


@dataclass
class Outcome:
    """One case: the results of ranks 0…n−1, or how it failed."""
    n: int
    results: list | None
    failure: RankFailure | None


class WorldFailed(Exception):
    """The workers failed outside any one case (a killed process, the time limit)."""

    def __init__(self, failure: RankFailure):
        super().__init__(failure.line)
        self.failure = failure


def stub_failure(fn: Callable, rank: int = 0, text: str = "") -> RankFailure:
    """``fn`` raised NotImplementedError on ``rank``: a stub not written yet."""
    name = getattr(fn, "__name__", "the function")
    return RankFailure("stub", rank, f"{name} is not implemented yet (it raised "
                       "NotImplementedError)", text, "NotImplementedError")


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def classify(failures: dict[int, Raised], fn: Callable) -> RankFailure:
    """The learner's failure among the ranks' (secondary ones — a neighbour's closed
    connection — are skipped)."""
    stubs = sorted(r for r, v in failures.items() if v.stub)
    if stubs:
        return stub_failure(fn, stubs[0], failures[stubs[0]].text)
    primary = {r: v for r, v in failures.items() if not v.closed}
    if primary and all(v.timed_out for v in primary.values()):
        r = min(primary)
        return RankFailure("deadlock", r, _last_line(primary[r].text), primary[r].text,
                           primary[r].exception)
    raised_here = {r: v for r, v in primary.items() if not v.timed_out}
    among = raised_here or primary or failures
    r = min(among)
    return RankFailure("raised", r, _last_line(among[r].text), among[r].text, among[r].exception)


def _bare_stub(fn: Callable) -> bool:
    """True if ``fn`` does nothing but raise NotImplementedError (an exercise's stub), so
    there is no need to start workers to find out."""
    import dis
    code = getattr(fn, "__code__", None)
    if code is None:
        return False
    ops = [i for i in dis.get_instructions(code) if i.opname not in ("RESUME", "NOP")]
    return (bool(ops) and ops[0].opname in ("LOAD_GLOBAL", "LOAD_NAME")
            and ops[0].argval == "NotImplementedError"
            and all(i.opname in ("LOAD_CONST", "PRECALL", "CALL", "RAISE_VARARGS")
                    for i in ops[1:]) and ops[-1].opname == "RAISE_VARARGS")


def run_cases(body: Callable, cases: Sequence[tuple[int, tuple]], *, fn: Callable,
              timeout: float | None = None, op_timeout: float | None = None) -> list[Outcome]:
    """Run ``body(*args)`` for each case ``(n, args)`` on an n-rank world carved out of the
    warm shared cluster, up to the first case that fails (its Outcome has the failure).
    A failure outside the cases raises ``WorldFailed`` (``fn``: the learner's function).
    ``op_timeout``: seconds one send, receive or collective may wait before the case counts
    as a deadlock (``OP_TIMEOUT_S``; tests of deadlocks set it short)."""
    if not all(1 <= n <= MAX_WORLD for n, _ in cases):
        raise ValueError(f"world sizes must lie in 1…{MAX_WORLD}")
    if _bare_stub(fn):
        raise WorldFailed(stub_failure(fn))
    cluster, left = shared_cluster(MAX_WORLD), {}
    limit = timeout or CASES_TIMEOUT
    try:
        with on_progress(lambda r, done, total: left.__setitem__(r, done)
                         if total == len(cases) else None):
            per_rank = cluster.run_with(in_worlds, (body, list(cases), op_timeout or OP_TIMEOUT_S),
                                        {}, timeout=limit)
    except WorkerTimeout as e:
        raise WorldFailed(timed_out(e, [n for n, _ in cases], left, limit)) from None
    except WorkerError as e:
        if e.not_implemented:
            r = e.not_implemented[0]
            raise WorldFailed(stub_failure(fn, r, e.failures[r])) from None
        raise WorldFailed(RankFailure("died", min(e.failures, default=0),
                                      str(e).splitlines()[0], str(e))) from None
    outcomes = []
    for k, (n, _) in enumerate(cases[:len(per_rank[0])]):
        results = [per_rank[r][k] for r in range(n)]
        failed = {r: v for r, v in enumerate(results) if isinstance(v, Raised)}
        outcomes.append(Outcome(n, None, replace(classify(failed, fn), op_timeout=op_timeout))
                        if failed else Outcome(n, results, None))
    return outcomes


def timed_out(e: WorkerTimeout, sizes: list[int], left: dict[int, int],
              limit: float) -> RankFailure:
    """A call that outlived ``limit``: of the ranks of the case it was in (the first some rank
    had not left; ``left``: cases each rank reported leaving), those that never finished,
    whether they were computing (a loop that never ends) or waiting (a deadlock), and where."""
    k = min(min(left.get(r, 0) for r in range(MAX_WORLD)), len(sizes) - 1)
    n = sizes[k]
    ranks = ([r for r in range(n) if r in e.failures and left.get(r, 0) == k]
             or [r for r in range(n) if r in e.failures] or sorted(e.failures))
    verdict = ("still computing — a loop that never ends, or far more work than the task "
               "needs" if set(ranks) & set(e.busy) else
               "probably a deadlock (a recv with no matching send, two ranks both waiting to "
               "receive first, or a collective not every rank called)")
    where = "".join(f"\n  rank {r}: {e.failures[r].removeprefix('did not answer: ')}"
                    for r in ranks)
    return RankFailure("timeout", ranks[0], f"timed out after {limit:g} s on {n} ranks: "
                       f"rank(s) {ranks} never finished — {verdict}. Where each was:{where}",
                       str(e))


def run_in_world(body: Callable, n: int, *args: Any, fn: Callable,
                 timeout: float | None = None, op_timeout: float | None = None) -> list:
    """One case: ``body(*args)`` on an n-rank world; the results of ranks 0…n−1. Any
    failure raises ``WorldFailed``."""
    outcome = run_cases(body, [(n, args)], fn=fn, timeout=timeout, op_timeout=op_timeout)[0]
    if outcome.failure is not None:
        raise WorldFailed(outcome.failure)
    return outcome.results
