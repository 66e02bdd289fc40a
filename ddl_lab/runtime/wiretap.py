"""The wiretap: every operation a worker hands to its process group, recorded (lessons 00,
06, 08, 09, 10, 11, 12 — their checks and meters all listen here).

``Wiretap`` is a context manager used on a worker. While inside, a process group that
forwards every call to the current default group — and records it first — *is* the
default group (registered like it), so every ``torch.distributed`` call on it, however it
was imported, and the calls DDP's C++ reducer makes, pass through it::

    with Wiretap(on_op=hook) as tap:         # hook(op, args) may raise to refuse a call
        ...
    tap.ops            # every Op: (source, destination, bytes) of a message, or (operation,
                       # payload bytes, group size, ranks) of a collective
    tap.sent           # bytes this rank put on the wire, by lesson 06's ring model (an
                       # all-to-all with uneven splits: exactly what leaves the rank)

``Wiretap(every_group=True)`` records too what this rank hands to any other process group
(a device mesh's, FSDP2's): every ``ProcessGroup``'s methods record while inside.

A call that torch itself refused before it reached the group (``dist.send(t, None)``, a
rank outside the group, a None tensor) is reported to the hook as it leaves, marked
``refused``. The wiretap proves itself as it starts: a canary ``isend``/``irecv``/
``all_reduce`` of known size goes through ``torch.distributed`` to it (and no further);
if the records do not show it exactly, it raises instead of ever reporting 0.

``METHODS`` is the one table of the ``ProcessGroup`` methods that move data: the operation,
the argument with this rank's payload, the ``torch.distributed`` function a caller uses.
``forwarding()`` says whether this thread is inside a tap handing a recorded call on to
the raw group (lesson 15 closes the raw groups to every other caller).

``FunctionalTap`` records what the wrapped groups never see: the functional collectives
DTensor calls (tensor parallelism on a device mesh, lesson 14).
"""
from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import Any, Callable, NamedTuple

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d_cpp
from torch.distributed import distributed_c10d as c10d
from torch.utils._python_dispatch import TorchDispatchMode

from .costs import sent_bytes

__all__ = ["Method", "METHODS", "Op", "Wiretap", "FunctionalTap", "forwarding", "tensor_bytes"]


class Method(NamedTuple):
    """What a ``ProcessGroup`` method does: ``op`` the operation, ``payload`` which argument
    holds this rank's payload (None: nothing), ``function`` the ``torch.distributed``
    function a caller would have called for it."""

    op: str
    payload: int | None
    function: str

    @property
    def collective(self) -> bool:
        """A built-in collective that moves data (not a message, not a barrier)."""
        return self.op not in ("send", "recv", "barrier")


METHODS: dict[str, Method] = {m: Method(*spec) for m, spec in {
    "allreduce": ("all_reduce", 0, "all_reduce"),
    "allreduce_coalesced": ("all_reduce", 0, "all_reduce_coalesced"),
    "broadcast": ("broadcast", 0, "broadcast"), "reduce": ("reduce", 0, "reduce"),
    "allgather": ("all_gather", 1, "all_gather"),
    "all_gather_single": ("all_gather", 1, "all_gather_into_tensor"),
    "_allgather_base": ("all_gather", 1, "all_gather_into_tensor"),
    "allgather_coalesced": ("all_gather", 1, "all_gather_coalesced"),
    "all_gather_single_coalesced": ("all_gather", 1, "all_gather_into_tensor"),
    "allgather_into_tensor_coalesced": ("all_gather", 1, "all_gather_into_tensor"),
    "reduce_scatter": ("reduce_scatter", 1, "reduce_scatter"),
    "reduce_scatter_single": ("reduce_scatter", 1, "reduce_scatter_tensor"),
    "_reduce_scatter_base": ("reduce_scatter", 1, "reduce_scatter_tensor"),
    "reduce_scatter_single_coalesced": ("reduce_scatter", 1, "reduce_scatter_tensor"),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", 1, "reduce_scatter_tensor"),
    "alltoall": ("all_to_all", 1, "all_to_all"),
    "alltoall_base": ("all_to_all", 1, "all_to_all_single"),
    "all_to_all_single": ("all_to_all", 1, "all_to_all_single"),
    "gather": ("gather", 1, "gather"), "scatter": ("scatter", 1, "scatter"),
    "send": ("send", 0, "send"), "recv": ("recv", 0, "recv"),
    "recv_anysource": ("recv", 0, "recv"),
    "barrier": ("barrier", None, "barrier"),
    "monitored_barrier": ("barrier", None, "monitored_barrier"),
}.items()}
_P2P = {"send": "send", "isend": "send", "recv": "recv", "irecv": "recv"}
_C10D = c10d.__file__
_DIST = os.path.dirname(_C10D) + os.sep
_HERE = __file__
_CANARY_TAG = 0x0CA9A7                    # a tag no lesson uses
_CANARY_NUMEL = 3


