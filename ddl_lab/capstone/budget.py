"""The capstone's targets and budgets (lesson 15)."""
from __future__ import annotations

from dataclasses import dataclass

from ddl_lab.compression.training import size_text

__all__ = ["Budget", "BUDGET", "size_text"]


@dataclass(frozen=True)
class Budget:
    """Train the digits CNN on ``world_size`` workers to ``target`` test accuracy, each
    worker putting at most ``bytes`` on the wire, drawing at most ``steps`` mini-batches
    of ``batch_size`` of its own shard, in at most ``seconds`` of wall time (judged
    generously: a busy machine must not decide the verdict). ``skew`` is how non-IID the
    shards are (lesson 05: 0 random, 1 sorted by label)."""

    world_size: int = 4
    target: float = 0.94
    bytes: float = 300_000
    steps: int = 150
    batch_size: int = 16
    seconds: float = 60.0
    skew: float = 0.9

    def __str__(self) -> str:
        return (f"≥ {100 * self.target:.0f}% test accuracy on {self.world_size} workers, "
                f"≤ {size_text(self.bytes)} sent per worker, ≤ {self.steps} steps of "
                f"{self.batch_size} examples per worker, ≤ {self.seconds:g} s")


BUDGET = Budget()
