"""The judge: where each task's verdict is reached, outside the learner's kernel (``ddl-lab
grade``).

The learner's notebook runs in its kernel (``execute.py``); at each pristine check cell the
kernel only hands the check's arguments over by value (``handover.py``). The judge is a
fresh process (``python -P -s -c "…serve()"``: an empty folder of its own, kept off
``sys.path``, no user site-packages) in which no learner cell has run: it imports ``ddl_lab.check`` fresh, fingerprints the check machinery
(``fingerprint.py``), and then, one task at a time as the grader asks over its stdin:

1. loads the learner's functions (unpickling runs learner code: fingerprinted after);
2. runs the pristine check on them with the judge's own recorder and under the instructor's
   seed if there is one (``_record.grade_with``);
3. fingerprints again — itself, and the workers of every cluster the check used — and
   looks for threads of learner code still running;
4. answers on a channel of its own (a copy of its stdout made before any learner code
   ran; fd 1 then points at the log), quoting the grader's nonce for this task.

A task passes only if the check returned, its last recorded verdict is a pass for that
task, and nothing changed. A change is "tampered: <what changed>"; the judge then exits and
the grader starts a fresh one. A judge that ends or goes silent without an answer is a 0.
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
    beyond ``ddl_lab.check`` (a course's own, which register themselves there), so that the
    judge fingerprints them with the rest."""
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
    """A judge process for one submission; restarted after a tampered task or a death.

    Every answer must carry the nonce of its request, and there must be exactly one per
    request: a second line for a nonce already answered (learner code that found the
    channel and wrote its own answer first) turns that task into "tampered". An answer only
    counts once the same judge has spoken again after it (the next answer, or its reply to
    "bye"): a judge that dies right after answering is asked again alone, and if it dies
    again the task earns nothing."""

    def __init__(self, seed: int | None, log: Path, checks: tuple[str, ...] = ()):
        self.seed, self.log, self.proc, self.token, self.home = seed, log, None, "", None
        self.entry = entry(checks)
        self.ready, self.buffer, self.closed = False, b"", False
        self.asked: dict[str, str] = {}         # nonce -> task, this judge process
        self.twice: set[str] = set()            # tasks answered more than once

    def start(self) -> None:
        """Start a fresh judge (it imports torch and the checks while the grader goes on)."""
        self.token = secrets.token_hex(8)
        self.home = Path(tempfile.mkdtemp(prefix="ddl-lab-judge-"))
        env = {**os.environ, TOKEN_ENV: self.token, "MPLBACKEND": "Agg",
               "DDL_LAB_PROGRESS": "off", "PYTHONDONTWRITEBYTECODE": "1"}
        env.pop("DDL_LAB_GRADE_RECORD", None)
        with open(self.log, "ab") as log:     # -P: its folder is not on sys.path; -s: no
            self.proc = subprocess.Popen(     # user site-packages
                [sys.executable, "-P", "-s", "-c", self.entry],
                cwd=self.home, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, start_new_session=True)
        _LIVE.add(self)
        self.ready, self.buffer, self.asked, self.closed = False, b"", {}, False
        self._send({"seed": self.seed})

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

    def _reply(self, nonce: str, timeout: float) -> dict | None:
        """The line answering ``nonce``; lines answering earlier nonces mark their tasks."""
        while True:
            said = self._line(timeout)
            if said is None or said.get("nonce") == nonce:
                return said
            self.twice.add(self.asked.get(said.get("nonce"), "?"))

    def verdict(self, payload: Path, index: int, task: str, timeout: float) -> dict:
        """``{"outcome": passed|failed|tampered|ended, "message", "changed"}`` of one task."""
        self._wait_ready()
        nonce = secrets.token_hex(16)
        self.asked[nonce] = task
        try:
            self._send({"payload": str(payload), "index": index, "task": task, "nonce": nonce})
        except OSError:
            answer = None
        else:
            answer = self._reply(nonce, timeout)
        if answer is None:
            ended = self._exit_status()
            self.stop()
            if ended is None:
                why = (f"the check of {task} ran past the per-cell limit of {timeout:g} s "
                       "in the judge and was stopped: does your code loop forever or wait "
                       "for a message that never comes?")
            else:
                why = (f"judge ended early (exit status {ended}) while checking {task}, "
                       "without a verdict: does your code exit the process (sys.exit, "
                       "os._exit) or crash it?")
            return {"outcome": "ended", "message": why, "changed": []}
        if answer.get("outcome") == "tampered":
            self.stop()
        return answer

    def _exit_status(self) -> int | None:
        """The judge's exit status if it ended (its answer channel closed), else None."""
        if not self.closed and self.proc.poll() is None:
            return None
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:       # the channel closed, the process lingers
            return -1

    def bye(self, timeout: float = 30.0) -> bool:
        """Did the judge speak again (after its last answer)? Ends it."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        nonce = secrets.token_hex(16)
        try:
            self._send({"bye": True, "nonce": nonce})
        except OSError:
            return False
        said = self._reply(nonce, timeout)
        self.stop()
        return bool(said and said.get("bye") is True)

    def judge_all(self, todo: list[tuple[Path, int, str]], timeout: float) -> dict[str, dict]:
        """The answer for every ``(payload, index, task)``, each confirmed as above."""
        answers: dict[str, dict] = {}
        last: tuple[Path, int, str] | None = None      # answered, not yet confirmed
        for payload, index, task in todo:
            answers[task] = self.verdict(payload, index, task, timeout)
            if last and answers[task]["outcome"] == "ended":
                answers[last[2]] = self._again(*last, timeout)
            last = (payload, index, task) if answers[task]["outcome"] in ("passed", "failed") \
                else None
        if last and not self.bye():
            answers[last[2]] = self._again(*last, timeout)
        self.stop()
        for task in self.twice & answers.keys():
            answers[task] = {"outcome": "tampered", "changed": ["the judge's answer channel"],
                             "message": f"tampered: the judge's channel carried two answers "
                                        f"for {task} (something other than the judge wrote "
                                        "one)"}
        return answers

    def _again(self, payload: Path, index: int, task: str, timeout: float) -> dict:
        """``task`` alone in a fresh judge, which must then answer "bye"."""
        self.stop()
        answer = self.verdict(payload, index, task, timeout)
        if answer["outcome"] in ("passed", "failed") and not self.bye():
            return {"outcome": "ended", "changed": [],
                    "message": f"judge ended early, right after answering for {task}: an "
                               "answer the judge did not outlive is not trusted (does your "
                               "code end the process, or arrange for it to end?)"}
        return answer

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

def _learner_threads(thread_frames: dict[int, Any], before: set[int]) -> list[str]:
    """Threads started since ``before`` whose target is learner code — code of no imported
    module (the learner's functions come with globals of their own). A thread a check
    started (its target in the check's module) is the check's business."""
    found = []
    for ident, frame in thread_frames.items():
        if ident in before:
            continue
        stack = []
        while frame is not None:
            stack.append(frame)
            frame = frame.f_back
        target = next((f for f in reversed(stack)
                       if f.f_globals.get("__name__") not in ("threading",
                                                              "concurrent.futures.thread")),
                      None)
        if target is None:
            continue
        name = target.f_globals.get("__name__")
        if getattr(sys.modules.get(name), "__dict__", None) is not target.f_globals:
            found.append(f"a thread still running {target.f_code.co_name} after the check "
                         "returned")
    return found


def _worker_changes(base: dict[str, str]) -> list[str]:
    """What changed on the workers of every cluster the checks started in this judge (one
    that cannot answer is shut down, so that nothing it holds is used again)."""
    from ddl_lab.runtime.launch import shared_clusters
    from .fingerprint import changes, on_worker
    said = []
    for cluster in shared_clusters():
        try:
            prints = cluster.run_with(on_worker, timeout=30)
        except Exception:                  # a cluster the learner's code broke: nothing
            cluster.shutdown()             # of it is used again
            continue
        ranks: dict[str, list[int]] = {}
        for rank, mine in enumerate(prints):
            common = {k: v for k, v in base.items() if k in mine}   # what the worker loaded
            for change in changes(common, {k: mine[k] for k in common}):
                ranks.setdefault(change, []).append(rank)
        said += [f"on worker{'s' * (len(r) > 1)} {', '.join(map(str, r))} of "
                 f"{cluster.world_size}: {change}" for change, r in ranks.items()]
    return said


def serve() -> None:
    """The judge's loop: stdin requests in, one JSON answer per request on its channel."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                            # learner prints go to the log, not the channel
    seed = json.loads(sys.stdin.readline()).get("seed")
    import ddl_lab.check as check
    from ddl_lab.check import _core, _record
    from .fingerprint import changes, fingerprint
    from dill import loads as load     # the calls, as the kernel took them (handover.py)
    entries: list[dict] = []
    _record.grade_with(entries.append, seed)
    checks = {name: getattr(check, name) for name in check.__all__}
    failure, text = _core.CheckFailed, BaseException.__str__
    base, base_value = fingerprint(), fingerprint(exact=False)
    channel.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("bye"):
            channel.write(json.dumps({"bye": True, "nonce": request["nonce"]}) + "\n")
            break
        task, nonce = request["task"], request["nonce"]
        threads = set(sys._current_frames())
        entries.clear()
        outcome, message = "failed", ""
        try:
            _, args, kwargs = load(Path(request["payload"]).read_bytes())[request["index"]]
        except BaseException as e:          # noqa: BLE001 — the learner's pickle, any error
            args, message = None, (f"your code for {task} could not be loaded into the judge "
                                   f"({type(e).__name__}: {e})")
        changed = changes(base, fingerprint())
        if args is not None and not changed:
            try:
                checks[task](*args, **kwargs)
                outcome = "returned"
            except failure as e:
                message = text(e) if type(e) is failure else \
                    f"the check of {task} stopped with {type(e).__name__}: {text(e)}"
            except BaseException as e:      # noqa: BLE001 — SystemExit, KeyboardInterrupt …
                message = f"the check of {task} stopped with {type(e).__name__}: {text(e)}"
            changed = changes(base, fingerprint())
            changed += dict.fromkeys(_learner_threads(sys._current_frames(), threads))
            changed += [] if changed else _worker_changes(base_value)
        last = entries[-1] if entries else {}
        if changed:
            outcome = "tampered"
            message = "tampered: " + "; ".join(changed)
        elif outcome == "returned" and last.get("passed") is True and last.get("task") == task:
            outcome, message = "passed", str(last.get("message", ""))
        else:
            outcome = "failed"
            message = message or str(last.get("message", "")) or \
                f"the check of {task} returned without a verdict"
        if seed is not None and outcome == "failed" and "seed=" in message:
            message += (f"\n(graded on the instructor's cases, seed {seed}: `seed=` above "
                        "replays them only under `ddl-lab grade --seed`)")
        score = max((float(e.get("score") or 0) for e in entries
                     if e.get("task") == task and not e.get("passed")), default=0.0)
        channel.write(json.dumps({"nonce": nonce, "outcome": outcome, "message": message,
                                  "score": score, "changed": changed}) + "\n")
        if outcome == "tampered":
            break
    channel.close()
    os._exit(0)

