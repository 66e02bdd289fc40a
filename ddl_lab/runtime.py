"""The notebook-safe worker runtime (lesson 00; every later lesson runs on it).

``Cluster`` starts ``world_size`` real worker processes (``multiprocess``,
spawn) with the default ``torch.distributed`` process group initialised, and
runs a function on every rank::

    with Cluster(world_size=4) as cluster:
        results = cluster.run(fn, *args, **kwargs)   # rank order

The function may be written in a notebook cell: it is pickled with dill
(``recurse=True``), so the cell's imports and helpers travel with it.
"""
from __future__ import annotations

import atexit
import importlib
import io
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
import types
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import dill
import multiprocess as mp
from multiprocess.connection import Connection, wait

__all__ = ["Cluster", "WorkerError", "WorkerTimeout", "RunInterrupted", "launch",
           "shared_cluster",
           "available_backends", "device", "progress", "on_progress"]

_CTX = mp.get_context("spawn")
_ERROR_GRACE_S = 3.0          # after one rank fails, how long the others get to answer
_LIVE: "weakref.WeakSet[Cluster]" = weakref.WeakSet()
_PROGRESS_SINKS: list[Callable[[int, int, int], None]] = []   # parent side: (rank, done, total)
_PROGRESS_EVERY_S = 0.1                                       # worker side: at most 10 reports/s


class WorkerError(RuntimeError):
    """One or more ranks raised, died or did not answer; the message names them."""

    def __init__(self, message: str, failures: dict[int, str], restarted: bool = True):
        super().__init__(message)
        self.failures = failures
        self.restarted = restarted


class WorkerTimeout(WorkerError):
    """Some ranks did not answer within the timeout (a deadlock, most often)."""


class RunInterrupted(KeyboardInterrupt):
    """A run was interrupted (Ctrl-C, Jupyter's stop button); its workers were stopped."""

    def __str__(self) -> str:
        return "run interrupted: the workers were stopped; the next run starts fresh ones"

    def _render_traceback_(self) -> list[str]:      # IPython: one line, not the internals
        return [f"\x1b[31mRunInterrupted\x1b[0m: {self}"]


@dataclass
class _Failure:
    kind: str          # "raised", "died" or "timeout"
    text: str          # exception with remote traceback, or exit code
    summary: str       # one line


# --------------------------------------------------------------------- parent

def available_backends() -> dict[str, bool]:
    """Which torch.distributed backends this machine offers (lesson 00)."""
    import torch
    import torch.distributed as dist
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"gloo": dist.is_gloo_available(),
            "nccl": dist.is_nccl_available() and gpus > 0}


def _choose_backend(backend: str, world_size: int) -> str:
    import torch
    avail = available_backends()
    if backend == "auto":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return "nccl" if avail["nccl"] and gpus >= world_size else "gloo"
    if backend not in avail:
        raise ValueError(f"unknown backend {backend!r}: use 'auto', 'gloo' or 'nccl'")
    if not avail[backend]:
        why = ("no CUDA GPU is visible (torch.cuda.is_available() is False)"
               if backend == "nccl" else "this torch build has no gloo")
        ok = [b for b, a in avail.items() if a]
        raise ValueError(f"backend {backend!r} is not available here: {why}. "
                         f"Available: {ok}; use backend='auto' to pick one.")
    gpus = torch.cuda.device_count()
    if backend == "nccl" and gpus < world_size:
        raise ValueError(f"nccl needs one GPU per rank: {world_size} ranks but {gpus} GPU(s). "
                         f"Use world_size <= {gpus}, or backend='gloo' (or 'auto').")
    return backend


