"""Lesson 03's Hogwild! worker as the paper writes it: what the lesson prints.

``engine.hogwild_loop`` (one process of a run) runs the same loop and also waits at a
barrier, delays steps on purpose, snapshots θ for the loss curve and records every read and
write; ``tests/hogwild/test_textbook.py`` runs both and gets the same θ.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np

from ddl_lab.hogwild.engine import Problem

__all__ = ["hogwild_loop"]


def hogwild_loop(theta: np.ndarray, problem: Problem, rows: np.ndarray, lr: float,
                 lock: Any = None) -> None:
    """One Hogwild! worker: an SGD step for each of its examples, straight on the shared θ,
    nobody waits. With a ``lock``, each read-compute-write holds it (the locked baseline)."""
    for i in rows:
        with lock or nullcontext():
            cols, step = problem.step(theta, i, lr)      # read θ (sparse: a few coordinates)
            theta[cols] -= step                          # write them back
