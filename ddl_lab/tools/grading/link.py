"""The judge's end of the link to the sandboxed learner side (``ddl-lab grade``).

A learner's function reaches the judge as a ``Remote``: calling it sends the inputs to the
kernel in the sandbox (``handover.serve``) and returns what came back as plain data
(``plain.py``); the checks call it as they call a function in a learner's own notebook.
A check's run on workers with a ``Remote`` among its arguments goes to the kernel's own
workers (``check/_core.run_cases`` asks ``remote_in``). What the judge sends is pickled
(cloudpickle, the checks' own code by value, since the sandbox holds no checks); what it
receives is never unpickled.
"""
from __future__ import annotations

import base64
import builtins
import functools
import importlib
import io
import json
import socket
import sys
import time
import types
from typing import Any, Sequence

from . import plain

_BY_VALUE: set[str] = {"ddl_lab.check"}


class LinkLost(BaseException):
    """The learner's kernel ended or went silent (not an Exception: no check catches it)."""


def by_value(*modules: str) -> None:
    """Send the code of ``modules`` (a course's own checks) by value too."""
    _BY_VALUE.update(modules)


class Link:
    """A connection to the kernel serving the learner's side of one submission."""

    def __init__(self, path: str, key: str, timeout: float):
        self.path, self.key, self.timeout = path, key, timeout
        self.sock: socket.socket | None = None
        self.stream: Any = None
        self.lost = ""
        self.refuses: list[tuple[str, str]] = []    # the task's refused implementations

    def _connect(self) -> None:
        if self.lost:
            raise LinkLost(self.lost)
        if self.stream is not None:
            return
        deadline = time.monotonic() + self.timeout
        while True:                         # the kernel may still be binding its socket
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(self.timeout)
                self.sock.connect(self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError) as e:
                self.sock.close()
                if time.monotonic() > deadline:
                    self._lose(f"the kernel did not take the judge's connection ({e})")
                time.sleep(0.05)
            except OSError as e:
                self._lose(f"the kernel did not take the judge's connection ({e})")
        self.stream = self.sock.makefile("rwb")
        said = self._ask({"key": self.key})
        if said.get("ready") is not True:
            self._lose("the kernel did not answer the judge's hello")

    def _lose(self, why: str) -> None:
        self.lost = why
        self.close()
        raise LinkLost(why)

    def _ask(self, message: dict) -> dict:
        try:
            self.stream.write((json.dumps(message) + "\n").encode())
            self.stream.flush()
            line = self.stream.readline()
        except socket.timeout:
            self._lose(f"the learner's code did not answer within {self.timeout:g} s")
        except OSError as e:
            self._lose(f"the learner's kernel ended ({type(e).__name__})")
        if not line:
            self._lose("the learner's kernel ended (did your code exit the process or crash "
                       "it: sys.exit, os._exit, a killed worker?)")
        try:
            said = json.loads(line)
        except ValueError:
            said = None
        if not isinstance(said, dict):
            self._lose("the learner's side answered something that is not plain data")
        return said

    def request(self, op: str, job: tuple) -> dict:
        self._connect()
        said = self._ask({"op": op, "payload": base64.b64encode(dumps(job)).decode(),
                          "refuses": self.refuses})
        if "error" in said:
            raise RuntimeError(f"the learner's side could not serve the judge: "
                               f"{str(said['error'])[:500]}")
        return said

    def bye(self) -> None:
        if self.stream is not None and not self.lost:
            try:
                self.stream.write(b'{"op": "bye"}\n')
                self.stream.flush()
            except OSError:
                pass
        self.close()

    def close(self) -> None:
        for thing in (self.stream, self.sock):
            try:
                if thing is not None:
                    thing.close()
            except OSError:
                pass
        self.stream = self.sock = None


class Remote:
    """A learner's function that lives in the sandbox: called here, it runs there."""

    def __init__(self, link: Link, ref: str, name: str, reaches: Sequence[Sequence[str]]):
        self.link, self.ref, self.__name__ = link, ref, name
        self.__qualname__ = name
        self.reaches = [tuple(str(p) for p in pair) for pair in reaches]

    def __repr__(self) -> str:
        return f"<the learner's {self.__name__}>"

    def __reduce__(self) -> Any:
        raise TypeError(f"{self.__name__} lives in the learner's sandbox: a check runs it on "
                        "workers with check._core.run_cases / on_workers, or watches it with "
                        "run_beside, never by sending it elsewhere")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        said = self.link.request("call", (self.ref, args, kwargs))
        if "raised" in said:
            raise rebuilt(said["raised"])
        _write_back(list(args), plain.decode(said.get("args")))
        _write_back(kwargs, plain.decode(said.get("kwargs")))
        return plain.decode(said.get("value"))


def run_beside(link: Link, procedure: Any, args: tuple, kwargs: dict) -> Any:
    """A check's procedure run in the sandboxed kernel (``check._core.run_beside``): its
    result as plain data; its CheckFailed raised here as one."""
    from ddl_lab.check._core import CheckFailed
    said = link.request("beside", (procedure, args, kwargs))
    if "failed" in said:
        raise CheckFailed(str(plain.decode(said["failed"])))
    if "raised" in said:
        raise rebuilt(said["raised"])
    return plain.decode(said.get("value"))


