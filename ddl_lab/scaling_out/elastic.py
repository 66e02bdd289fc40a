"""Elastic training: checkpoints, a worker killed mid-run, torchrun restarts it (lesson 11).

``train`` is a worker function (synchronous SGD with momentum on the digits) that writes a
checkpoint every ``every`` steps and, on start, resumes from the last one. Its data order is
a function of the step only — step t uses the global mini-batch drawn from (seed, t), each
rank taking its slice — so a resumed run replays exactly the steps it lost and ends where an
uninterrupted run ends, whatever the world size. ``kill_at`` makes one rank die by SIGKILL
(no Python clean-up: what an out-of-memory kill or a lost machine looks like) in the first
attempt only; ``run_elastic`` runs it under ``torchrun --max-restarts`` and returns the
log of every attempt and the final parameters.

The checkpoint is a plain rank-0 ``torch.save`` of model and optimizer state, written to a
temporary file and renamed (a crash mid-write leaves the previous checkpoint intact). With
DDP every rank holds the same full state, so one copy is all there is to save;
``torch.distributed.checkpoint`` pays off when each rank holds a *different* shard (FSDP,
tensor parallelism): every rank then writes its own piece in parallel.
"""
from __future__ import annotations

import inspect
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ddl_lab.ml.models import flat_grads, flat_params
from ddl_lab.ml.workloads import build
from ddl_lab.runtime import device

from .launch import Job, run_jobs, torchrun_command

__all__ = ["save_checkpoint", "resume", "global_batch", "train", "ElasticRun", "run_elastic",
           "read_log", "QUICK_RDZV"]

# A --nnodes=min:max job waits this long for more nodes once it has its minimum, and
# declares a silent node gone after 2 missed 1-second heartbeats (defaults: 30 s, 3 × 5 s).
QUICK_RDZV = {"last_call_timeout": 1, "keep_alive_interval": 1, "keep_alive_max_attempt": 2}


# ---------------------------------------------------------------- the textbook version

def save_checkpoint(path: str, step: int, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer) -> None:
    """Rank 0 saves the steps done, the model and the optimizer state, atomically."""
    if dist.get_rank() == 0:
        torch.save({"step": step, "model": model.state_dict(),
                    "optimizer": optimizer.state_dict()}, path + ".tmp")
        os.replace(path + ".tmp", path)          # all or nothing, even if killed mid-write


