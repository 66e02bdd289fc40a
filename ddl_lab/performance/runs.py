"""The course's own runs, measured against this machine (lesson 13, §2 and §5).

``course_mfu(peak)`` times one training step of each model the course trains — the digits
MLP (lessons 05–11), the digits CNN (the capstone) and lesson 12's GPT — in this process,
and divides its model FLOPs by its seconds and ``peak``: the MLP's and the GPT's counted by
formula (6N per example; 6N + 12·L·h·s per token, ``flops.step_flops``), the CNN's by
``FlopCounterMode`` (a convolution reuses each weight at every position, so 6N does not
apply).

``panel_run`` is §5's panel: one profiled DDP step of a GPT of the chosen width on every
rank of a cluster (``traces.profiled_steps``), the ranks' traces merged, read
(``traces.summary``) and the step's operations timed here for the roofline
(``roofline.step_ops``), with the step's MFU.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.ml.workloads import build
from ddl_lab.performance import flops as F
from ddl_lab.performance import roofline as R
from ddl_lab.performance import traces as Tc

__all__ = ["COURSE_BATCH", "course_mfu", "panel_config", "PanelRun", "panel_run"]

COURSE_BATCH = {"MLP": 64, "CNN": 64, "GPT": 8}      # examples (sequences for the GPT) a step


def _seconds(step: Callable[[], Any], repeats: int) -> float:
    step()                                                  # warm-up
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return best


def _digits_step(workload: str, batch: int) -> tuple[nn.Module, Callable[[], None]]:
    model, train, _, loss_fn = build(workload)
    X, y = train.tensors()
    X, y = X[:batch], y[:batch]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        opt.zero_grad()
        loss_fn(model(X), y).backward()
        opt.step()
    return model, step


def course_mfu(peak: float, repeats: int = 3) -> list[dict]:
    """One row per model (MLP, CNN, GPT): its model FLOPs a training step, how they were
    counted, the best seconds of a step here (forward, backward, optimizer) and the MFU
    against ``peak`` FLOP/s. Run it at the thread count ``peak`` was measured with."""
    rows = []
    mlp, step = _digits_step("digits-mlp", COURSE_BATCH["MLP"])
    n = sum(m.weight.numel() for m in mlp.modules() if isinstance(m, nn.Linear))
    rows.append({"name": "MLP", "flops": 6.0 * n * COURSE_BATCH["MLP"],
                 "how": f"6N per example, N = {n:,}", "seconds": _seconds(step, repeats)})
    _, step = _digits_step("digits-cnn", COURSE_BATCH["CNN"])
    counted = F.counted_flops(step)
    rows.append({"name": "CNN", "flops": float(counted), "how": "FlopCounterMode",
                 "seconds": _seconds(step, repeats)})
    from ddl_lab.transformers.train import MODEL
    b = COURSE_BATCH["GPT"]
    rows.append({"name": "GPT", "flops": F.step_flops(MODEL, b),
                 "how": f"(6N + 12·L·h·s) per token, {b * MODEL.seq} tokens",
                 "seconds": F.timed_step(MODEL, b, repeats)})
    for r in rows:
        r["mfu"] = F.mfu(r["flops"], r["seconds"], peak)
    return rows


def panel_config(hidden: int) -> GPTConfig:
    """The panel's model: the traces' GPT (``traces.TRACE_MODEL``) at width ``hidden``."""
    m = Tc.TRACE_MODEL
    return GPTConfig(vocab=m.vocab, seq=m.seq, hidden=hidden, heads=m.heads, layers=m.layers)


@dataclass
class PanelRun:
    """One profiled DDP step: the merged trace's path, its reading per rank, the step's
    seconds (rank 0, under the profiler), its MFU against the peak, the model's weights in
    matrix products and the step's operations timed here (for the roofline)."""

    trace: str
    summary: list[dict]
    seconds: float
    mfu: float
    params: int
    ops: list[R.Op]

    @property
    def overlap(self) -> float:
        """The ranks' mean overlap share."""
        return sum(r["overlap"] for r in self.summary) / len(self.summary)

    @property
    def exposed(self) -> float:
        """The largest exposed communication of any rank (seconds)."""
        return max(r["exposed"] for r in self.summary)


def panel_run(cluster, folder: str, hidden: int, batch: int, bucket_mb: float,
              peak: float) -> PanelRun:
    """§5's panel: one profiled DDP step of ``panel_config(hidden)`` on every rank of
    ``cluster``, ``batch`` sequences a rank, DDP buckets of ``bucket_mb`` MB; the traces
    merged into a new folder under ``folder``; the MFU of rank 0's step against ``peak``."""
    cfg = panel_config(hidden)
    sub = tempfile.mkdtemp(dir=folder, prefix=f"panel-h{hidden}-b{batch}-")
    runs = cluster.run(Tc.profiled_steps, sub, "ddp", bucket_mb, cfg, batch)
    merged = Tc.merge_traces([r["path"] for r in runs], os.path.join(sub, "merged.json"))
    with R.threads(1):
        ops = [R.time_op(op, 3) for op in R.step_ops(cfg, batch, world=len(runs))
               if op.name in ("matmul", "attention", "LayerNorm", "GELU")]
    seconds = runs[0]["seconds"]
    return PanelRun(merged, Tc.summary(merged), seconds,
                    F.mfu(F.step_flops(cfg, batch), seconds, peak), F.gpt_matmul_params(cfg), ops)
