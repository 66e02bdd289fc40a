"""Lesson 13's panel (§5): pick a model width, a per-rank batch and a world size; one real
DDP step of lesson 12's GPT runs on that many workers with the profiler on, and the merged
timeline, the step's operations on this machine's roofline and each rank's MFU are drawn.

``panel_run(cluster, hidden, batch, world)`` runs on a cluster of at least ``world`` ranks
(``runtime.worlds.in_worlds``: ranks 0…world−1 as their own group), merges the ranks'
traces into one file and reads it (``traces.summary``); the roofline's peak and bandwidth
are measured once per kernel (``measured_roof``), the ops timed in the kernel's process.
What comes back is a ``PanelRun`` for ``plots.figure_panel``.
"""
from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.performance.flops import step_flops
from ddl_lab.performance.roofline import Op, matmul_flop_s, step_ops, stream, threads, time_op
from ddl_lab.performance.traces import TRACE_MODEL, merge_traces, profiled_steps, summary
from ddl_lab.runtime.worlds import in_worlds

__all__ = ["PanelRun", "panel_config", "measured_roof", "panel_run"]


@dataclass
class PanelRun:
    """One panel step: the merged trace's path and reading per rank, the model FLOPs of a
    rank's step, each rank's unprofiled step seconds and MFU, the one-thread float32 peak
    and the copy bandwidth it was measured against, and the step's ops, timed."""

    hidden: int
    batch: int
    world: int
    trace: str
    rows: list[dict]
    flops: float
    seconds: list[float]
    mfu: list[float]
    peak: float
    bandwidth: float
    ops: list[Op]


def panel_config(hidden: int) -> GPTConfig:
    """The panel's model: the traces' GPT (2 layers, 4 heads, 32 tokens) at width ``hidden``."""
    return GPTConfig(vocab=TRACE_MODEL.vocab, seq=TRACE_MODEL.seq, hidden=hidden,
                     heads=TRACE_MODEL.heads, layers=TRACE_MODEL.layers)


@functools.lru_cache(maxsize=1)
def measured_roof() -> tuple[float, float]:
    """(float32 matmul FLOP/s on one thread, STREAM copy bytes/s), measured once here."""
    with threads(1):
        return matmul_flop_s(384, repeats=3), stream(16 << 20, repeats=3)["copy"]


def panel_run(cluster: Any, hidden: int = 64, batch: int = 4, world: int = 2,
              bucket_mb: float = 0.05) -> PanelRun:
    """One profiled DDP step of ``panel_config(hidden)`` at ``batch`` sequences per rank on
    ``world`` ranks of ``cluster``, read and put beside the roofline and the peak."""
    cfg = panel_config(hidden)
    folder = tempfile.mkdtemp(prefix="ddl_lab-panel-")
    per_rank = cluster.run(in_worlds, profiled_steps,
                           [(world, (folder, "ddp", bucket_mb, cfg, batch, 1))])
    runs = [per_rank[r][0] for r in range(world)]
    for out in runs:
        if not isinstance(out, dict):               # a failed case comes back described
            raise RuntimeError(f"the panel's step failed on the workers: {out}")
    trace = merge_traces([o["path"] for o in runs], os.path.join(folder, "merged.json"))
    peak, bandwidth = measured_roof()
    flops = step_flops(cfg, batch)
    seconds = [o["step"] for o in runs]
    with threads(1):
        ops = [time_op(op, repeats=3) for op in step_ops(cfg, batch, world=world)]
    return PanelRun(hidden, batch, world, trace, summary(trace), flops, seconds,
                    [flops / (s * peak) for s in seconds], peak, bandwidth, ops)
