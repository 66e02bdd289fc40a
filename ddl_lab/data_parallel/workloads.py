"""What every rank of lesson 05 trains and records: named workloads (the same model on
every rank: ``ml.workloads``, which later lessons use too), a straggler, the per-rank ``Run``
record, and which examples each step uses.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from torch import nn

from ddl_lab.ml.workloads import WORKLOADS, Workload, build
from ddl_lab.timeline import Timeline

__all__ = ["Workload", "WORKLOADS", "build", "Straggler", "Run", "batch_indices",
           "local_batch", "sgd_update"]


@dataclass(frozen=True)
class Straggler:
    """Rank ``rank`` computes ``factor``× slower than the others (``factor`` >= 1)."""

    rank: int
    factor: float

    def __post_init__(self) -> None:
        if self.factor < 1:
            raise ValueError(f"a straggler is slower: factor must be >= 1, got {self.factor}")

    def describe(self) -> str:
        """What the straggler emulates, for printouts and plots."""
        return (f"emulated straggler: rank {self.rank} sleeps {self.factor - 1:g}× its compute "
                f"time ({self.factor:g}× slower)")

    def delay(self, rank: int, seconds: float) -> None:
        """Sleep so that ``seconds`` of compute on the straggler take ``factor``× as long."""
        if rank == self.rank and self.factor > 1:
            time.sleep((self.factor - 1) * seconds)


@dataclass
class Run:
    """What one rank recorded in a training run (lesson 05).

    ``loss``/``time``: this rank's minibatch loss and training clock (seconds, evaluation
    excluded) after each step; ``evals``: (step, clock, communication rounds, loss of the
    global model on the whole training set) at every synchronisation; ``spread``: how far
    the replicas had drifted apart before each averaging (RMS distance to their mean);
    ``params``: the final parameters; ``straggler``: the rank slowed down by sleeping, if
    any (``emulated`` says so).
    """

    rank: int
    loss: list[float] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    evals: list[tuple[int, float, int, float]] = field(default_factory=list)
    rounds: int = 0
    served: int = 0
    spread: list[float] = field(default_factory=list)
    timeline: Timeline = field(default_factory=Timeline)
    params: torch.Tensor | None = None
    straggler: Straggler | None = None

    @property
    def emulated(self) -> str:
        """'' if every rank computed at its own speed, else what the sleeping emulates."""
        return self.straggler.describe() if self.straggler and self.straggler.factor > 1 else ""



def batch_indices(shard_size: int, batch: int, steps: int, seed: int, rank: int) -> torch.Tensor:
    """(steps, batch) example indices into a rank's shard, fixed by (seed, rank)."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randint(shard_size, (steps, batch), generator=g)


def local_batch(batch: int, n: int) -> int:
    """M/R: each rank's share of the global mini-batch M (which must divide by R)."""
    if batch % n:
        raise ValueError(f"the global mini-batch M={batch} must divide by the world size "
                         f"R={n} (each rank takes M/R examples); try M={batch - batch % n}")
    return batch // n




@torch.no_grad()
def sgd_update(model: nn.Module, lr: float) -> None:
    """Plain SGD, p ← p − lr·∇p (no torch.optim: its first use costs seconds of imports)."""
    for p in model.parameters():
        p -= lr * p.grad
