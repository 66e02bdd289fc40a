"""``Cluster``: worker processes started from a notebook cell (lesson 00).

``Cluster(world_size)`` starts real worker processes (``multiprocess``, forkserver) with the
default ``torch.distributed`` process group initialised and runs a function on every
rank::

    with Cluster(world_size=4) as cluster:
        results = cluster.run(fn, *args, **kwargs)              # rank order
        results = cluster.run_with(fn, args, kwargs, timeout=None)   # runtime options

``run`` hands every argument to ``fn``; runtime options (the timeout) go to
``run_with``. A rank that raises, dies or hangs is reported by rank within seconds; the
failed workers are stopped at once and fresh ones start with the next run.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
import time
import weakref
from functools import partial
from typing import Any, Callable

from multiprocess.connection import Connection, wait

from .backends import check_port, choose_backend, free_port
from .errors import Failure, RunInterrupted, WorkerError, death_hint, run_error
from .memory import check_fits
from .patience import patience
from .pickling import loads, pickle_task
from .process import CONTEXT, Child, exit_text, join_all, stop_all
from .progress import SINKS
from .stacks import Where
from .worker import worker_main

_ERROR_GRACE_S = 3.0       # after one rank fails, how long the others get to answer
_LOAD_S = 60.0             # extra time to unpickle a task and import what it needs
_WHERE_S = 2.0             # after a timeout, the most the ranks get to say where they are
_NO_LIMIT_S = 24 * 3600.0  # the collectives' timeout when runs have no limit
RUN_TIMEOUT_S = 30.0 * patience()   # a run's default limit (DDL_LAB_PATIENCE stretches it)
_LIVE: "weakref.WeakSet[Cluster]" = weakref.WeakSet()


class _ClusterTimeout:
    """``run_with``'s default: the timeout the cluster was made with."""

    def __repr__(self) -> str:
        return "CLUSTER_TIMEOUT"


CLUSTER_TIMEOUT: Any = _ClusterTimeout()


