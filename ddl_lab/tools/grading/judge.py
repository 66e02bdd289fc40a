"""The judge: where each task's verdict is reached, outside the learner's sandbox
(``ddl-lab grade``).

The learner's notebook runs in its kernel in the sandbox (``execute.py``, ``sandbox.py``);
each pristine check cell keeps its arguments there and writes a manifest (``handover.py``).
The judge is a fresh process (``python -P -s -c "…serve()"``: an empty folder of its own,
kept off ``sys.path``, no user site-packages) holding the checks, their references and the
verdicts; no learner code ever runs in it and no learner object is unpickled in it. One
task at a time, as the grader asks over its stdin, it:

1. reads the task's manifest (JSON): the learner's functions become ``link.Remote``s, the
   other arguments plain data (``plain.py``);
2. runs the pristine check on them with the judge's own recorder and under the instructor's
   seed if there is one (``_record.grade_with``): each call of a learner's function, and
   each run of a check's body on workers with one, goes to the sandboxed kernel over the
   link and comes back as plain data, which the check judges against its own references;
3. answers on its stdout, quoting the grader's nonce for this task, with the ``figures`` of
   a measured run the check recorded (lesson 15's leaderboard).

A task passes only if the check returned and its last recorded verdict is a pass for that
task. A kernel that ends or goes silent while a check waits for it ends the task (and the
tasks after it) with "ended"; a judge that ends or goes silent without an answer is a 0.
"""
from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .execute import TOKEN_ENV, end_run

STARTUP = 120.0         # seconds a judge may take to import torch and the checks
ENTRY = "from ddl_lab.tools.grading.judge import serve; serve()"
_LIVE: set["Judge"] = set()


def entry(checks: tuple[str, ...] = ()) -> str:
    """The judge's program: ``serve()``, after importing ``checks``, modules of checks
    beyond ``ddl_lab.check`` (a course's own, which register themselves there)."""
    bad = [m for m in checks if not all(part.isidentifier() for part in m.split("."))]
    if bad:
        raise ValueError(f"not a module name: {bad}")
    return "".join(f"import {m}; " for m in checks) + ENTRY


def stop_judges() -> None:
    """End every judge still going (the instructor pressed Ctrl-C)."""
    for judge in list(_LIVE):
        judge.stop()


# ---------------------------------------------------------------- the grader's side

