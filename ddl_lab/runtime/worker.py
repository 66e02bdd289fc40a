"""Inside a worker process (lesson 00): join the group, run tasks, answer "where are you?".

Each worker is a process (``process.Child``) with ``torch.distributed`` initialised, one torch
thread by default, stdout/stderr sent to the notebook line by line, and the
environment ``torchrun`` would give it (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``, ...), so ``torch.distributed.rpc.init_rpc`` works as written.
"""
from __future__ import annotations

import linecache
import os
import sys
import threading
import traceback

from multiprocess.connection import Connection

from .backends import group_backend
from .errors import call_hint, caused_by, memory_hint
from .pickling import dumps, install_in_main, loads
from .progress import WORKER
from .reload import ModuleWatch
from .stacks import main_thread_where


class LineWriter:
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


def worker_main(conn: Connection, rank: int, ctl: Connection, cfg: dict) -> None:
    """A worker's life (a ``process.Child``): join the group, then run tasks until told
    to stop."""
    os.environ.update(cfg["env"], RANK=str(rank), LOCAL_RANK=str(rank))
    threading.Thread(target=_answer_where, args=(ctl,), daemon=True).start()
    lock = threading.Lock()
    WORKER.update(conn=conn, lock=lock, last=0.0)
    sys.stdout = LineWriter(conn, "out", lock)
    sys.stderr = LineWriter(conn, "err", lock)
    try:
        _init_group(rank, cfg)
        with lock:
            conn.send(("ready", rank))
    except BaseException as e:
        with lock:
            conn.send(("err", 0, traceback.format_exc(), f"failed to start: {e!r}"))
        return
    modules = ModuleWatch()
    modules.record()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if msg is None:
            break
        reply = _run_task(*msg[1:], modules)
        sys.stdout.flush()
        sys.stderr.flush()
        with lock:
            if _rpc_started():
                conn.send(("fresh", msg[1]))      # the next run needs new workers
            conn.send(reply)
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()


def _answer_where(ctl: Connection) -> None:
    """Answer the parent's "where" with the main thread's position, until the parent
    closes the pipe (or dies: then the child's own watch ends the process)."""
    while True:
        try:
            if ctl.recv() == "where":
                ctl.send(tuple(main_thread_where()))
        except (EOFError, OSError):
            return


def _rpc_started() -> bool:
    """Has torch.distributed.rpc been started in this process? It cannot start twice
    (pytorch/pytorch#46491), so such a worker is replaced before the next run."""
    api = sys.modules.get("torch.distributed.rpc.api")
    return bool(getattr(api, "_ALL_WORKER_NAMES", None))


def _init_group(rank: int, cfg: dict) -> None:
    from datetime import timedelta
    import torch
    import torch.distributed as dist
    torch.set_num_threads(cfg["num_threads"])
    lo = "lo0" if sys.platform == "darwin" else "lo"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
    os.environ.setdefault("TP_SOCKET_IFNAME", lo)       # torch.distributed.rpc
    if cfg["backend"] == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(group_backend(cfg["backend"]), init_method=cfg["init"], rank=rank,
                            world_size=cfg["world_size"],
                            timeout=timedelta(seconds=cfg["group_timeout"]))


def _run_task(task: int, payload: bytes, sources: dict, modules: ModuleWatch) -> tuple:
    fn = kwargs = None
    try:
        reloaded = modules.reload_changed()
        if reloaded:
            with WORKER["lock"]:
                WORKER["conn"].send(("reloaded", task, reloaded))
        linecache.cache.update(sources)
        fn, args, kwargs = loads(payload)
        modules.record()
        install_in_main(fn, args, kwargs)
        with WORKER["lock"]:
            WORKER["conn"].send(("started", task))   # the run's timeout counts from here
        result = fn(*args, **kwargs)
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ else None   # hide this frame
        text = "".join(traceback.format_exception(type(e), e, tb))
        hint = memory_hint(e)
        if fn is not None and isinstance(e, TypeError) and tb is None:   # fn's own signature
            hint = call_hint(fn, kwargs, e)
        return ("err", task, text, f"raised {type(e).__name__}: {e}", hint, type(e).__name__,
                caused_by(e, NotImplementedError))
    finally:
        modules.record()
    try:
        return ("ok", task, dumps(result))
    except Exception as e:
        return ("err", task, traceback.format_exc(),
                f"returned a {type(result).__name__} that cannot be sent back ({e})")