class Cluster:
    """``world_size`` worker processes with torch.distributed initialised (lesson 00).

    Args:
        world_size: number of ranks (>= 1).
        backend: 'auto' (nccl with one GPU per rank, else gloo), 'gloo' or 'nccl'.
        timeout: seconds a ``run`` may take before the ranks that did not answer are
            reported (with where each one was) and stopped; also the collectives'
            timeout (default 30 s, times ``DDL_LAB_PATIENCE``). ``None``: no limit (long
            training; stop it with the stop button).
        num_threads: ``torch.set_num_threads`` in each worker.
        echo: forward what workers print, line by line, prefixed with the rank.
        addr, port: rendezvous over TCP at addr:port; by default (port=None) a file
            store private to this cluster is used and no port is opened.

    Workers also get ``MASTER_ADDR``/``MASTER_PORT`` (a free loopback port of this
    cluster's own), ``RANK`` and ``WORLD_SIZE``, so ``torch.distributed.rpc`` starts.
    """

    def __init__(self, world_size: int = 4, backend: str = "auto",
                 timeout: float | None = RUN_TIMEOUT_S, num_threads: int = 1, echo: bool = True,
                 addr: str = "127.0.0.1", port: int | None = None):
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
        _check_timeout(timeout)
        if not isinstance(num_threads, int) or num_threads < 1:
            raise ValueError(f"num_threads must be an integer >= 1, got {num_threads!r}")
        check_fits(world_size)                # before a single process starts
        self.world_size = world_size
        self.backend = choose_backend(backend, world_size)
        self.timeout = None if timeout is None else float(timeout)
        self.num_threads = num_threads
        self.echo = echo
        self.addr, self.port = addr, port
        self._procs: list[Child] = []
        self._conns: list[Connection] = []
        self._ctls: list[Connection] = []
        self._tmpdir: str | None = None
        self._task = 0
        self._reloaded: set[str] = set()
        self._fresh = False            # a worker cannot run the next task (it started RPC)
        self._lock = threading.RLock()
        self.start()
        _LIVE.add(self)

    # -- life cycle
    def start(self) -> None:
        """Start the workers and wait until every rank has joined the group (again, after
        ``shutdown()``; a running cluster is refused: ``restart()`` starts fresh workers)."""
        if self.alive:
            raise RuntimeError(f"{self!r} is running already: restart() starts fresh "
                               "workers, shutdown() stops these")
        self._kill()                   # workers that died, if any: start afresh
        if self.port is not None:
            check_port(self.addr, self.port)
        self._tmpdir = tempfile.mkdtemp(prefix="ddl_lab_")
        init = (f"tcp://{self.addr}:{self.port}" if self.port is not None
                else "file://" + os.path.join(self._tmpdir, "store"))
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
               "WORLD_SIZE": str(self.world_size), "LOCAL_WORLD_SIZE": str(self.world_size)}
        cfg = dict(world_size=self.world_size, backend=self.backend, init=init, env=env,
                   group_timeout=self.timeout or _NO_LIMIT_S, num_threads=self.num_threads)
        # a worker whose parent dies removes the store, which the parent can no longer do
        cleanup = partial(shutil.rmtree, self._tmpdir, ignore_errors=True)
        for rank in range(self.world_size):
            ctl, their_ctl = CONTEXT.Pipe(duplex=True)
            p = Child.start(worker_main, (rank, their_ctl, cfg), name=f"ddl_lab-rank{rank}",
                            at_parent_exit=cleanup)
            their_ctl.close()
            self._procs.append(p)
            self._conns.append(p.conn)
            self._ctls.append(ctl)
        try:
            self._collect("ready", (self.timeout or 60.0) + 60.0)
        except BaseException:
            self._kill()
            raise

    def shutdown(self) -> None:
        """Stop every worker; nothing survives this call."""
        with self._lock:
            for c in self._conns:
                try:
                    c.send(None)
                except OSError:
                    pass
            join_all(self._procs, 2.0)
            self._kill()

    def restart(self) -> None:
        """Kill the workers and start fresh ones."""
        with self._lock:
            self._kill()
            self.start()

    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.alive for p in self._procs)

    def _store_lost(self) -> bool:
        """The file store the workers rendezvous on is gone (a temporary folder removed
        under a warm cluster, e.g. the grading judge's run folder): no new group could be
        made on them, so the next run starts fresh workers."""
        return self.port is None and self._tmpdir is not None and \
            not os.path.exists(os.path.join(self._tmpdir, "store"))

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __del__(self) -> None:
        try:
            self._kill()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "running" if self.alive else "stopped"
        return f"Cluster(world_size={self.world_size}, backend={self.backend!r}, {state})"

    def _kill(self) -> None:
        stop_all(self._procs, 1.0)
        for c in self._ctls:
            c.close()
        self._procs, self._conns, self._ctls = [], [], []
        self._fresh = False
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    # -- running
    def run(self, fn: Callable, *args: Any, **kwargs: Any) -> list:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results in rank order.

        Every argument goes to ``fn``; runtime options go to ``run_with``.
        """
        return self.run_with(fn, args, kwargs)

    def run_with(self, fn: Callable, args: tuple = (), kwargs: dict | None = None,
                 timeout: float | None = CLUSTER_TIMEOUT) -> list:
        """``run`` with runtime options: ``timeout`` in seconds for this call (default: the
        cluster's), or ``None`` for no limit."""
        if timeout is not CLUSTER_TIMEOUT:
            _check_timeout(timeout)
        limit = self.timeout if timeout is CLUSTER_TIMEOUT else timeout
        payloads, sources = pickle_task(fn, tuple(args), dict(kwargs or {}), self.world_size)
        with self._lock:
            if not self.alive or self._fresh or self._store_lost():
                self.restart()
            self._task += 1
            self._reloaded = set()
            for c, payload in zip(self._conns, payloads):
                c.send(("run", self._task, payload, sources))
            try:
                return self._collect("result", limit)
            except WorkerError as e:
                if e.restarted:
                    self._kill()             # fresh workers start with the next run
                raise
            except KeyboardInterrupt:        # an interrupted cell: stop the workers now;
                self._kill()                 # the next run starts fresh ones
                raise RunInterrupted() from None
            except BaseException:
                self._kill()
                raise

    def _collect(self, what: str, timeout: float | None) -> list:
        n = self.world_size
        results: list[Any] = [None] * n
        answered: set[int] = set()
        failures: dict[int, Failure] = {}
        start = time.monotonic()
        started: set[int] = set() if what == "result" else set(range(n))
        # a run's limit counts from the moment every rank began the function: unpickling it
        # and importing what it needs (slow on a busy laptop) gets _LOAD_S more
        limit = timeout if timeout is not None else float("inf")
        counting = len(started) == n
        deadline = start + limit + (0.0 if counting else _LOAD_S)
        by_obj = {}
        for r, (c, p) in enumerate(zip(self._conns, self._procs)):
            by_obj[c] = ("conn", r)
            by_obj[p.sentinel] = ("dead", r)
        while len(answered) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for obj in wait(list(by_obj), timeout=min(left, 0.2)):
                kind, r = by_obj[obj]
                if r in answered:
                    continue
                if kind == "dead":
                    if self._drain(r, what, results, failures, started):   # a last message?
                        answered.add(r)
                        continue
                    self._procs[r].join(1.0)
                    code = self._procs[r].exitcode
                    how = exit_text(code)
                    failures[r] = Failure("died", f"rank {r} died ({how})", f"died ({how})",
                                          death_hint(code))
                    answered.add(r)
                elif self._drain(r, what, results, failures, started):
                    answered.add(r)
            if not counting and len(started) == n:
                counting = True
                deadline = min(deadline, time.monotonic() + limit)
            if failures and deadline - time.monotonic() > _ERROR_GRACE_S:
                deadline = time.monotonic() + _ERROR_GRACE_S
        missing = [r for r in range(n) if r not in answered]
        if not failures and not missing:
            return results
        waited = time.monotonic() - start
        where = self._where(missing)
        stopped = bool(missing) or any(f.kind == "died" for f in failures.values())
        doing = "starting" if what == "ready" else "running"
        raise run_error(n, doing, failures, missing, waited, where, stopped)

    def _drain(self, r: int, what: str, results: list, failures: dict,
               started: set[int]) -> bool:
        """Read rank r's messages; True once its answer to this task has arrived."""
        c = self._conns[r]
        try:
            while c.poll():
                msg = c.recv()
                tag = msg[0]
                if tag == "out":
                    self._echo(r, msg[1], msg[2])
                elif tag == "progress":
                    for sink in SINKS:
                        sink(r, msg[1], msg[2])
                elif tag == "reloaded" and msg[1] == self._task:
                    self._say_reloaded(msg[2])
                elif tag == "fresh":
                    self._fresh = True
                elif tag == "started" and msg[1] == self._task:
                    started.add(r)
                elif tag == "ready" and what == "ready":
                    return True
                elif tag == "ok" and what == "result" and msg[1] == self._task:
                    results[r] = loads(msg[2])
                    return True
                elif tag == "err":
                    failures[r] = Failure("raised", *msg[2:])
                    return True
        except (EOFError, OSError):
            return False
        return False

    def _where(self, ranks: list[int]) -> dict[int, Where]:
        """Ask the ranks' watcher threads where their main thread is (at most _WHERE_S)."""
        asked: dict[Connection, int] = {}
        for r in ranks:
            try:
                self._ctls[r].send("where")
                asked[self._ctls[r]] = r
            except (OSError, ValueError):
                pass
        found: dict[int, Where] = {}
        deadline = time.monotonic() + _WHERE_S
        while asked and (left := deadline - time.monotonic()) > 0:
            for c in wait(list(asked), timeout=left):
                r = asked.pop(c)
                try:
                    found[r] = Where(*c.recv())
                except (EOFError, OSError):
                    pass
        return found

    def _echo(self, r: int, stream: str, line: str) -> None:
        if self.echo:
            out = sys.stderr if stream == "err" else sys.stdout
            out.write(f"[rank {r}] {line}\n")
            out.flush()

    def _say_reloaded(self, names: list[str]) -> None:
        new = [n for n in names if n not in self._reloaded]
        if new:
            self._reloaded.update(new)
            print(f"ddl_lab: the workers reloaded {', '.join(new)} (changed on disk since "
                  "they imported it)", flush=True)


def _check_timeout(timeout: float | None) -> None:
    if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, or None for no "
                         f"limit; got {timeout!r}")


@atexit.register
def _shutdown_all() -> None:
    for c in list(_LIVE):
        c._kill()
