"""A small training loop that records loss and wall time per step (lesson 01; reused by all).

``train(model, ds, ...)`` runs mini-batch training of a torch model and returns a
``History``: one loss and one wall-clock time per step, the numbers every lesson's
plots use. ``History.log`` also serves numpy loops (``optim.batch_gd(..., record=...)``).
"""
from __future__ import annotations

from time import perf_counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import nn

from ddl_lab.ml.data import Dataset, SparseDataset

__all__ = ["History", "train", "evaluate_accuracy", "loss_function", "plot_histories"]


@dataclass
class History:
    """Per step: ``loss`` and ``time`` (seconds since ``start()``); per epoch: ``epoch_end``
    (the step count at the end of each epoch); ``loss0`` the loss before the first step."""

    loss: list[float] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    epoch_end: list[int] = field(default_factory=list)
    loss0: float | None = None
    t0: float = field(default_factory=perf_counter, repr=False)

    def start(self) -> "History":
        self.t0 = perf_counter()
        return self

    def log(self, loss: float) -> None:
        self.loss.append(float(loss))
        self.time.append(perf_counter() - self.t0)

    def end_epoch(self) -> None:
        self.epoch_end.append(len(self.loss))

    def __len__(self) -> int:
        return len(self.loss)

    @property
    def wall_time(self) -> float:
        """Seconds from start to the last step."""
        return self.time[-1] if self.time else 0.0

    def step_times(self) -> np.ndarray:
        """Seconds each step took."""
        return np.diff(np.concatenate([[0.0], self.time]))

    def epochs(self) -> np.ndarray:
        """The (fractional) epoch at the end of each step."""
        ends = [0] + self.epoch_end
        return np.interp(np.arange(1, len(self) + 1), ends, np.arange(len(ends)))


def plot_histories(histories: dict[str, History], x: str = "step", ax=None,
                   logy: bool = True, baseline: float = 0.0, alpha: float = 0.9,
                   title: str | None = None):
    """Loss curves of several runs on one axis; x is 'step', 'epoch' or 'time' (seconds).

    With ``baseline`` (the optimum J*), the excess loss J − J* is drawn."""
    import matplotlib.pyplot as plt
    if x not in ("step", "epoch", "time"):
        raise ValueError(f"x must be 'step', 'epoch' or 'time', got {x!r}")
    ax = ax or plt.gca()
    for label, h in histories.items():
        xs = {"step": np.arange(1, len(h) + 1), "epoch": h.epochs(),
              "time": np.asarray(h.time)}[x]
        ys = np.asarray(h.loss) - baseline
        if h.loss0 is not None:
            xs, ys = np.concatenate([[0.0], xs]), np.concatenate([[h.loss0 - baseline], ys])
        ax.plot(xs, ys, label=label, alpha=alpha, lw=1.2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel({"step": "update", "epoch": "epoch (passes over the data)",
                   "time": "wall time (s)"}[x])
    ax.set_ylabel("loss − J*" if baseline else "loss")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return ax


def loss_function(kind: str | Callable) -> Callable:
    """'mse' (½ mean squared error, Jamshidi's lecture's J), 'bce' (binary, logits), 'ce' (classes)."""
    if callable(kind):
        return kind
    losses = {"mse": lambda out, y: 0.5 * nn.functional.mse_loss(out, y),
              "bce": nn.functional.binary_cross_entropy_with_logits,
              "ce": nn.functional.cross_entropy}
    if kind not in losses:
        raise ValueError(f"unknown loss {kind!r}: use one of {sorted(losses)} or a callable")
    return losses[kind]


def train(model: nn.Module, ds: Dataset | SparseDataset, loss: str | Callable = "ce",
          optimizer: object | None = None, lr: float = 0.1, epochs: int = 1,
          batch_size: int = 32, seed: int = 0, history: History | None = None) -> History:
    """Mini-batch training; returns the ``History`` (mini-batch loss per step).

    ``optimizer`` is any object with ``zero_grad()``/``step()`` (a ``torch.optim``
    optimiser or ``optim.TorchOptimizer``); by default plain SGD with ``lr``. The data
    are reshuffled every epoch with a generator seeded by ``seed``.
    """
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1, got {epochs}, {batch_size}")
    X, y = ds.tensors()
    fn = loss_function(loss)
    opt = optimizer if optimizer is not None else torch.optim.SGD(model.parameters(), lr=lr)
    hist = (history or History()).start()
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=gen)
        for lo in range(0, len(y), batch_size):
            batch = order[lo:lo + batch_size]
            opt.zero_grad()
            out = fn(model(X[batch]), y[batch])
            out.backward()
            opt.step()
            hist.log(out.item())
        hist.end_epoch()
    return hist


@torch.no_grad()
def evaluate_accuracy(model: nn.Module, ds: Dataset | SparseDataset) -> float:
    """Fraction of examples classified correctly (argmax of logits; sign for one logit)."""
    X, y = ds.tensors()
    was_training = model.training
    model.eval()
    out = model(X)
    model.train(was_training)
    pred = (out > 0).to(y.dtype) if out.dim() == 1 else out.argmax(dim=1)
    return float((pred == y).float().mean())
