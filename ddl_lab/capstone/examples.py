"""Which examples a capstone worker's models ran on (lesson 15).

Each worker is given its own shard (``meter.Batches``, which records the rows it hands
out); nothing stops a plan from loading the whole training set itself (``digits()``,
scikit-learn) and training on it. So while the plan runs, a global forward pre-hook
(``torch.nn.modules.module.register_module_forward_pre_hook``) looks at the input of
every module called on the worker — the plan's model, a DDP wrapper, a model the plan
built itself — and keeps the 8×8 digit rows it sees (a (b, 64) or (b, 1, 8, 8) tensor).
A row of the training set that is not in this worker's shard is another worker's
example: the plan reached past its shard.

What it cannot see: examples transformed before the model sees them (rescaled, noised,
shifted), a computation that uses no ``nn.Module`` (``F.conv2d`` on the parameters), and
weights trained before the run and brought in by the plan.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from ddl_lab.ml.data import Dataset

__all__ = ["ExamplesSeen"]


def _rows(X: Any) -> set[bytes]:
    return {row.tobytes() for row in np.ascontiguousarray(X, dtype=np.float32).reshape(-1, 64)}


class ExamplesSeen:
    """While inside: every digit row any module of this worker runs on. ``foreign``: how
    many distinct training examples outside ``own`` it ran on."""

    def __init__(self, own: Dataset, train: Dataset):
        self._own, self._train = _rows(own.X), _rows(train.X)
        self.seen: set[bytes] = set()
        self._handle: Any = None
        self._last: tuple = ()

    def _look(self, module: nn.Module, args: tuple) -> None:
        for x in args:
            if (isinstance(x, torch.Tensor) and x.is_floating_point() and x.ndim >= 1
                    and (x.shape[-1] == 64 and x.ndim <= 2 or x.shape[-3:] == (1, 8, 8))):
                key = (x.data_ptr(), x.numel(), x.dtype, x._version)
                if key != self._last[1:]:      # a model's layers see its input again;
                    self._last = (x, *key)     # held, so no new tensor reuses its memory
                    self.seen |= _rows(x.detach().to("cpu", torch.float32).numpy())

    @property
    def foreign(self) -> int:
        """Training examples outside this worker's shard that its models ran on."""
        return len((self.seen & self._train) - self._own)

    @property
    def own(self) -> int:
        """Examples of this worker's shard that its models ran on."""
        return len(self.seen & self._own)

    def __enter__(self) -> "ExamplesSeen":
        self._handle = nn.modules.module.register_module_forward_pre_hook(self._look)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handle.remove()
        self._last = ()