def group_backend(backend: str) -> str:
    """The process group's backend string: with nccl, CPU tensors still go through gloo,
    so the same worker code runs with or without GPUs."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


def _check_port(addr: str, port: int) -> None:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, port))
        except OSError as e:
            raise ValueError(f"port {port} on {addr} is in use ({e.strerror}): another "
                             "cluster or torchrun holds it. Pass port=None to let "
                             "ddl_lab pick a free one.") from None


class _Pickler(dill.Pickler):
    """dill, except that every importable module travels by name. (dill copies modules
    outside sys.prefix by value, e.g. an editable ``ddl_lab`` that a cell refers to.)"""
    dispatch = dill.Pickler.dispatch.copy()


def _save_module(pickler: dill.Pickler, module: types.ModuleType) -> None:
    if module.__name__ == "__main__" or module.__name__.startswith("__runtime__"):
        dill._dill.save_module(pickler, module)
    else:
        pickler.save_reduce(importlib.import_module, (module.__name__,), obj=module)


_Pickler.dispatch[types.ModuleType] = _save_module


def dumps(obj: Any) -> bytes:
    """Pickle for the workers: by value for notebook code (recurse), by name for modules."""
    buf = io.BytesIO()
    _Pickler(buf, recurse=True).dump(obj)
    return buf.getvalue()


def _pickle(fn: Callable, args: tuple, kwargs: dict) -> bytes:
    """dill-pickle a task, naming the piece that cannot travel to the workers."""
    if not callable(fn):
        raise TypeError(f"run() needs a function to run on every rank, got {type(fn).__name__}")
    pieces = [("the function " + getattr(fn, "__name__", repr(fn)), fn)]
    pieces += [(f"argument {i} ({type(a).__name__})", a) for i, a in enumerate(args)]
    pieces += [(f"keyword argument {k!r} ({type(v).__name__})", v) for k, v in kwargs.items()]
    try:
        return dumps((fn, args, kwargs))
    except Exception:
        for name, obj in pieces:
            try:
                dumps(obj)
            except Exception as e:
                raise TypeError(f"{name} cannot be sent to the workers: it does not pickle "
                                f"({type(e).__name__}: {e}). Pass something picklable, or "
                                "create it inside the function.") from None
        raise


class Cluster:
    """``world_size`` worker processes with torch.distributed initialised (lesson 00).

    Args:
        world_size: number of ranks (>= 1).
        backend: 'auto' (nccl with one GPU per rank, else gloo), 'gloo' or 'nccl'.
        timeout: seconds a ``run`` may take before the ranks that did not answer are
            reported and the cluster restarted; also the collectives' timeout.
        num_threads: ``torch.set_num_threads`` in each worker.
        echo: forward what workers print, line by line, prefixed with the rank.
        addr, port: rendezvous over TCP at addr:port; by default (port=None) a file
            store private to this cluster is used and no port is opened.
    """

    def __init__(self, world_size: int = 4, backend: str = "auto", timeout: float = 30.0,
                 num_threads: int = 1, echo: bool = True, addr: str = "127.0.0.1",
                 port: int | None = None):
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an integer >= 1, got {world_size!r}")
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads!r}")
        self.world_size = world_size
        self.backend = _choose_backend(backend, world_size)
        self.timeout = float(timeout)
        self.num_threads = num_threads
        self.echo = echo
        self.addr, self.port = addr, port
        self._procs: list = []
        self._conns: list[Connection] = []
        self._tmpdir: str | None = None
        self._task = 0
        self._lock = threading.RLock()
        self.start()
        _LIVE.add(self)

    # -- life cycle
    def start(self) -> None:
        """Start the workers and wait until every rank has joined the group."""
        if self.port is not None:
            _check_port(self.addr, self.port)
        self._tmpdir = tempfile.mkdtemp(prefix="ddl_lab_")
        init = (f"tcp://{self.addr}:{self.port}" if self.port is not None
                else "file://" + os.path.join(self._tmpdir, "store"))
        cfg = dict(world_size=self.world_size, backend=self.backend, init=init,
                   timeout=self.timeout, num_threads=self.num_threads, parent=os.getpid())
        for rank in range(self.world_size):
            mine, theirs = _CTX.Pipe(duplex=True)
            p = _CTX.Process(target=_worker_main, args=(rank, theirs, cfg), daemon=True,
                             name=f"ddl_lab-rank{rank}")
            p.start()
            theirs.close()
            self._procs.append(p)
            self._conns.append(mine)
        try:
            self._collect("ready", self.timeout + 60.0)
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
            deadline = time.monotonic() + 2.0
            for p in self._procs:
                p.join(max(0.0, deadline - time.monotonic()))
            self._kill()

    def restart(self) -> None:
        """Kill the workers and start fresh ones."""
        self._kill()
        self.start()

    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

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
        for p in self._procs:
            if p.is_alive():
                p.terminate()
        for p in self._procs:
            p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join(1.0)
        for c in self._conns:
            c.close()
        self._procs, self._conns = [], []
        if self._tmpdir:
            import shutil
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    # -- running
    def run(self, fn: Callable, *args: Any, **kwargs: Any) -> list:
        """Run ``fn(*args, **kwargs)`` on every rank; return the results in rank order."""
        return self.run_with(fn, args, kwargs)

    def run_with(self, fn: Callable, args: tuple = (), kwargs: dict | None = None,
                 timeout: float | None = None) -> list:
        """``run`` with an explicit per-call timeout (seconds)."""
        payload = _pickle(fn, tuple(args), dict(kwargs or {}))
        with self._lock:
            if not self.alive:
                self.restart()
            self._task += 1
            for c in self._conns:
                c.send(("run", self._task, payload))
            try:
                return self._collect("result", timeout or self.timeout)
            except WorkerError as e:
                if e.restarted:
                    self.restart_quietly()
                raise
            except KeyboardInterrupt:        # an interrupted cell: stop the workers now;
                self._kill()                 # the next run starts fresh ones
                raise RunInterrupted() from None
            except BaseException:
                self._kill()
                raise

    def restart_quietly(self) -> None:
        """Restart after a failed or interrupted run; never raises over the first error."""
        try:
            self.restart()
        except BaseException:
            self._kill()

    def _collect(self, what: str, timeout: float) -> list:
        n = self.world_size
        results: list[Any] = [None] * n
        answered: set[int] = set()
        failures: dict[int, _Failure] = {}
        start = time.monotonic()
        deadline = start + timeout
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
                    if self._drain(r, what, results, failures):   # a last message may be queued
                        answered.add(r)
                        continue
                    self._procs[r].join(1.0)
                    code = self._procs[r].exitcode
                    how = f"exit code {code}{_signal_name(code)}"
                    failures[r] = _Failure("died", f"rank {r} died ({how})", f"died ({how})")
                    answered.add(r)
                elif self._drain(r, what, results, failures):
                    answered.add(r)
            if failures and deadline - time.monotonic() > _ERROR_GRACE_S:
                deadline = time.monotonic() + _ERROR_GRACE_S
        missing = [r for r in range(n) if r not in answered]
        if not failures and not missing:
            return results
        raise self._error(what, failures, missing, time.monotonic() - start)

    def _drain(self, r: int, what: str, results: list, failures: dict) -> bool:
        """Read rank r's messages; True once its answer to this task has arrived."""
        c = self._conns[r]
        try:
            while c.poll():
                msg = c.recv()
                tag = msg[0]
                if tag == "out":
                    self._echo(r, msg[1], msg[2])
                elif tag == "progress":
                    for sink in _PROGRESS_SINKS:
                        sink(r, msg[1], msg[2])
                elif tag == "ready" and what == "ready":
                    return True
                elif tag == "ok" and what == "result" and msg[1] == self._task:
                    results[r] = dill.loads(msg[2])
                    return True
                elif tag == "err":
                    failures[r] = _Failure("raised", msg[2], msg[3])
                    return True
        except (EOFError, OSError):
            return False
        return False

    def _echo(self, r: int, stream: str, line: str) -> None:
        if self.echo:
            out = sys.stderr if stream == "err" else sys.stdout
            out.write(f"[rank {r}] {line}\n")
            out.flush()

    def _error(self, what: str, failures: dict[int, _Failure], missing: list[int],
               waited: float) -> WorkerError:
        doing = "starting" if what == "ready" else "running"
        parts, table = [], {r: f.text for r, f in failures.items()}
        for r in sorted(failures):
            parts.append(f"rank {r} {failures[r].summary}")
        if missing:
            table.update({r: "did not answer" for r in missing})
            parts.append(f"rank(s) {missing} did not answer within {waited:.1f} s")
        head = f"while {doing} on {self.world_size} ranks: " + "; ".join(parts)
        restart = bool(missing) or any(f.kind == "died" for f in failures.values())
        if missing and not failures:
            head += (" (a deadlock? e.g. a recv with no matching send, or a collective "
                     "that not every rank called)")
        if what == "result":
            head += (". The workers were restarted; the cluster is ready for the next run."
                     if restart else ". The cluster is ready for the next run.")
        details = "\n\n".join(f"--- rank {r} ---\n{f.text.rstrip()}"
                              for r, f in sorted(failures.items()) if f.kind == "raised")
        cls = WorkerTimeout if missing and not failures else WorkerError
        return cls(head + ("\n\n" + details if details else ""), table, restart)


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f" ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return ""


