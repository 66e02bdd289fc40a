"""The learner's side of a graded run (``ddl-lab grade``): it keeps what each check was
given and answers the judge's calls with plain data.

In the graded run — a kernel in the sandbox (``sandbox.py``) — each pristine check cell
``check.<task>(my_fn, …)`` runs as ``handover.take("<task>", my_fn, …)`` followed by
``handover.save(path)``: the arguments stay in this kernel; ``path`` gets a manifest (JSON)
that names each function the judge may call — its name and the course functions its code
reaches, for the refusal of the package's own answer — and holds every other argument as
plain data (``plain.py``). After the last cell the kernel runs ``serve``: the judge
(``judge.py``, outside the sandbox) connects over a Unix socket in the run's folder and
asks, case by case, for a call of a learner's function on inputs it sends (``call``) or
for a check's worker body run on this kernel's workers (``run``). The answers are made
plain here; nothing here is trusted, and nothing the learner's code does here reaches the
judge except as data it checks.

``judged(task, …)`` does the whole round trip from a kernel: nbgrader's autograder tests
call it (hidden tests of the export, ``nbgrader.py``), so they reach their verdicts in a
judge as ``ddl-lab grade`` does.
"""
from __future__ import annotations

import base64
import builtins
import contextlib
import functools
import importlib
import json
import os
import pickle
import shutil
import socket
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, Iterator

from . import plain

_TAKEN: list[tuple[str, tuple, dict]] = []
_GIVEN: dict[str, Any] = {}             # reference -> the learner's object the judge may call
ACCEPT = 600.0                          # seconds the kernel waits for the judge to connect


def take(task: str, *args: Any, **kwargs: Any) -> None:
    """What ``check.<task>(*args, **kwargs)`` would have been called with."""
    _TAKEN.append((task, args, kwargs))


def save(path: str) -> None:
    """Write the manifest of every call taken since the last save into ``path``."""
    calls = [{"task": task, "args": [_given(a) for a in args],
              "kwargs": {str(k): _given(v) for k, v in kwargs.items()}}
             for task, args, kwargs in _TAKEN]
    _TAKEN.clear()
    Path(path).write_text(json.dumps(calls))


def _given(value: Any) -> Any:
    """A check's argument as the manifest holds it: a function by reference, else plain."""
    if not callable(value):
        return {"plain": plain.encode(value)}
    ref = f"f{len(_GIVEN)}"
    _GIVEN[ref] = value
    return {"ref": ref, "name": str(getattr(value, "__name__", "your function")),
            "reaches": _reaches(value)}


def _reaches(fn: Any) -> list[list[str]]:
    """The course's functions ``fn``'s code can name (``runtime/reach.py``)."""
    from ddl_lab.runtime.reach import course_names
    try:
        return [list(pair) for pair in course_names(fn)]
    except Exception:               # noqa: BLE001 — the learner's objects, any error
        return []


# ---------------------------------------------------------------- serving the judge

def serve(path: str, key: str, accept: float = ACCEPT) -> None:
    """Answer the judge's requests on the Unix socket ``path`` until it says bye."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    listener.settimeout(accept)
    Path(path + ".ready").write_text("")
    try:
        conn, _ = listener.accept()
    except socket.timeout:
        return
    finally:
        listener.close()
    conn.settimeout(None)
    stream = conn.makefile("rwb")
    hello = _read(stream)
    if not hello or hello.get("key") != key:
        conn.close()
        return
    _write(stream, {"ready": True})
    while True:
        request = _read(stream)
        if request is None or request.get("op") == "bye":
            break
        _write(stream, answer(request))
    conn.close()


def _read(stream: Any) -> dict | None:
    line = stream.readline()
    if not line:
        return None
    said = json.loads(line)
    return said if isinstance(said, dict) else None


def _write(stream: Any, message: dict) -> None:
    stream.write((json.dumps(message, allow_nan=False) + "\n").encode())
    stream.flush()


def answer(request: dict) -> dict:
    """One request of the judge, answered with plain data; the task's refused functions
    are wired while the learner's code runs (``tripwire``)."""
    refused = [tuple(map(str, pair)) for pair in request.get("refuses") or []]
    with tripwire(refused):
        return _answer(request, refused)


