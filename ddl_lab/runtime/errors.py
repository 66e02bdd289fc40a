"""What a failed run tells the learner (lesson 00): which rank, what happened, where.

A timeout shows where *each* rank was at that moment, so a deadlock reads as one
("waiting in dist.recv ...") and slow work reads as slow work ("computing ...").
"""
from __future__ import annotations

import inspect
import signal
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .stacks import Where


class WorkerError(RuntimeError):
    """One or more ranks raised, died or did not answer; the message names them.

    ``failures`` maps each failed rank to its traceback or a one-line account;
    ``restarted`` is True when the workers were stopped (fresh ones start with the
    next run); ``raised`` maps each rank whose function raised to the exception's type
    name; ``not_implemented`` lists the ranks whose exception was (or was caused by) a
    NotImplementedError — a stub not written yet.
    """

    def __init__(self, message: str, failures: dict[int, str], restarted: bool = True, *,
                 raised: dict[int, str] | None = None, not_implemented: list[int] | None = None):
        super().__init__(message)
        self.failures = failures
        self.restarted = restarted
        self.raised = raised or {}
        self.not_implemented = not_implemented or []


class WorkerTimeout(WorkerError):
    """Some ranks did not answer within the timeout; the message says where each was.

    ``busy`` lists the ranks that were computing when asked, ``waiting`` those waiting in
    a communication call (send, receive, collective); the rest did not say.
    """

    def __init__(self, message: str, failures: dict[int, str], restarted: bool = True, *,
                 busy: list[int] | None = None, waiting: list[int] | None = None):
        super().__init__(message, failures, restarted)
        self.busy = busy or []
        self.waiting = waiting or []


class RunInterrupted(KeyboardInterrupt):
    """A run was interrupted (Ctrl-C, Jupyter's stop button); its workers were stopped."""

    def __str__(self) -> str:
        return "run interrupted: the workers were stopped; the next run starts fresh ones"

    def _render_traceback_(self) -> list[str]:      # IPython: one line, not the internals
        return [f"\x1b[31mRunInterrupted\x1b[0m: {self}"]


@dataclass
class Failure:
    """How one rank failed: kind 'raised' or 'died', full text, one-line summary; for
    'raised', the exception's type name and whether it was a NotImplementedError."""
    kind: str
    text: str
    summary: str
    hint: str = ""
    exception: str = ""
    not_implemented: bool = False


