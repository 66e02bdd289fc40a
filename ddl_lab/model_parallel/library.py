"""The same pipeline with ``torch.distributed.pipelining`` (lesson 09), beside the hand one.

Each rank wraps its stage (the same cut of the same model as ``pipeline.pipeline_run``)
in a ``PipelineStage`` and lets one of the library's schedules (``ScheduleGPipe``,
``Schedule1F1B``) drive it: the first stage calls ``schedule.step(x)``, the last
``schedule.step(target=y, losses=...)``, the others ``schedule.step()``. The library
computes the loss per micro-batch and divides the gradients by m (``scale_grads``), which
equals the un-pipelined mean loss when m divides the batch. Its 1F1B refuses fewer
micro-batches than stages ("Number of microbatches (1) must be greater than or equal to
the number of stages (2)").
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.model_parallel.pipeline import StageRun, sgd_update, stage_params
from ddl_lab.model_parallel.stages import build_layers, cut, digits_batches, group, pad_stage

__all__ = ["LIBRARY_SCHEDULES", "library_run"]

LIBRARY_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}


def library_run(kind: str = "mlp", p: int = 2, m: int = 4, schedule: str = "gpipe",
                steps: int = 1, batch: int = 32, lr: float = 0.1, pad: float = 0.0,
                seed: int = 0, hidden: int = 64) -> StageRun | None:
    """Worker function: ``pipeline_run``'s training with torch's own pipeline schedules.

    Same arguments (``schedule`` 'gpipe' or '1f1b'); ranks from p on return None.
    """
    from torch.distributed import pipelining
    if schedule not in LIBRARY_SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: use one of {list(LIBRARY_SCHEDULES)}")
    if batch % m:
        raise ValueError(f"torch's schedules average m = {m} micro-batch losses: use a batch "
                         f"that m divides (got {batch}) to equal the un-pipelined step")
    rank = dist.get_rank()
    g = group(list(range(p)))
    if rank >= p:
        return None
    stage = pad_stage(cut(build_layers(kind, hidden, seed), p)[rank], pad)
    pstage = pipelining.PipelineStage(stage, rank, p, torch.device("cpu"), group=g)
    make = getattr(pipelining, LIBRARY_SCHEDULES[schedule])
    sched = make(pstage, m, loss_fn=nn.CrossEntropyLoss(), scale_grads=True)
    run = StageRun(rank, p, m, f"torch {schedule}")
    for X, y in digits_batches(batch, steps, seed):
        losses: list[torch.Tensor] = []
        dist.barrier(group=g)
        t0 = time.perf_counter()
        if rank == 0 and p > 1:
            sched.step(X)
        elif rank == p - 1:
            sched.step(*([X] if p == 1 else []), target=y, losses=losses)
        else:
            sched.step()
        run.step_times.append(time.perf_counter() - t0)
        if losses:
            run.losses.append(float(torch.stack(losses).detach().mean()))
        sgd_update(stage, lr)
    run.params = stage_params(stage)
    return run