def remote_in(fn: Any, cases: Sequence[tuple[int, tuple]]) -> Link | None:
    """The link of the first ``Remote`` among ``fn`` and the cases' arguments, if any."""
    for obj in [fn, *(a for _, args in cases for a in _flat(args))]:
        if isinstance(obj, Remote):
            return obj.link
    return None


def _flat(args: Any) -> list:
    out = []
    for a in args:
        out.append(a)
        if isinstance(a, functools.partial):
            out += [a.func, *a.args, *a.keywords.values()]
        elif isinstance(a, (list, tuple)):
            out += [v for v in a if isinstance(v, Remote)]
    return out


def run_remote(link: Link, body: Any, cases: Sequence[tuple[int, tuple]], fn: Any,
               timeout: float | None, op_timeout: float | None) -> list:
    """``runtime.worlds.run_cases`` on the kernel's workers: its Outcomes, or WorldFailed."""
    from ddl_lab.runtime.worlds import Outcome, RankFailure, WorldFailed
    said = link.request("run", (body, [(n, tuple(a)) for n, a in cases], fn, timeout,
                                op_timeout))
    if "world_failed" in said:
        failure = plain.decode(said["world_failed"])
        if not isinstance(failure, RankFailure):
            raise RuntimeError("the learner's side sent a failure of no known form")
        raise WorldFailed(failure)
    outcomes = plain.decode(said.get("outcomes"))
    if not isinstance(outcomes, list) or not all(isinstance(o, Outcome) for o in outcomes):
        raise RuntimeError("the learner's side sent outcomes of no known form")
    return outcomes


def rebuilt(info: dict) -> BaseException:
    """The learner's exception, as plain data made one again: same name, same built-in
    base (a KeyError stays a LookupError), same arguments."""
    name = str(plain.decode(info.get("type")) or "Exception")
    base = getattr(builtins, str(info.get("base")), Exception)
    if not (isinstance(base, type) and issubclass(base, Exception)):
        base = Exception
    args = plain.decode(info.get("args"))
    args = tuple(args) if isinstance(args, list) else ()
    cls = base if base.__name__ == name else type(name, (base,), {"__module__": "learner"})
    try:
        return cls(*args)
    except Exception:               # noqa: BLE001 — arguments the base refuses
        return cls(str(plain.decode(info.get("text"))))


def _write_back(sent: Any, got: Any) -> None:
    """What the learner's function did in place to the judge's arguments, done here too."""
    torch = _torch()
    if isinstance(sent, list) and isinstance(got, list):
        if len(sent) != len(got):
            sent[:] = got
            return
        for i, (s, g) in enumerate(zip(sent, got)):
            if _in_place(s, g, torch):
                _write_back(s, g)
            elif not _same(s, g, torch):
                sent[i] = g
    elif isinstance(sent, dict) and isinstance(got, dict):
        for k in [k for k in sent if k not in got]:
            del sent[k]
        for k, g in got.items():
            if k in sent and _in_place(sent[k], g, torch):
                _write_back(sent[k], g)
            else:
                sent[k] = g
    elif isinstance(got, plain.State) and hasattr(sent, "__dict__"):
        mine = vars(sent)
        for k, g in got.vars.items():
            if k not in mine or isinstance(g, (plain.Opaque, plain.State)):
                continue
            if _in_place(mine[k], g, torch):
                _write_back(mine[k], g)
            else:
                mine[k] = g
    elif torch is not None and isinstance(sent, torch.Tensor) and isinstance(got, torch.Tensor):
        if sent.shape == got.shape:
            with torch.no_grad():
                sent.copy_(got.to(sent.dtype))
    elif isinstance(sent, __import__("numpy").ndarray) and hasattr(got, "shape"):
        if sent.shape == got.shape and sent.flags.writeable:
            sent[...] = got


def _in_place(s: Any, g: Any, torch: Any) -> bool:
    import numpy as np
    return (isinstance(s, (list, dict)) and type(g) is type(s)) or isinstance(g, plain.State) or (
        torch is not None and isinstance(s, torch.Tensor) and isinstance(g, torch.Tensor)) \
        or (isinstance(s, np.ndarray) and isinstance(g, np.ndarray))


def _same(s: Any, g: Any, torch: Any) -> bool:
    try:
        return type(s) is type(g) and bool(s == g)
    except Exception:               # noqa: BLE001
        return False


def _torch() -> Any:
    import sys
    return sys.modules.get("torch")


def dumps(job: Any) -> bytes:
    """``job`` pickled with cloudpickle: the checks' code by value, a Remote by reference,
    modules by name (also in the sandbox, for its workers: ``handover.answer``)."""
    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def persistent_id(self, obj: Any) -> Any:
            return ("ref", obj.ref) if isinstance(obj, Remote) else None

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, types.ModuleType) and type(obj) is not types.ModuleType \
                    and sys.modules.get(obj.__name__) is obj:      # torch.ops and the like
                return importlib.import_module, (obj.__name__,)
            return super().reducer_override(obj)

    for name in _BY_VALUE:
        try:
            cloudpickle.register_pickle_by_value(importlib.import_module(name))
        except (ImportError, ValueError):
            pass
    buf = io.BytesIO()
    Pickler(buf).dump(job)
    return buf.getvalue()