def exception_chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, then the exceptions its traceback shows as its cause or context."""
    seen: set[int] = set()
    at: BaseException | None = error
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        yield at
        at = at.__cause__ or (None if at.__suppress_context__ else at.__context__)


def caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    """Is ``error``, or an exception its traceback shows it came from, a ``kind``?"""
    return any(isinstance(e, kind) for e in exception_chain(error))


_DEADLOCK = (": a deadlock — every unfinished rank waits for a message that no rank will "
             "send (e.g. a recv with no matching send, or a collective that not every "
             "rank called)")
_SLOW = (": still working, not stuck — rank(s) {busy} were computing. For long training "
         "pass timeout=None (no limit) or a larger timeout (Cluster(n, timeout=...), "
         "run_with(fn, timeout=...)), and report progress(done, total) from the workers")
_UNKNOWN = (" (a deadlock? e.g. a recv with no matching send, or a collective that not "
            "every rank called; or slow work: pass a larger timeout, or timeout=None)")


def run_error(world_size: int, doing: str, failures: dict[int, Failure], missing: list[int],
              waited: float, where: dict[int, Where], stopped: bool) -> WorkerError:
    """The error for a failed run: a headline, where each rank was, the tracebacks."""
    parts = [f"rank {r} {failures[r].summary}" for r in sorted(failures)]
    if missing:
        parts.append(f"rank(s) {missing} did not answer within {waited:.1f} s"
                     + (_verdict(missing, where) if not failures else ""))
    head = f"while {doing} on {world_size} ranks: " + "; ".join(parts)
    head += "".join(f". {h}" for h in dict.fromkeys(f.hint for f in failures.values() if f.hint))
    if doing == "running":
        head += (". The workers were stopped; the next run starts fresh ones." if stopped
                 else ". The cluster is ready for the next run.")
    if missing:
        head += "\nwhere each rank was:\n" + "\n".join(
            f"  rank {r}: {_state(r, failures, missing, where)}" for r in range(world_size))
    table = {r: f.text for r, f in failures.items()}
    table.update({r: "did not answer: " + where[r].text if r in where else "did not answer"
                  for r in missing})
    details = "\n\n".join(f"--- rank {r} ---\n{f.text.rstrip()}"
                          for r, f in sorted(failures.items()) if f.kind == "raised")
    message = head + ("\n\n" + details if details else "")
    if missing and not failures:
        return WorkerTimeout(message, table, stopped, busy=_ranks_where(missing, where, False),
                             waiting=_ranks_where(missing, where, True))
    return WorkerError(message, table, stopped,
                       raised={r: f.exception for r, f in failures.items() if f.exception},
                       not_implemented=sorted(r for r, f in failures.items()
                                              if f.not_implemented))


def _ranks_where(missing: list[int], where: dict[int, Where], waiting: bool) -> list[int]:
    """The ranks among ``missing`` whose stack said ``waiting``: True in a communication
    call, False computing."""
    return [r for r in missing if r in where and where[r].waiting is waiting]


def _verdict(missing: list[int], where: dict[int, Where]) -> str:
    known = [where[r] for r in missing if r in where and where[r].waiting is not None]
    busy = _ranks_where(missing, where, False)
    if busy:
        return _SLOW.format(busy=busy)
    if known and len(known) == len(missing):
        return _DEADLOCK
    return _UNKNOWN


def _state(r: int, failures: dict[int, Failure], missing: list[int],
           where: dict[int, Where]) -> str:
    if r in failures:
        return failures[r].summary
    if r in where:
        return where[r].text
    return "did not say (busy in C code that holds the GIL?)" if r in missing else "finished"


def death_hint(code: int | None) -> str:
    """What a rank's death by SIGKILL most often means (parent side), else ''."""
    if code != -signal.SIGKILL:
        return ""
    return ("If nobody killed it, the kernel's out-of-memory killer did (memory ran out): "
            "use fewer ranks or smaller tensors")


_OUT_OF_MEMORY = ("can't allocate memory", "out of memory", "Cannot allocate memory")


def memory_hint(error: BaseException) -> str:
    """What to do when a rank ran out of memory (worker side), else ''."""
    if not (isinstance(error, MemoryError) or any(s in str(error) for s in _OUT_OF_MEMORY)):
        return ""
    return ("That rank ran out of memory: every rank holds its own copy of its tensors, so "
            "the whole cluster needs world_size times as much. Use smaller tensors or fewer "
            "ranks (ddl_lab.runtime.memory.worker_memory(cluster.pids) shows what each uses)")


_OPTIONS = frozenset({"timeout", "backend", "num_threads"})


def call_hint(fn: Callable, kwargs: dict[str, Any], error: TypeError) -> str:
    """What to do when ``fn`` cannot take the arguments it was given (worker side)."""
    text, name = str(error), getattr(fn, "__name__", "fn")
    if "unexpected keyword argument" in text and _OPTIONS & set(kwargs):
        return ("run() and launch() hand every keyword argument to your function; runtime "
                "options go to cluster.run_with(fn, args, kwargs, timeout=...) or "
                "launch_with(fn, n, args, kwargs, timeout=..., backend=...)")
    try:
        first = next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        first = None
    if "missing" in text and first == "rank":
        return (f"A tutorial-style {name}(rank, size)? Run it as launch(rank_size({name}), n) "
                f"or cluster.run(rank_size({name})): it is called with dist.get_rank(), "
                "dist.get_world_size()")
    return ""