# ------------------------------------------------------------------ shared pool

_POOL: dict[tuple, Cluster] = {}
_POOL_SIZE = 2


def shared_cluster(world_size: int, **options: Any) -> Cluster:
    """A cached cluster for widgets and checks: started once, reused (at most two kept)."""
    key = (world_size, tuple(sorted(options.items())))
    c = _POOL.pop(key, None)
    if c is None or not c.alive:
        while len(_POOL) >= _POOL_SIZE:
            _POOL.pop(next(iter(_POOL))).shutdown()
        c = Cluster(world_size, **options)
    _POOL[key] = c        # most recently used last
    return c


def launch(fn: Callable, world_size: int, *args: Any, backend: str = "auto",
           timeout: float = 30.0, **kwargs: Any) -> list:
    """One shot: start ``world_size`` ranks, run ``fn`` on each, shut down (lesson 00)."""
    with Cluster(world_size, backend=backend, timeout=timeout) as cluster:
        return cluster.run(fn, *args, **kwargs)


def device() -> "Any":
    """This rank's device: its own GPU under nccl, else the CPU (any lesson's worker code)."""
    import torch
    import torch.distributed as dist
    if dist.is_initialized() and "nccl" in str(dist.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class on_progress:
    """Parent side: ``with on_progress(fn):`` calls ``fn(rank, done, total)`` whenever a
    worker reports ``progress(done, total)`` during a run (the experiment panel's bar)."""

    def __init__(self, fn: Callable[[int, int, int], None]):
        self.fn = fn

    def __enter__(self) -> "on_progress":
        _PROGRESS_SINKS.append(self.fn)
        return self

    def __exit__(self, *exc: object) -> None:
        _PROGRESS_SINKS.remove(self.fn)


def progress(done: int, total: int) -> None:
    """Worker side: report that ``done`` of ``total`` steps are finished (any lesson).

    Reports are throttled to ten a second (the last step always goes through); outside a
    Cluster worker (under torchrun, say) this does nothing.
    """
    state = _WORKER.get("progress")
    if state is None:
        return
    now = time.monotonic()
    if done < total and now - state["last"] < _PROGRESS_EVERY_S:
        return
    state["last"] = now
    with _WORKER["lock"]:
        _WORKER["conn"].send(("progress", int(done), int(total)))


@atexit.register
def _shutdown_all() -> None:
    for c in list(_LIVE):
        c._kill()


# --------------------------------------------------------------------- worker

_WORKER: dict[str, Any] = {}          # in a worker: its connection, send lock, progress state

class _LineWriter:
    """A worker's stdout/stderr: whole lines go to the parent, never half a line."""

    def __init__(self, conn: Connection, stream: str, lock: threading.Lock):
        self.conn, self.stream, self.lock, self.buf = conn, stream, lock, ""

    def write(self, s: str) -> int:
        self.buf += s
        if "\n" in self.buf:
            *lines, self.buf = self.buf.split("\n")
            with self.lock:
                for line in lines:
                    self.conn.send(("out", self.stream, line))
        return len(s)

    def flush(self) -> None:
        if self.buf:
            with self.lock:
                self.conn.send(("out", self.stream, self.buf))
            self.buf = ""

    def isatty(self) -> bool:
        return False


def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(0.5)


def _worker_main(rank: int, conn: Connection, cfg: dict) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the parent handles Ctrl-C / interrupts
    threading.Thread(target=_watch_parent, args=(cfg["parent"],), daemon=True).start()
    lock = threading.Lock()
    _WORKER.update(conn=conn, lock=lock, progress={"last": 0.0})
    sys.stdout = _LineWriter(conn, "out", lock)
    sys.stderr = _LineWriter(conn, "err", lock)
    try:
        _init_group(rank, cfg)
        with lock:
            conn.send(("ready", rank))
    except BaseException as e:
        with lock:
            conn.send(("err", 0, traceback.format_exc(), f"failed to start: {e!r}"))
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg is None:
            break
        _, task, payload = msg
        reply = _run_task(task, payload)
        sys.stdout.flush()
        sys.stderr.flush()
        with lock:
            conn.send(reply)
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()


def _init_group(rank: int, cfg: dict) -> None:
    from datetime import timedelta
    import torch
    import torch.distributed as dist
    torch.set_num_threads(cfg["num_threads"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo0" if sys.platform == "darwin" else "lo")
    if cfg["backend"] == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(group_backend(cfg["backend"]), init_method=cfg["init"], rank=rank,
                            world_size=cfg["world_size"],
                            timeout=timedelta(seconds=cfg["timeout"]))


def _run_task(task: int, payload: bytes) -> tuple:
    try:
        fn, args, kwargs = dill.loads(payload)
        result = fn(*args, **kwargs)
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ else None   # hide this frame
        text = "".join(traceback.format_exception(type(e), e, tb))
        return ("err", task, text, f"raised {type(e).__name__}: {e}")
    try:
        return ("ok", task, dumps(result))
    except Exception as e:
        return ("err", task, traceback.format_exc(),
                f"returned a {type(result).__name__} that cannot be sent back ({e})")