def _answer(request: dict, refused: list) -> dict:
    try:
        job = _Unpickler(base64.b64decode(request["payload"])).load()
        if request.get("op") == "beside":
            procedure, args, kwargs = job
            try:
                return {"value": plain.encode(procedure(*args, **kwargs))}
            except Exception as e:  # noqa: BLE001 — the check's failure, or the learner's
                if type(e).__name__ == "CheckFailed":
                    return {"failed": plain.encode(_text(e))}
                return {"raised": raised(e)}
        if request.get("op") == "call":
            ref, args, kwargs = job
            try:
                value = _GIVEN[ref](*args, **kwargs)
            except Exception as e:  # noqa: BLE001 — the learner's code, any error
                return {"raised": raised(e)}
            return {"value": plain.encode(value), "args": plain.encode(list(args)),
                    "kwargs": plain.encode(kwargs)}
        from ddl_lab.runtime import worlds

        from .link import dumps
        body, cases, fn, timeout, op_timeout = job
        shipped = [(n, (dumps((body, tuple(args), refused)),)) for n, args in cases]
        try:
            outcomes = worlds.run_cases(_by_value, shipped, fn=fn, timeout=timeout,
                                        op_timeout=op_timeout)
        except worlds.WorldFailed as e:
            return {"world_failed": plain.encode(e.failure)}
        return {"outcomes": plain.encode(outcomes)}
    except Exception as e:          # noqa: BLE001 — the request could not be served here
        return {"error": f"{type(e).__name__}: {e}"[:2000]}


def _by_value(blob: bytes) -> Any:
    """On a worker: a check's body on its arguments, both sent by value (the checks are
    not in the sandbox), the task's refused functions wired."""
    body, args, refused = pickle.loads(blob)
    with tripwire(refused):
        return body(*args)


@contextlib.contextmanager
def tripwire(refused: list) -> Iterator[None]:
    """While the learner's code runs for a task: each of the package's own implementations
    the task refuses (``(module, name)``), wherever a course module holds it, raises when
    code that is not the course's calls it — however the learner's code found it (a name
    built at run time too). A learner who knows this can unwire it: it rests on the
    learner's side (README, "What rests on the learner's side")."""
    swapped = []
    for module_name, name in refused:
        try:
            original = getattr(importlib.import_module(module_name), name)
        except Exception:           # noqa: BLE001 — not importable here: nothing to wire
            continue
        if not isinstance(original, types.FunctionType):
            continue
        wired = _wired(original, f"{module_name}.{name}")
        for module in [m for k, m in list(sys.modules.items()) if k.startswith("ddl_lab")]:
            for key, value in list(vars(module).items()):
                if value is original:
                    setattr(module, key, wired)
                    swapped.append((module, key, original))
    try:
        yield
    finally:
        for module, key, original in swapped:
            setattr(module, key, original)


def _wired(original: Any, where: str) -> Any:
    @functools.wraps(original)
    def wired(*args: Any, **kwargs: Any) -> Any:
        caller = str(sys._getframe(1).f_globals.get("__name__", ""))
        if not caller.startswith("ddl_lab"):
            raise RuntimeError(f"{where} is the package's own implementation of this task: "
                               "the task is to write it yourself, so it is refused when "
                               "grading")
        return original(*args, **kwargs)
    return wired


def raised(e: BaseException) -> dict:
    """An exception of the learner's code as plain data: its type's name, the built-in
    exception it derives from, its arguments."""
    base = next((c.__name__ for c in type(e).__mro__
                 if getattr(builtins, c.__name__, None) is c), "Exception")
    return {"type": plain.encode(type(e).__name__), "base": base,
            "args": plain.encode(list(e.args)), "text": plain.encode(_text(e))}


def _text(e: BaseException) -> str:
    try:
        return str(e)[:2000]
    except Exception:               # noqa: BLE001
        return "<unprintable>"


class _Unpickler(pickle.Unpickler):
    """The judge's request: references to the learner's functions resolved here."""

    def __init__(self, data: bytes):
        import io
        super().__init__(io.BytesIO(data))

    def persistent_load(self, pid: Any) -> Any:
        kind, ref = pid
        if kind == "ref":
            return _GIVEN[ref]
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")


# ---------------------------------------------------------------- nbgrader's hidden tests

_JUDGE: list = []                       # nbgrader's kernel: one judge for all its tests


def judged(task: str, *args: Any, **kwargs: Any) -> None:
    """``check.<task>(*args, **kwargs)`` judged in a judge process, with this kernel
    serving the calls: an AssertionError with the check's message unless it passed."""
    import threading

    from .judge import Judge
    if not _JUDGE:
        _JUDGE.append(Judge(None, Path(tempfile.mkdtemp(prefix="ddl-lab-judged-")) /
                            "judge.log"))
        _JUDGE[0].start()
    judge = _JUDGE[0]
    folder = Path(tempfile.mkdtemp(prefix="ddl-lab-judged-"))
    try:
        take(task, *args, **kwargs)
        save(str(folder / "manifest-0.json"))
        key, link = os.urandom(16).hex(), str(folder / "link.sock")
        answers: dict = {}
        asking = threading.Thread(target=lambda: answers.update(judge.judge_all(
            [(folder / "manifest-0.json", 0, task)], 600.0, link=link, key=key,
            work=folder)), daemon=True)
        asking.start()
        serve(link, key, accept=120.0)
        asking.join(60.0)
        answer = answers.get(task, {"outcome": "ended", "message": "the judge did not answer"})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if answer.get("outcome") != "passed":
        raise AssertionError(f"judged: {answer.get('message', '')}")
    print(f"✔ {task}: judged — passed")
