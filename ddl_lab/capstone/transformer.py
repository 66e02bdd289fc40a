"""Lesson 15, part 2: the course's transformer on 4 ranks, to a target held-out loss, under a
memory budget per rank, a byte budget per step and a step budget — measured, not declared.

A *plan* runs on every rank, as in part 1::

    def my_plan(model, batches, wire):
        for x, y in batches:     # this rank's mini-batches: `batch` windows of text each
            ...                  # forward, backward, talk (dist.*, wire.*, FSDP2, DDP), step
        return model             # the trained GPT, whole and the same on every rank

``model`` is ``ml.gpt.GPT(MODEL)`` (the lesson-12 transformer, wider and deeper: 0.81 M
parameters, so that Adam's state, not the activations, is most of what a rank holds),
the same initial weights on every rank. ``measure_gpt(plan)`` runs it on ranks 0…3 of the
warm cluster and returns a ``GPTResult``: the held-out loss of the model the ranks end
with (text the plan never sees), each rank's peak memory (``capstone.memory``), the bytes
each put on the wire (``capstone.wire``'s meter), the steps, the wall time and the
training-loss curve; every channel past the meter is closed or recorded
(``capstone.channels``), and the text each rank's modules ran on is checked against the
mini-batches the meter handed out (``TokensSeen``).

How the budgets were chosen (``BRIEF``; measured by this meter on a 2-core machine, torch
2.13, fp32; a peak moves by up to 3 MiB from run to run, as gloo's temporary buffers
overlap the plan's own differently):

- **memory**: plain data parallelism with AdamW peaks at 17.3–20.4 MiB per rank with torch's
  DDP (parameters 3.1 MiB, gradients 3.1, Adam's two moments 6.2, DDP's buckets 3.1, then
  activations) and 18.6 MiB summing one flat gradient by hand; ZeRO-2 by hand (AdamW on a
  quarter of the parameters, each block's gradients reduce-scattered as soon as backward
  has made them, blocks recomputed in backward) peaks at 8.9–12.1 MiB. The budget, 15.0
  MiB, is 13 % under DDP's lowest peak and 24 % over ZeRO-2's highest.
- **bytes**: data parallelism sends 4.86 MB per step per rank (2(n−1)/n of the 3.24 MB
  gradient; ZeRO-2's reduce-scatter and all-gather the same); ZeRO-3 without care, 7.32 MB
  (every block gathered for forward and again for backward). The budget: 1.25× data
  parallelism's, 6.07 MB.
- **steps and target**: data parallelism on 4 ranks reaches a held-out loss of 2.75 after
  50 steps of 4 windows per rank and 2.64–2.68 after 100 (run seeds 0–4, the batches drawn
  from the seed, the initial weights always seed 0's); one rank alone, with a quarter of
  the text per step, is at 2.76–2.99 after 100. The target, 2.72, and the budget, 100
  steps, sit between, 0.04 from either side.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddl_lab.capstone.budget import size_text
from ddl_lab.capstone.channels import Touch, sealed
from ddl_lab.capstone.memory import PeakMeter
from ddl_lab.capstone.meter import PlanFailed, RankReport, Ranks, _charged, tampered_with
from ddl_lab.capstone.wire import Wire, metered
from ddl_lab.ml.gpt import GPT, GPTConfig, lm_loss
from ddl_lab.ml.models import flat_params
from ddl_lab.ml.text import VOCAB, corpus

__all__ = ["MODEL", "Brief", "BRIEF", "GPTBatches", "TokensSeen", "GPTReport", "GPTResult",
           "measure_gpt", "initial_gpt", "held_out_loss"]

MODEL = GPTConfig(vocab=VOCAB, seq=32, hidden=128, heads=4, layers=4)
MiB = 2 ** 20


@dataclass(frozen=True)
class Brief:
    """Train ``GPT(MODEL)`` on ``world_size`` ranks to a held-out loss ≤ ``target`` (nats per
    character), each rank holding at most ``memory`` bytes at once, sending at most
    ``bytes_per_step`` per step on average, drawing at most ``steps`` mini-batches of
    ``batch`` windows, in at most ``seconds`` (generous: a busy machine must not decide)."""

    world_size: int = 4
    target: float = 2.72
    memory: float = 15.0 * MiB
    bytes_per_step: float = 6.07e6
    steps: int = 100
    batch: int = 4
    seconds: float = 240.0

    def __str__(self) -> str:
        return (f"held-out loss ≤ {self.target:.2f} on {self.world_size} ranks, ≤ "
                f"{self.memory / MiB:.1f} MiB per rank, ≤ {size_text(self.bytes_per_step)} "
                f"sent per step, ≤ {self.steps} steps of {self.batch} windows per rank, "
                f"≤ {self.seconds:g} s")


BRIEF = Brief()


def initial_gpt(seed: int = 0) -> GPT:
    """The transformer every rank starts from (the same weights for the same ``seed``; the
    meter always starts from seed 0's, so that a run's seed moves only its batches)."""
    return GPT(MODEL, seed)


@functools.lru_cache(maxsize=1)
def _held_out() -> tuple[torch.Tensor, torch.Tensor]:
    return corpus().windows(64, MODEL.seq, "val")


@torch.no_grad()
def held_out_loss(model: nn.Module) -> float:
    """Mean next-character cross-entropy of ``model`` on 64 fixed windows of the held-out
    text (the last 10 % of the corpus): no plan ever draws them."""
    x, y = _held_out()
    was = model.training
    model.eval()
    try:
        return float(lm_loss(model(x), y))
    finally:
        model.train(was)


class GPTBatches:
    """This rank's mini-batches ((b, s) int64 inputs and next-character targets), drawn
    from the training text with a seed of this rank's: at most ``steps`` in all. As each is
    handed out the memory meter hears of it; ``handed`` keeps them; ``curve`` is the
    training loss of the first logits computed on each (``TokensSeen``)."""

    def __init__(self, brief: Brief, seed: int, on_draw: Callable[[int], None]):
        self.steps, self.batch = brief.steps, brief.batch
        self.drawn = 0
        self.handed: list[torch.Tensor] = []
        self._data = corpus().train
        self._gen = torch.Generator().manual_seed(seed)
        self._on_draw = on_draw

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        s = MODEL.seq
        while self.drawn < self.steps:
            self._on_draw(self.drawn)
            starts = torch.randint(0, len(self._data) - s - 1, (self.batch,), generator=self._gen)
            window = self._data[starts[:, None] + torch.arange(s + 1)]
            self.drawn += 1
            self.handed.append(window)
            yield window[:, :-1].clone(), window[:, 1:].clone()

    def __repr__(self) -> str:
        return (f"GPTBatches({self.steps} steps of {self.batch} windows of {MODEL.seq} "
                f"characters, {self.drawn} drawn)")


class TokensSeen:
    """While inside: the rows of characters every module of this rank ran on (an int64
    input of shape (b, m), m ≤ the model's sequence), and the curve: the training loss of
    the first logits computed on each mini-batch handed out — read where every forward of
    the GPT ends, at its final LayerNorm (``model.ln_f``), through the tied head."""

    def __init__(self, batches: GPTBatches, model: GPT):
        self.rows: set[bytes] = set()
        self.curve: list[tuple[int, float]] = []
        self._batches, self._model = batches, model
        self._handles: list[Any] = []

    def _look(self, module: nn.Module, args: tuple) -> None:
        for x in args:
            if isinstance(x, torch.Tensor) and x.dtype == torch.long and x.ndim == 2 \
                    and 0 < x.shape[1] <= MODEL.seq:
                self.rows |= {r.tobytes() for r in x.detach().cpu().numpy()}

    def _logits(self, module: nn.Module, args: tuple, out: Any) -> None:
        b, tok = self._batches, self._model.tok.weight
        if not (isinstance(out, torch.Tensor) and out.ndim == 3 and b.handed
                and (not self.curve or self.curve[-1][0] < b.drawn)
                and tok.numel() and out.shape[-1] == tok.shape[-1]):
            return
        y = b.handed[-1][:, 1:]
        if out.shape[:2] == y.shape:
            with torch.no_grad():
                logits = F.linear(out.detach().float(), tok.detach().float())
                self.curve.append((b.drawn, float(F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))))

    def __enter__(self) -> "TokensSeen":
        self._handles = [nn.modules.module.register_module_forward_pre_hook(self._look),
                         self._model.ln_f.register_forward_hook(self._logits)]
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self._handles:
            h.remove()


def _unhanded(seen: set[bytes], handed: list[torch.Tensor]) -> int:
    """Rows a rank ran on that are no slice of any window the meter handed out (to any
    rank): text the plan fetched itself."""
    rows = [w.numpy() for batch in handed for w in batch]
    by_length: dict[int, set[bytes]] = {}
    count = 0
    for row in seen:
        m = len(row) // 8
        if m not in by_length:
            by_length[m] = {r[i:i + m].tobytes() for r in rows for i in range(len(r) - m + 1)}
        count += row not in by_length[m]
    return count


@dataclass
class GPTReport(RankReport):
    """What the meter saw on one rank (lesson 15, part 2): beside the wire, its peak memory
    (and each window's), the held-out loss of the model it returned, the curve, the rows
    of text its modules ran on, the windows handed to it, what it touched past the meter."""

    peak: int
    peak_start: int
    peak_later: int
    later_step: int
    params: np.ndarray | None
    loss: float | None
    returned: str
    curve: list[tuple[int, float]]
    seen: set[bytes] = field(repr=False, default_factory=set)
    handed: list[torch.Tensor] = field(repr=False, default_factory=list)
    touched: tuple[Touch, ...] = ()
    unhanded: int = 0
    tampered: float | None = None   # what the meter saw go out, if the plan changed its count


def _returned(out: Any) -> tuple[nn.Module | None, str]:
    """The whole model a plan returned (unwrapped from DDP), or what came back instead."""
    if isinstance(out, nn.parallel.DistributedDataParallel):
        out = out.module
    if isinstance(out, GPT) and not any(hasattr(p, "to_local") for p in out.parameters()):
        return out, ""
    if isinstance(out, nn.Module):
        return None, (f"a {type(out).__name__} holding sharded parameters (DTensor): gather "
                      "them into a whole GPT" if isinstance(out, GPT) else
                      f"a {type(out).__name__}, not the GPT")
    return None, "None" if out is None else f"a {type(out).__name__}"


def _worker(plan: Callable, brief: Brief, seed: int) -> GPTReport:
    """On every rank: its model and batches, the plan run on the metered wire, measured."""
    rank = dist.get_rank()
    later = int(np.random.default_rng([seed, 15]).integers(3, max(4, brief.steps - 1)))
    meter = PeakMeter([corpus().train, corpus().val, *_held_out()], later)
    batches = GPTBatches(brief, 1000 * seed + rank, meter.at_step)
    dist.barrier()
    tally = [0.0]
    with metered(tally) as tap:
        meter.opened()                      # the model is built inside the first window
        model = initial_gpt(0)
        seen = TokensSeen(batches, model)
        t0 = time.perf_counter()
        try:
            with sealed() as touched, seen:
                out = plan(model, batches, Wire(tap))
        finally:
            meter.closed()
            wall = time.perf_counter() - t0
    trained, returned = _returned(out)
    tampered = tampered_with(tap, tally)
    calls, by_op, sizes = _charged(tap)
    return GPTReport(rank, tap.sent, calls, by_op, sizes, batches.drawn, wall, meter.peak,
                     meter.start, meter.later, later,
                     None if trained is None else flat_params(trained).numpy(),
                     None if trained is None else held_out_loss(trained), returned,
                     seen.curve, seen.rows, batches.handed, tuple(touched), 0, tampered)


@dataclass
class GPTResult(Ranks):
    """A plan's run, measured (lesson 15, part 2): rank 0's model's held-out ``loss``, the
    busiest rank's ``bytes_per_step``, the largest ``peak`` memory, the ``steps`` drawn and
    the ``wall`` time of the slowest rank."""

    brief: Brief
    world_size: int
    reports: list[GPTReport] = field(repr=False)

    @property
    def loss(self) -> float:
        got = self.reports[0].loss
        return math.inf if got is None else got

    @property
    def bytes_per_step(self) -> float:
        return self.bytes / max(self.steps, 1)

    @property
    def peak(self) -> int:
        return max(r.peak for r in self.reports)

    @property
    def unhanded(self) -> int:
        return max(r.unhanded for r in self.reports)

    def shortfalls(self) -> list[str]:
        """Each budget missed, the figure beside the budget (empty: within the brief)."""
        b, out = self.brief, []
        if self.loss > b.target:
            out.append(f"held-out loss {self.loss:.3f} > the {b.target:.2f} target")
        if self.peak > b.memory:
            out.append(f"peak memory {self.peak / MiB:.1f} MiB > {b.memory / MiB:.1f} MiB "
                       f"({self.peak / b.memory:.2f}× the budget)")
        if self.bytes_per_step > b.bytes_per_step:
            out.append(f"{size_text(self.bytes_per_step)} sent per step > "
                       f"{size_text(b.bytes_per_step)} ({self.bytes_per_step / b.bytes_per_step:.2f}× "
                       "the budget)")
        if self.wall > b.seconds:
            out.append(f"{self.wall:.0f} s > {b.seconds:g} s")
        return out

    def summary(self) -> str:
        """One line: loss, memory, bytes, steps, time, and the verdict."""
        if any(r.params is None for r in self.reports):
            return f"{self.world_size} ranks: no whole model came back"
        miss = self.shortfalls()
        return (f"{self.world_size} rank{'s' * (self.world_size > 1)}: held-out loss "
                f"{self.loss:.3f}, peak {self.peak / MiB:.1f} MiB per rank, "
                f"{size_text(self.bytes_per_step)} sent per step, {self.steps} steps, "
                f"{self.wall:.1f} s — "
                + ("within the brief" if not miss else "misses: " + "; ".join(miss)))

    def figures(self, plan: str) -> dict:
        """The numbers the class leaderboard shows (``ddl-lab grade``)."""
        b = self.brief
        curve = self.reports[0].curve
        stride = max(1, len(curve) // 50)
        return {"board": "capstone_gpt", "within": not self.shortfalls() and self.spread < 1e-4,
                "wall_s": round(self.wall, 3), "peak_bytes": self.peak,
                "memory_budget": b.memory, "bytes_per_step": round(self.bytes_per_step),
                "bytes_budget": b.bytes_per_step, "steps": self.steps,
                "steps_budget": b.steps, "time_budget": b.seconds,
                "loss": round(self.loss, 4), "target": b.target,
                "curve": [[s, round(v, 4)] for s, v in curve[::stride]], "plan": plan}


def measure_gpt(plan: Callable, brief: Brief = BRIEF, world_size: int | None = None,
                seed: int = 0, timeout: float = 300.0) -> GPTResult:
    """Run ``plan`` on ``world_size`` ranks (default: the brief's) of the warm shared
    cluster and measure it (``GPTResult``)."""
    from ddl_lab.runtime.worlds import WorldFailed, run_in_world
    n = world_size or brief.world_size
    try:
        reports = run_in_world(_worker, n, plan, brief, seed, fn=plan, timeout=timeout)
    except WorldFailed as e:
        raise PlanFailed(e.failure, getattr(plan, "__name__", "the plan"), n) from None
    handed = [w for r in reports for w in r.handed]
    for r in reports:
        r.unhanded = _unhanded(r.seen, handed)
    return GPTResult(brief, n, reports)