def tensor_bytes(tensors: Any) -> int:
    """Bytes of a tensor or of (nested lists of) tensors; 0 for None."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    if tensors is None:
        return 0
    return sum(tensor_bytes(t) for t in tensors)


@dataclass(frozen=True)
class Op:
    """One operation a rank handed to its process group.

    ``op``: the operation ('send', 'recv', 'all_reduce', 'all_gather', 'broadcast', …);
    ``method``: the ProcessGroup method called; ``call``: the torch.distributed function the
    caller used ('' from C++, e.g. DDP's reducer); ``nbytes``: the payload this rank handed
    in; ``sent``: what it puts on the wire by the ring model (lesson 06); ``src``/``dst``:
    a message's ranks in the group (None for a collective, or a receive from anyone);
    ``size``/``ranks``: the group; ``refused``: torch refused it before the group saw it.
    """

    op: str
    method: str
    call: str
    nbytes: int
    sent: float
    src: int | None
    dst: int | None
    size: int
    ranks: tuple[int, ...]
    refused: bool = False


def _kept_back(name: str, args: tuple, me: int, nbytes: int) -> int | None:
    """Of an all-to-all's ``nbytes``, the part this rank ``me`` sends itself (it never
    leaves): its own tensor of ``alltoall``, its own rows of ``alltoall_base`` with uneven
    ``input_split_sizes`` (lesson 14, experts). None with equal splits: the ring model's
    (n−1)/n·S is then exact."""
    if name == "alltoall":
        return tensor_bytes(args[1][me])
    x, in_splits = args[1], list(args[3]) if len(args) > 3 and args[3] is not None else []
    if not in_splits or not x.shape[0]:
        return None
    return in_splits[me] * (nbytes // x.shape[0])


class _Tapped(dist.ProcessGroup):
    """A process group that hands every call to its wiretap, which records and forwards it."""

    def __init__(self, inner: dist.ProcessGroup, tap: "Wiretap"):
        super().__init__(inner.rank(), inner.size())
        self.inner, self.tap = inner, tap

    def getBackendName(self) -> str:
        return "wiretap"

    @property
    def group_name(self) -> str:
        """The raw group's name (a device mesh made inside the tap resolves it to the raw
        group, which ``every_group`` watches)."""
        return self.inner.group_name


def _method(name: str) -> Callable:
    def forward(self: _Tapped, *args: Any, **kwargs: Any) -> Any:
        return self.tap._route(self.inner, name, args + tuple(kwargs.values()))
    forward.__name__ = forward.__qualname__ = name
    return forward


for _name in METHODS:
    setattr(_Tapped, _name, _method(_name))

_LOCAL = threading.local()


def forwarding() -> bool:
    """Whether this thread is inside a wiretap handing a call it has recorded on to the
    process group behind it (lesson 15's sealed plans: a raw group answers only this)."""
    return getattr(_LOCAL, "depth", 0) > 0


def _forward(group: dist.ProcessGroup, name: str, args: tuple) -> Any:
    _LOCAL.depth = getattr(_LOCAL, "depth", 0) + 1
    try:
        return getattr(group, name)(*args)
    finally:
        _LOCAL.depth -= 1


def _watched(tap: "Wiretap", name: str, method: Callable) -> Callable:
    """``ProcessGroup.name`` recording through ``tap`` (``every_group``), except the call a
    wiretap forwards (recorded already)."""
    def watched(group: dist.ProcessGroup, *args: Any, **kwargs: Any) -> Any:
        if forwarding():
            return method(group, *args, **kwargs)
        return tap._route(group, name, args + tuple(kwargs.values()))
    watched.__name__ = watched.__qualname__ = name
    return watched


def _outermost_call(frame: FrameType | None) -> FrameType | None:
    """The outermost torch.distributed function frame of the call stack ending at ``frame``
    (None if the call did not come through one, e.g. from C++)."""
    while frame is not None and frame.f_code.co_filename == _HERE:
        frame = frame.f_back
    found = None
    while frame is not None and frame.f_code.co_filename.startswith(_DIST):
        if frame.f_code.co_filename == _C10D:
            found = frame
        frame = frame.f_back
    return found


class Wiretap:
    """Records every operation this worker hands to its default process group (see the
    module's docstring). ``on_op(op, args)`` runs before each operation is forwarded, with
    the method's own arguments (``args[0]``: the tensors of a send, recv or allreduce); it
    may raise to refuse the call. ``refuse_new_group``: if given, ``dist.new_group`` raises
    a RuntimeError with this text while inside (a new group would talk past the tap).
    ``every_group``: record what this rank hands to every other process group too (FSDP2's
    device mesh, lesson 10), with that group's size and ranks."""

    def __init__(self, on_op: Callable[[Op, tuple], None] | None = None,
                 refuse_new_group: str | None = None, every_group: bool = False):
        self.on_op, self.refuse_new_group = on_op, refuse_new_group
        self.every_group = every_group
        self._patched: list[tuple[str, Any]] = []
        self.ops: list[Op] = []
        self.payload: Counter = Counter()     # operation -> bytes handed in
        self.by_op: Counter = Counter()       # operation -> bytes put on the wire (ring model)
        self.sent = 0.0
        self._canary: list[Op] | None = None
        self._reached: FrameType | None = None
        self._inner: dist.ProcessGroup | None = None

    # ------------------------------------------------------------------ recording

    @property
    def rank(self) -> int:
        return self._group.rank()

    @property
    def size(self) -> int:
        return self._group.size()

    def _record(self, op: Op) -> None:
        self.ops.append(op)
        self.payload[op.op] += op.nbytes
        self.by_op[op.op] += op.sent
        self.sent += op.sent

    def charge(self, op: str, nbytes: int) -> None:
        """A message that does not go through the process group (lesson 07's parameter-
        server client), sent as it is: ``nbytes`` on the wire."""
        self._record(Op(op, "", "", nbytes, float(nbytes), self.rank, None, self.size,
                        self._ranks))

    def _ranks_of(self, group: dist.ProcessGroup) -> tuple[int, ...]:
        if group is self._inner:
            return self._ranks
        try:
            return tuple(c10d.get_process_group_ranks(group))
        except Exception:                     # a group c10d's tables do not know
            return tuple(range(group.size()))

    def _op(self, group: dist.ProcessGroup, name: str, args: tuple, call: str) -> Op:
        op, at, _ = METHODS[name]
        nbytes = 0 if at is None else tensor_bytes(args[at])
        me, n = group.rank(), group.size()
        src = dst = None
        if op == "send":
            src, dst = me, int(args[1])
        elif op == "recv":
            src, dst = (int(args[1]) if name == "recv" else None), me
        root = op == "gather" and me == getattr(args[-1], "rootRank", 0)
        sent = _kept_back(name, args, me, nbytes) if op == "all_to_all" else None
        sent = sent_bytes(op, n, nbytes, root=root) if sent is None else nbytes - sent
        return Op(op, name, call, nbytes, sent, src, dst, n, self._ranks_of(group))

    def _route(self, group: dist.ProcessGroup, name: str, args: tuple) -> Any:
        """Record the call ``group.name(*args)``, let ``on_op`` see it, then forward it."""
        frame = _outermost_call(sys._getframe(1))
        op = self._op(group, name, args, frame.f_code.co_name if frame is not None else "")
        if self._canary is not None:          # proving the tap: record, send nothing
            self._canary.append(op)
            return None
        self._reached = frame
        self._record(op)
        if self.on_op is not None:
            self.on_op(op, args)
        if args and args[-1] is None:         # options left out: the method's defaults
            args = args[:-1]
        return _forward(group, name, args)

    # ------------------------------------------------------------------ refused calls

    def _refused(self, tb: TracebackType | None) -> tuple[Op, tuple] | None:
        """The point-to-point call torch refused before it reached the group, if that is
        what raised (its arguments as the caller gave them)."""
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_filename == _C10D and code.co_name in _P2P:
                break
            tb = tb.tb_next
        if tb is None or tb.tb_frame is self._reached:
            return None
        local, op, me = tb.tb_frame.f_locals, _P2P[tb.tb_frame.f_code.co_name], self.rank
        peer = local.get("dst" if op == "send" else "src")
        peer = local.get("group_dst" if op == "send" else "group_src") if peer is None else peer
        tensor = local.get("tensor")
        nbytes = tensor_bytes(tensor) if isinstance(tensor, torch.Tensor) else 0
        src, dst = (me, peer) if op == "send" else (peer, me)
        return (Op(op, "", code.co_name, nbytes, 0.0, src, dst, self.size,
                   self._ranks, refused=True), ([tensor], peer))

    # ------------------------------------------------------------------ in and out

    def __enter__(self) -> "Wiretap":
        inner = c10d._get_default_group()
        self._inner, self._group = inner, _Tapped(inner, self)
        self._ranks = tuple(c10d.get_process_group_ranks(inner))
        world = c10d._world
        self._tables = [getattr(world, t) for t in ("pg_map", "pg_names", "pg_group_ranks",
                                                    "pg_backend_config")]
        for table in self._tables:
            if inner in table:
                table[self._group] = table[inner]
        self._new_group = dist.new_group
        c10d._update_default_pg(self._group)
        if self.refuse_new_group is not None:
            dist.new_group = c10d.new_group = self._no_new_group
        if self.every_group:
            self._watch_every_group()
        try:
            self._prove()
        except BaseException:
            self._restore()
            raise
        return self

    def _no_new_group(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(self.refuse_new_group)

    def _watch_every_group(self) -> None:
        """Every ``ProcessGroup``'s data-moving methods record through this tap (the ones
        this torch has)."""
        pg = c10d_cpp.ProcessGroup
        self._patched = [(m, vars(pg)[m]) for m in METHODS if m in vars(pg)]
        for m, method in self._patched:
            setattr(pg, m, _watched(self, m, method))

    def _prove(self) -> None:
        """A canary isend, irecv and all_reduce of known size through torch.distributed:
        the records must show exactly them, or the tap is deaf on this torch."""
        self._canary = []
        t, me = torch.zeros(_CANARY_NUMEL), self._group.rank()
        ops = ["send", "recv", "all_reduce"] + ["all_reduce"] * self.every_group
        try:
            dist.isend(t, group_dst=me, tag=_CANARY_TAG)
            dist.irecv(t, group_src=me, tag=_CANARY_TAG)
            dist.all_reduce(t)
            if self.every_group:              # another group: the raw one behind the tap
                dist.all_reduce(t, group=self._inner)
        finally:
            seen, self._canary = [(o.op, o.nbytes) for o in self._canary], None
        want = [(op, tensor_bytes(t)) for op in ops]
        also = " (the default group's, then another's)" if self.every_group else ""
        if seen != want:
            raise RuntimeError(
                f"the wiretap is deaf on torch {torch.__version__}: a canary dist.isend, "
                f"dist.irecv and dist.all_reduce{also} of {tensor_bytes(t)} bytes each "
                f"reached it as {seen or 'nothing'}, expected {want}. This torch no longer routes "
                "torch.distributed calls through the default process group's methods, so "
                "every byte count would read 0: ddl_lab.runtime.wiretap needs updating.")

    def _restore(self) -> None:
        for m, method in reversed(self._patched):
            setattr(c10d_cpp.ProcessGroup, m, method)
        self._patched = []
        if self.refuse_new_group is not None:
            dist.new_group = c10d.new_group = self._new_group
        c10d._update_default_pg(self._inner)
        for table in self._tables:
            table.pop(self._group, None)

    def __exit__(self, kind: type | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._restore()
        refused = self._refused(tb) if exc is not None else None
        self._reached = None
        if refused is not None:
            self.ops.append(refused[0])
            if self.on_op is not None:
                self.on_op(*refused)


class FunctionalTap(TorchDispatchMode):
    """Records the functional collectives (``_c10d_functional``) that DTensor and tensor
    parallelism call (lesson 14 §3): they reach the process group in C++, below the groups a
    ``Wiretap`` wraps. While inside, ``ops`` gains (op, payload bytes, the group's ranks)
    for each one this rank calls."""

    OPS = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather",
           "reduce_scatter_tensor": "reduce_scatter", "all_to_all_single": "all_to_all",
           "broadcast": "broadcast"}

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, int, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = func._schema.name
        if name.startswith("_c10d_functional::"):
            op = self.OPS.get(name.split("::")[1].rstrip("_"))
            if op is not None:
                group = c10d._resolve_process_group(args[-1])
                x = args[0]
                self.ops.append((op, x.numel() * x.element_size(),
                                 tuple(dist.get_process_group_ranks(group))))
        return func(*args, **kwargs)
