"""Starting ``torchrun`` from Python: the command, a bounded run, restart-safe (lesson 11).

``torchrun_command`` builds the command a learner would type; ``run_jobs`` starts one or
more of them (each optionally inside a network namespace), waits with a deadline, and
returns what each printed. Every run is restart-safe: the agent gets
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``. Without it, torch 2.x's agent hands its
rendezvous store to the workers, a restarted gloo job reads the *first* attempt's
addresses from it and fails ("Gloo connectFullMesh failed … Connection refused") or hangs;
with it, every attempt gets a fresh store for its own rendezvous round.
"""
from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..runtime.patience import patience

__all__ = ["RESTART_SAFE", "torchrun_command", "Job", "run_jobs", "descendants"]

RESTART_SAFE = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
_RESULT = re.compile(r"^rank (\d+): (.*)$", re.M)
_ERROR = re.compile(r"^(\[rank\d+\]: )?[\w.]*(Error|Exception|Interrupt)\b")


def torchrun_command(target: str, *args: Any, nnodes: int | str = 1, nproc: int = 2,
                     endpoint: str | None = None, run_id: str = "ddl-lab",
                     is_host: bool = False, local_addr: str | None = None,
                     max_restarts: int = 0, rdzv_conf: dict[str, Any] | None = None,
                     extra: Sequence[str] = ()) -> list[str]:
    """The ``torchrun … -m ddl_lab.torchrun module:function args`` command (lesson 11).

    ``endpoint`` (host:port of the c10d rendezvous store) None means ``--standalone`` (one
    machine, a private store). On several hosts each says whether it holds the store
    (``is_host``: torchrun would otherwise guess from the endpoint's address, and on
    127.0.0.2 every agent guesses yes — whichever binds first holds it) and its own
    ``local_addr`` (else its workers are told MASTER_ADDR=localhost). ``rdzv_conf`` adds
    rendezvous settings, e.g. ``last_call_timeout`` (seconds to wait for more nodes once
    ``--nnodes=min:max`` has its minimum).
    """
    cmd = ["torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}"]
    if endpoint is None:
        cmd.append("--standalone")
    else:
        cmd += ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}"]
        conf = {"is_host": int(is_host), **(rdzv_conf or {})}
        cmd.append("--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in conf.items()))
    if local_addr:
        cmd.append(f"--local-addr={local_addr}")
    if max_restarts:
        cmd += [f"--max-restarts={max_restarts}", "--monitor-interval=0.2"]
    return cmd + list(extra) + ["-m", "ddl_lab.torchrun", target] + [str(a) for a in args]


@dataclass
class Job:
    """One finished torchrun: its command, exit code, output and wall time."""

    command: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    env: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def results(self) -> dict[int, Any]:
        """What each rank returned, as rank 0 printed it (``ddl_lab.torchrun``)."""
        out = {}
        for rank, text in _RESULT.findall(self.stdout):
            try:
                out[int(rank)] = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                out[int(rank)] = text
        return out

    def shell(self) -> str:
        """The command as one would type it (environment included)."""
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return (env + " " if env else "") + shlex.join(self.command)

    def tail(self, lines: int = 12) -> str:
        """What went wrong: the last exception a worker printed (the one that ended the job),
        then the last lines of stderr with torchrun's noise left out."""
        keep = [ln for ln in self.stderr.splitlines()
                if ln.strip() and "hostname of the client socket" not in ln
                and "OMP_NUM_THREADS" not in ln and not ln.rstrip().endswith("*****")]
        last = next((ln for ln in reversed(keep) if _ERROR.match(ln)), None)
        return "\n".join(([last, "…"] if last else []) + keep[-lines:])

    def raise_for_failure(self) -> "Job":
        if not self.ok:
            why = "timed out" if self.timed_out else f"exited with {self.returncode}"
            raise RuntimeError(f"`{self.shell()}` {why} after {self.seconds:.1f} s:\n"
                               f"{self.tail()}")
        return self


def _executable(cmd: list[str]) -> list[str]:
    """``torchrun …`` → this interpreter's ``python -m torch.distributed.run …``."""
    return [sys.executable, "-m", "torch.distributed.run"] + cmd[1:] if cmd[0] == "torchrun" \
        else cmd


def descendants(pid: int) -> list[int]:
    """Every process started, directly or not, by ``pid`` (Linux /proc; else [])."""
    found, todo = [], [pid]
    for _ in range(10_000):                      # bounded: a process tree is finite
        if not todo:
            break
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(k) for k in task.read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the agent (it stops its workers), then SIGKILL it and anything it left."""
    tree = descendants(proc.pid)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run_jobs(commands: Sequence[list[str]], timeout: float = 60.0,
             prefixes: Sequence[list[str]] | None = None,
             envs: Sequence[dict[str, str]] | None = None,
             cwd: str | os.PathLike | None = None) -> list[Job]:
    """Start every command at once, wait for all (at most ``timeout`` seconds), return Jobs.

    ``prefixes[i]`` is put before command i (e.g. ``ip netns exec <name>``); ``envs[i]`` is
    added to its environment, on top of ``RESTART_SAFE``. A command still running at the
    deadline (``timeout`` times ``DDL_LAB_PATIENCE``) is stopped (with its workers) and
    reported as timed out.
    """
    n = len(commands)
    prefixes = prefixes or [[] for _ in range(n)]
    envs = envs or [{} for _ in range(n)]
    procs, files, started = [], [], time.perf_counter()
    root = str(Path(__file__).resolve().parents[2])
    base = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    try:
        for cmd, prefix, env in zip(commands, prefixes, envs):
            out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            files.append((out, err))
            procs.append(subprocess.Popen(list(prefix) + _executable(cmd), stdout=out,
                                          stderr=err, stdin=subprocess.DEVNULL, cwd=cwd,
                                          env={**base, **RESTART_SAFE, **env},
                                          start_new_session=True))
        limit = timeout * patience()
        deadline = started + limit
        ended: list[float | None] = [None] * n
        while time.perf_counter() < deadline and None in ended:       # bounded by timeout
            for i, p in enumerate(procs):
                if ended[i] is None and p.poll() is not None:
                    ended[i] = time.perf_counter() - started
            time.sleep(0.05)
        jobs = []
        for i, (cmd, p, (out, err)) in enumerate(zip(commands, procs, files)):
            late = ended[i] is None
            if late:
                _stop(p)
            out.seek(0)
            err.seek(0)
            jobs.append(Job(list(cmd), p.returncode, out.read(), err.read(),
                            ended[i] if not late else limit, late,
                            {**RESTART_SAFE, **envs[i]}))
        return jobs
    finally:
        for p in procs:
            if p.poll() is None:
                _stop(p)
        for out, err in files:
            out.close()
            err.close()