def resume(path: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the last checkpoint, if any; return the number of steps it had done (else 0)."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])    # momentum buffers too
    return state["step"]


# ---------------------------------------------------------------- the training job

def global_batch(seed: int, step: int, batch: int, m: int) -> torch.Tensor:
    """The ``batch`` example indices (out of ``m``) of step ``step``: a function of the
    step only, so a restarted run sees the same data in the same order."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    return torch.randint(m, (batch,), generator=g)


class _Log:
    """Rank 0 appends one JSON line per event to ``log.jsonl`` (it survives a kill)."""

    def __init__(self, folder: str, rank: int):
        self.file = open(os.path.join(folder, "log.jsonl"), "a") if rank == 0 else None

    def __call__(self, **event: Any) -> None:
        if self.file:
            self.file.write(json.dumps({**event, "time": time.time()}) + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file:
            self.file.close()


def _average_gradients(model: torch.nn.Module, n: int) -> None:
    """One allreduce of all gradients, divided by the world size (lesson 05)."""
    g = flat_grads(model)
    dist.all_reduce(g)
    g /= n
    offset = 0
    for p in model.parameters():
        p.grad.copy_(g[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def _die(kill_host: str | None) -> None:
    """SIGKILL this worker; with ``kill_host`` also its torchrun agent: the host is gone."""
    if kill_host and "TORCHELASTIC_RUN_ID" in os.environ:     # the parent is torchrun's agent
        os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def train(folder: str, steps: int = 40, every: int = 5, kill_at: int = -1, kill_rank: int = 1,
          kill_host: str | None = None, batch: int = 64, lr: float = 0.05,
          momentum: float = 0.9, seed: int = 0, workload: str = "digits-mlp") -> dict:
    """Worker: ``steps`` of synchronous SGD (momentum) that checkpoints every ``every`` steps
    in ``folder`` and resumes from it on start (lesson 11). The gradients are averaged with
    one ``all_reduce``, as lesson 05 does: wrapping the model in DDP works the same, but its
    first construction imports torch's compiler, seconds in every restarted process.

    In the first attempt (TORCHELASTIC_RESTART_COUNT 0) rank ``kill_rank`` dies before step
    ``kill_at``; with ``kill_host`` ('a' or 'b', the DDL_LAB_HOST of a VirtualHosts run)
    instead the first local rank of that host kills its agent and itself: the host leaves.
    Rank 0 logs each step's loss and writes the final parameters to ``final.pt``.
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    if batch % n:
        raise ValueError(f"batch {batch} must divide by the world size {n}")
    model, data, _, loss_fn = build(workload, seed)
    dev = device()                               # this rank's GPU under nccl, else the CPU
    model = model.to(dev)
    X, y = (t.to(dev) for t in data.tensors())
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    path = os.path.join(folder, "checkpoint.pt")
    start = resume(path, model, opt)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    dies = (attempt == 0 and (os.environ.get("DDL_LAB_HOST") == kill_host
                              and int(os.environ.get("LOCAL_RANK", 0)) == 0 if kill_host
                              else rank == kill_rank))
    log = _Log(folder, rank)
    log(event="start", attempt=attempt, step=start, world=n)
    loss_sum = torch.zeros(1, device=dev)
    for t in range(start, steps):
        if dies and t == kill_at:
            _die(kill_host)
        idx = global_batch(seed, t, batch, len(y))[rank::n]
        opt.zero_grad()
        loss = loss_fn(model(X[idx]), y[idx])
        loss.backward()
        _average_gradients(model, n)
        opt.step()
        loss_sum[0] = loss.item()
        dist.all_reduce(loss_sum)                # the global mini-batch's loss, for the log
        log(event="step", attempt=attempt, step=t + 1, loss=loss_sum.item() / n, world=n)
        if (t + 1) % every == 0:
            save_checkpoint(path, t + 1, model, opt)
            log(event="checkpoint", attempt=attempt, step=t + 1)
    if rank == 0:
        torch.save(flat_params(model).cpu(), os.path.join(folder, "final.pt"))
    log(event="end", attempt=attempt, step=steps, world=n)
    log.close()
    return {"rank": rank, "attempt": attempt, "resumed_at": start, "world": n}


# ---------------------------------------------------------------- parent side

def read_log(folder: str | os.PathLike) -> list[dict]:
    """The events rank 0 logged, in order, over all attempts."""
    p = Path(folder) / "log.jsonl"
    return [json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()] \
        if p.exists() else []


@dataclass
class ElasticRun:
    """A training job under torchrun: its job(s), its log, its final parameters."""

    jobs: list[Job]
    log: list[dict]
    params: torch.Tensor | None
    folder: str
    options: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max(j.seconds for j in self.jobs)

    @property
    def ok(self) -> bool:
        return self.params is not None and all(j.ok for j in self.jobs[:1])

    def attempts(self) -> list[dict]:
        """One entry per attempt: where it started, how far it got, its world size."""
        out: dict[int, dict] = {}
        for e in self.log:
            a = out.setdefault(e["attempt"], {"attempt": e["attempt"], "start": e["step"],
                                              "last": e["step"], "world": e.get("world")})
            if e["event"] == "step":
                a["last"] = e["step"]
        return [out[k] for k in sorted(out)]

    def checkpoints(self) -> list[int]:
        return [e["step"] for e in self.log if e["event"] == "checkpoint"]


def _collect(jobs: list[Job], folder: str, options: dict) -> ElasticRun:
    for i, job in enumerate(jobs):                # kept beside the log, for a post-mortem
        (Path(folder) / f"torchrun-{i}.err").write_text(job.stderr)
    final = Path(folder) / "final.pt"
    params = torch.load(final, weights_only=True) if final.exists() else None
    return ElasticRun(jobs, read_log(folder), params, folder, options)


def run_elastic(steps: int = 40, every: int = 5, kill_at: int = -1, nproc: int = 2,
                max_restarts: int = 1, restart_safe: bool = True, timeout: float = 90.0,
                folder: str | None = None, **options: Any) -> ElasticRun:
    """``train`` under ``torchrun --standalone --max-restarts`` on this machine (lesson 11).

    ``restart_safe=False`` leaves torchrun's default (the agent's store shared with the
    workers) to show what goes wrong; the workers' init timeout is then 10 s.
    """
    folder = folder or tempfile.mkdtemp(prefix="ddl-elastic-")
    bound = inspect.signature(train).bind(folder, steps, every, kill_at, **options)
    bound.apply_defaults()                       # torchrun passes arguments by position
    args = list(bound.arguments.values())
    cmd = torchrun_command("ddl_lab.scaling_out.elastic:train", *args, nproc=nproc,
                           max_restarts=max_restarts, local_addr="127.0.0.1")
    env = {"GLOO_SOCKET_IFNAME": "lo0" if sys.platform == "darwin" else "lo"}  # loopback only
    if not restart_safe:
        env.update(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="0", DDL_LAB_TIMEOUT="10")
    jobs = run_jobs([cmd], timeout, envs=[env])
    return _collect(jobs, folder, {"steps": steps, "every": every, "kill_at": kill_at,
                                   "nproc": nproc, **options})