class Judge:
    """A judge process, for as many submissions as it is asked about in turn: each task
    names the kernel to talk to (``link``, a Unix socket in the run's folder ``work``, with
    ``key``). No learner code runs in it, so one judge serves a whole class."""

    def __init__(self, seed: int | None, log: Path, checks: tuple[str, ...] = ()):
        self.seed, self.log, self.proc, self.token, self.home = seed, log, None, "", None
        self.entry, self.checks = entry(checks), checks
        self.ready, self.buffer, self.closed = False, b"", False

    def start(self) -> None:
        """Start a fresh judge (it imports torch and the checks while the grader goes on)."""
        self.token = secrets.token_hex(8)
        self.home = Path(tempfile.mkdtemp(prefix="ddl-lab-judge-"))
        env = {**os.environ, TOKEN_ENV: self.token, "MPLBACKEND": "Agg",
               "DDL_LAB_PROGRESS": "off", "PYTHONDONTWRITEBYTECODE": "1",
               "TMPDIR": str(self.home)}   # its own temporary files, removed with it
        with open(self.log, "ab") as log:     # -P: its folder is not on sys.path; -s: no
            self.proc = subprocess.Popen(     # user site-packages
                [sys.executable, "-P", "-s", "-c", self.entry],
                cwd=self.home, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, start_new_session=True)
        _LIVE.add(self)
        self.ready, self.buffer, self.closed = False, b"", False
        self._send({"seed": self.seed, "checks": list(self.checks)})

    def _wait_ready(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            self.start()
        if not self.ready:
            hello = self._line(STARTUP)
            if not hello or hello.get("ready") is not True:
                self.stop()
                raise RuntimeError(f"the judge did not start: {tail(self.log)}")
            self.ready = True

    def _send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def _line(self, timeout: float) -> dict | None:
        """The judge's next line, or None if it ended, went silent or said nonsense."""
        deadline = time.monotonic() + timeout
        out = self.proc.stdout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return None
            chunk = os.read(out.fileno(), 1 << 16)
            if not chunk:
                self.closed = True
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            said = json.loads(line)
        except ValueError:
            return {"nonce": None}
        return said if isinstance(said, dict) else {"nonce": None}

    def verdict(self, manifest: Path, index: int, task: str, timeout: float,
                kernel: dict) -> dict:
        """``{"outcome": passed|failed|ended, "message"}`` of one task; ``kernel``: the
        link, key and folder of the run whose kernel serves the learner's functions."""
        self._wait_ready()
        nonce = secrets.token_hex(16)
        try:
            self._send({"manifest": str(manifest), "index": index, "task": task,
                        "nonce": nonce, "timeout": timeout, **kernel})
        except OSError:
            answer = None
        else:
            answer = self._line(timeout + 30)
            while answer is not None and answer.get("nonce") != nonce:
                answer = self._line(timeout + 30)
        if answer is None:
            ended = self._exit_status()
            self.stop()
            if ended is None:
                why = (f"the check of {task} ran past the per-cell limit of {timeout:g} s "
                       "in the judge and was stopped: does your code loop forever or wait "
                       "for a message that never comes?")
            else:
                why = f"the judge ended (exit status {ended}) while checking {task}"
            return {"outcome": "ended", "message": why}
        return answer

    def _exit_status(self) -> int | None:
        """The judge's exit status if it ended (its answer channel closed), else None."""
        if not self.closed and self.proc.poll() is None:
            return None
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:       # the channel closed, the process lingers
            return -1

    def judge_all(self, todo: list[tuple[Path, int, str]], timeout: float, *, link: str,
                  key: str, work: Path) -> dict[str, dict]:
        """The answer for every ``(manifest, index, task)`` of one run, in order; then the
        judge lets go of that run's kernel (which then ends its run)."""
        kernel = {"link": link, "key": key, "work": str(work)}
        answers = {task: self.verdict(manifest, index, task, timeout, kernel)
                   for manifest, index, task in todo}
        if self.proc is not None and self.proc.poll() is None:
            try:
                self._send({"done": link})
                self._line(30.0)
            except OSError:
                pass
        return answers

    def stop(self) -> None:
        _LIVE.discard(self)
        if self.proc is not None:
            end_run(self.proc, None, self.token)
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self.proc = None
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None


def tail(path: Path, size: int = 600) -> str:
    try:
        return path.read_bytes()[-size:].decode(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------- the judge process

MANIFEST_BYTES = 64 << 20       # a manifest larger than this is not read


def _arguments(manifest: str, index: int, link: Any) -> tuple[list, dict]:
    """The check's arguments from the learner's manifest: functions as Remotes, the rest
    plain data (a forged manifest can only name other functions or other values)."""
    from .link import Remote
    from .plain import NotPlain, decode
    path = Path(manifest)
    if path.stat().st_size > MANIFEST_BYTES:
        raise NotPlain("the manifest is too large")
    call = json.loads(path.read_text())[index]

    def one(given: Any) -> Any:
        if isinstance(given, dict) and "ref" in given:
            return Remote(link, str(given["ref"]), str(given.get("name", "your function")),
                          given.get("reaches") or [])
        if isinstance(given, dict) and "plain" in given:
            return decode(given["plain"])
        raise NotPlain("an argument of no known form")
    return [one(a) for a in call["args"]], {str(k): one(v) for k, v in
                                            dict(call.get("kwargs") or {}).items()}


def serve() -> None:
    """The judge's loop: stdin requests in, one JSON answer per request on stdout."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                            # prints of the checks go to the log
    hello = json.loads(sys.stdin.readline())
    seed = hello.get("seed")
    import torch

    import ddl_lab.check as check
    from ddl_lab.check import _core, _record
    from .link import Link, LinkLost, by_value, remote_in, run_beside, run_remote
    torch.set_num_threads(1)     # one thread, as the workers: judges run beside kernels (--jobs)
    by_value(*hello.get("checks", []))
    links: dict[str, Link] = {}

    def route(body: Any, cases: Any, fn: Any, timeout: Any) -> Any:
        there = remote_in(fn, cases)
        return None if there is None else run_remote(there, body, cases, fn, timeout, None)

    def beside(procedure: Any, args: tuple, kwargs: dict) -> tuple[bool, Any]:
        there = remote_in(None, [(0, (*args, *kwargs.values()))])
        return (False, None) if there is None else \
            (True, run_beside(there, procedure, args, kwargs))
    _core.route, _core.beside = route, beside
    entries: list[dict] = []
    _record.grade_with(entries.append, seed)
    checks = {name: getattr(check, name) for name in check.__all__}
    _keep_for_the_class()
    failure, text = _core.CheckFailed, BaseException.__str__
    channel.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("bye"):
            break
        if "done" in request:               # the grader is through with this run's kernel
            gone = links.pop(request["done"], None)
            if gone is not None:
                gone.bye()
            channel.write(json.dumps({"done": True}) + "\n")
            continue
        task, nonce = request["task"], request["nonce"]
        link = links.get(request["link"])
        if link is None:
            link = links[request["link"]] = Link(request["link"], request["key"],
                                                 float(request["timeout"]))
        _in_folder(Path(request["work"]))
        link.refuses = _refused(_core.TASKS.get(task))
        entries.clear()
        outcome, message = "failed", ""
        try:
            args, kwargs = _arguments(request["manifest"], request["index"], link)
        except Exception as e:              # noqa: BLE001 — the learner's manifest
            args, kwargs = None, {}
            message = f"what your notebook handed to check.{task} could not be read ({e})"
        if args is not None:
            try:
                checks[task](*args, **kwargs)
                outcome = "returned"
            except LinkLost as e:
                outcome, message = "ended", f"while checking {task}: {e}"
            except failure as e:
                message = text(e)
            except Exception as e:          # noqa: BLE001 — the check itself stopped
                message = f"the check of {task} stopped with {type(e).__name__}: {text(e)}"
        last = entries[-1] if entries else {}
        if outcome == "returned" and last.get("passed") is True and last.get("task") == task:
            outcome, message = "passed", str(last.get("message", ""))
        elif outcome != "ended":
            outcome = "failed"
            message = message or str(last.get("message", "")) or \
                f"the check of {task} returned without a verdict"
        if seed is not None and outcome == "failed" and "seed=" in message:
            message += (f"\n(graded on the instructor's cases, seed {seed}: `seed=` above "
                        "replays them only under `ddl-lab grade --seed`)")
        score = max((float(e.get("score") or 0) for e in entries
                     if e.get("task") == task and not e.get("passed")), default=0.0)
        channel.write(json.dumps({"nonce": nonce, "outcome": outcome, "message": message,
                                  "score": score, "figures": _figures(entries, task)},
                                 default=_plain_number) + "\n")
    channel.close()
    os._exit(0)


def _figures(entries: list[dict], task: str) -> dict | None:
    """The figures of the last record of ``task`` that has any (a measured run, lesson 15's
    leaderboard), else None."""
    return next((e["figures"] for e in reversed(entries) if e.get("task") == task
                 and isinstance(e.get("figures"), dict)), None)


def _plain_number(x: Any) -> Any:
    """A numpy or torch number (or array) among the figures as JSON takes it; else its text."""
    return x.tolist() if callable(getattr(x, "tolist", None)) else str(x)


def _refused(spec: Any) -> list[tuple[str, str]]:
    """(module, name) of the package's own implementations a task refuses."""
    if spec is None or not spec.refuses:
        return []
    from ddl_lab.check._diagnose import package_functions
    from ddl_lab.runtime.reach import ident
    return [i for f in package_functions(spec.refuses[0], *spec.refuses[1:])
            if (i := ident(f)) is not None]


def _keep_for_the_class() -> None:
    """What the judge keeps from one run to the next lies in its own folder (its TMPDIR,
    removed with it), never in a run's (``_in_folder``), which the grader removes as the run
    ends: the folder of the socket of the forkserver that the workers of the checks' own runs
    start from, made now. (A warm cluster made during a run keeps its store in the run's
    folder; ``Cluster`` starts fresh workers when that is gone.)"""
    from multiprocess import util
    util.get_temp_dir()


def _in_folder(work: Path) -> None:
    """The checks' temporary and shared files go where the run's sandbox sees them."""
    for sub in ("tmp", "shm"):
        (work / sub).mkdir(exist_ok=True)
    tempfile.tempdir = str(work / "tmp")
    os.environ["TMPDIR"] = str(work / "tmp")
    os.environ["DDL_LAB_SHARED_DIR"] = str(work / "shm")
