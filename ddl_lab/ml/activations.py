"""The bytes autograd keeps for backward, live at once (``ActivationMeter``): lesson 09's
pipeline schedules and lesson 10's memory anatomy, ZeRO and recomputation measure with it."""
from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

__all__ = ["ActivationMeter"]


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _storage(t: torch.Tensor) -> int:
    """Where ``t``'s memory starts (0 for a tensor without its own storage)."""
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:
        return 0


class ActivationMeter:
    """Bytes of the tensors autograd keeps for backward, live at once (lessons 09, 10).

    Inside ``recording()``, every tensor a forward saves for backward is counted when it
    is saved and uncounted when it is freed — after the backward of its micro-batch, once
    nothing else holds it. Parameters and the data (``resident``: memory that is there
    whatever the schedule) are not counted. ``peak`` is the most ever live.
    """

    def __init__(self) -> None:
        self.live = self.peak = 0
        self._holders: dict[tuple[int, int, int], set[int]] = {}   # memory -> tensor ids
        self._resident: set[int] = set()

    def resident(self, *tensors: torch.Tensor) -> None:
        """Do not count tensors that share memory with these (the data, the parameters)."""
        self._resident |= {_storage(_local(t)) for t in tensors}

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        local = _local(t)                                  # a DTensor's own shard
        where = _storage(local)
        if isinstance(t, nn.Parameter) or isinstance(t._base, nn.Parameter) or \
                where in self._resident:
            return t
        key = (where, local.storage_offset(), local.numel())   # the same memory, once
        holders = self._holders.setdefault(key, set())
        if id(t) in holders:
            return t
        if not holders:
            self.live += local.numel() * local.element_size()
            self.peak = max(self.peak, self.live)
        holders.add(id(t))
        weakref.finalize(t, self._free, key, id(t), local.numel() * local.element_size())
        return t

    def _free(self, key: tuple[int, int, int], holder: int, nbytes: int) -> None:
        holders = self._holders.get(key, set())
        holders.discard(holder)
        if not holders:
            self._holders.pop(key, None)
            self.live -= nbytes

    def keep(self, t: torch.Tensor) -> None:
        """Count ``t`` as kept for backward by other means than autograd's saved tensors
        (a recomputed segment's input, lesson 10)."""
        self._pack(t)

    @contextmanager
    def recording(self) -> Iterator[None]:
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield
