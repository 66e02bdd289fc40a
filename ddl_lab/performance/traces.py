"""Real profiler traces of every rank, merged into one and read (lesson 13, §3).

Each rank runs a training step of lesson 12's GPT under ``torch.profiler`` and writes its
Chrome-trace JSON (``profiled_steps``): a **DDP step**, whose reducer launches each
bucket's allreduce from a backward hook as soon as the bucket is full, or a **hand step**
that allreduces the same kind of buckets only after backward has finished (lesson 05's
synchronous SGD). ``merge_traces`` puts the ranks' files into one trace, one process per
rank on one time axis (the ranks share this machine's monotonic clock), which Perfetto
(ui.perfetto.dev) and chrome://tracing open.

What a trace holds, on this torch with gloo (read from real traces, not assumed):

- ``autograd::engine::evaluate_function: …`` (cat ``cpu_op``), on the thread that called
  ``backward``: the backward pass's work, one event per autograd node;
- ``gloo:all_reduce`` (cat ``user_annotation``), on gloo's own threads
  (``pt_gloo_runloop``, two of them, so two collectives can run at once): the collective
  itself, from the moment gloo starts it to the moment it is done;
- ``c10d::allreduce_`` (cat ``cpu_op``), on the calling thread: the launch — the tensor
  handed to the process group — not the communication.

Reading a trace (``summary``): per rank, the collectives' time is the length of the union
of the ``gloo:all_reduce`` intervals; the part of it under the union of the backward
events is hidden; the overlap share is hidden ÷ collective time and the exposed part is
collective − hidden (lesson 11's φ is the hidden share of what could be hidden,
``phi``).
"""
from __future__ import annotations

import json
import os
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
import torch.distributed as dist

from ddl_lab.ml.gpt import GPT, GPTConfig, lm_loss
from ddl_lab.ml.profiling import quiet_stderr
from ddl_lab.timeline import Timeline

__all__ = ["TRACE_MODEL", "COLLECTIVE", "BACKWARD", "LAUNCH", "profiled_steps",
           "merge_traces", "load", "ranks", "events", "intervals", "union", "timelines",
           "collective_durations", "alpha_beta", "summary", "phi"]

TRACE_MODEL = GPTConfig(vocab=64, seq=32, hidden=64, heads=4, layers=2)
COLLECTIVE = "gloo:all_reduce"
BACKWARD = "autograd::engine::evaluate_function"
LAUNCH = "c10d::allreduce_"
Interval = tuple[float, float]


def _hand_sync(params: list[torch.nn.Parameter], bucket_bytes: int, world: int) -> list[int]:
    """The hand step's communication, after backward: the gradients, in the order backward
    produced them (the parameters reversed), allreduced bucket by bucket; the buckets' bytes."""
    from ddl_lab.ring_allreduce.buckets import bucket_indices
    order = params[::-1]
    sizes = []
    for idx in bucket_indices([p.numel() * p.element_size() for p in order], bucket_bytes):
        flat = torch.cat([order[i].grad.reshape(-1) for i in idx])
        dist.all_reduce(flat)
        flat /= world
        offset = 0
        for i in idx:
            order[i].grad.copy_(flat[offset:offset + order[i].numel()].view_as(order[i]))
            offset += order[i].numel()
        sizes.append(flat.numel() * flat.element_size())
    return sizes


def profiled_steps(outdir: str, mode: str = "ddp", bucket_mb: float = 0.1,
                   cfg: GPTConfig = TRACE_MODEL, batch: int = 4, steps: int = 1,
                   warmup: int = 2, seed: int = 0) -> dict[str, Any]:
    """Worker: ``warmup`` steps, then ``steps`` training steps of ``GPT(cfg)`` on this rank's
    ``batch`` sequences under ``torch.profiler`` (CPU), ``mode`` 'ddp' (DDP with buckets of
    ``bucket_mb`` MB) or 'hand' (allreduce in buckets of that size after backward); the
    trace written to ``outdir/rank<r>.json``. Returns the path, the buckets' bytes (in the
    order they are reduced), the world size, the seconds of the profiled steps and the best
    seconds of a warm-up step (no profiler)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.profiler import ProfilerActivity, profile, record_function
    if mode not in ("ddp", "hand"):
        raise ValueError(f"mode must be 'ddp' or 'hand', got {mode!r}")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = GPT(cfg, seed)
    net = DDP(model, bucket_cap_mb=bucket_mb) if mode == "ddp" else model
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.01)
    g = torch.Generator().manual_seed(seed + 1 + rank)
    x, y = (torch.randint(0, cfg.vocab, (batch, cfg.seq), generator=g) for _ in range(2))
    buckets: list[int] = []

    def step(mark: bool) -> None:
        nonlocal buckets
        label = record_function if mark else (lambda name: nullcontext())
        opt.zero_grad(set_to_none=False)
        with label("forward"):
            loss = lm_loss(net(x), y)
        with label("backward"):
            loss.backward()
        if mode == "hand":
            with label("allreduce"):
                buckets = _hand_sync(params, int(bucket_mb * 2 ** 20), world)
        with label("optimizer"):
            opt.step()
    unprofiled = []
    for _ in range(warmup):
        t0 = time.perf_counter()
        step(False)
        unprofiled.append(time.perf_counter() - t0)
    dist.barrier()
    t0 = time.perf_counter()
    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step(True)
    seconds = time.perf_counter() - t0
    if mode == "ddp":
        from ddl_lab.scaling_out.ddp import bucket_sizes
        buckets = bucket_sizes(net)
    path = os.path.join(outdir, f"rank{rank}.json")
    prof.export_chrome_trace(path)
    return {"path": path, "buckets": buckets, "world": world, "seconds": seconds,
            "step": min(unprofiled, default=float("nan")), "mode": mode, "bucket_mb": bucket_mb}


def merge_traces(paths: Sequence[str | os.PathLike], out: str | os.PathLike) -> str:
    """One Chrome trace from the ranks' files (``paths[r]`` is rank r's): every event of
    rank r gets ``pid`` r, named "rank r", its times shifted by the difference of the files'
    ``baseTimeNanoseconds`` so all ranks share one axis; the path of the trace written."""
    traces = [json.loads(Path(p).read_text()) for p in paths]
    bases = [t.get("baseTimeNanoseconds", 0) for t in traces]
    merged: list[dict] = []
    for r, (trace, base) in enumerate(zip(traces, bases)):
        shift = (base - min(bases)) / 1000.0
        merged += [{"ph": "M", "name": "process_name", "pid": r, "tid": 0,
                    "args": {"name": f"rank {r}"}},
                   {"ph": "M", "name": "process_sort_index", "pid": r, "tid": 0,
                    "args": {"sort_index": r}}]
        for e in trace.get("traceEvents", []):
            if e.get("ph") == "M" and e.get("name", "").startswith("process_"):
                continue
            e = dict(e, pid=r)
            if "ts" in e:
                e["ts"] = float(e["ts"]) + shift
            merged.append(e)
    info = [t.get("distributedInfo", {}) for t in traces]
    Path(out).write_text(json.dumps({"traceEvents": merged, "displayTimeUnit": "ms",
                                     "otherData": {"ranks": len(traces),
                                                   "distributedInfo": info}}))
    return str(out)


def load(trace: str | os.PathLike | dict) -> dict:
    """A trace as a dict (given a path, or already loaded)."""
    return trace if isinstance(trace, dict) else json.loads(Path(trace).read_text())


def ranks(trace: str | os.PathLike | dict) -> list[int]:
    """The pids of a merged trace's processes, in order (one per rank)."""
    return sorted({e["pid"] for e in load(trace)["traceEvents"] if isinstance(e.get("pid"), int)})


def events(trace: str | os.PathLike | dict, rank: int, prefix: str) -> list[dict]:
    """Complete ("X") events of ``rank`` whose name starts with ``prefix``."""
    return [e for e in load(trace)["traceEvents"] if e.get("pid") == rank and
            e.get("ph") == "X" and e.get("name", "").startswith(prefix)]


def intervals(evs: Iterable[dict]) -> list[Interval]:
    """(start, end) in µs of each event."""
    return [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in evs]


def union(iv: Iterable[Interval], gap: float = 0.0) -> list[Interval]:
    """The intervals merged where they overlap or touch (or lie less than ``gap`` apart),
    sorted."""
    out: list[Interval] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1] + gap:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _length(iv: Iterable[Interval]) -> float:
    return sum(b - a for a, b in iv)


def _common(x: list[Interval], y: list[Interval]) -> float:
    """Length of the intersection of two unions of intervals (each sorted, disjoint)."""
    total, i, j = 0.0, 0, 0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        total += max(0.0, hi - lo)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def summary(trace: str | os.PathLike | dict, collective: str = COLLECTIVE,
            backward: str = BACKWARD) -> list[dict]:
    """The course's reading of a merged trace, one dict per rank: ``collective`` seconds
    (the union of the collectives' intervals), ``backward`` seconds (the union of the
    backward's events), ``hidden`` (their intersection), ``overlap`` = hidden ÷ collective
    (0 with no collective), ``exposed`` = collective − hidden, and ``count``, the collectives."""
    t = load(trace)
    rows = []
    for r in ranks(t):
        coll = union(intervals(events(t, r, collective)))
        back = union(intervals(events(t, r, backward)))
        c, hidden = _length(coll) / 1e6, _common(coll, back) / 1e6
        rows.append({"rank": r, "collective": c, "backward": _length(back) / 1e6,
                     "hidden": hidden, "overlap": hidden / c if c > 0 else 0.0,
                     "exposed": c - hidden, "count": len(events(t, r, collective))})
    return rows


def phi(trace: str | os.PathLike | dict) -> float:
    """Lesson 11's overlap φ read from a trace: the hidden share of what could be hidden,
    hidden ÷ min(collective, backward), averaged over the ranks."""
    rows = summary(trace)
    return sum(r["hidden"] / max(1e-12, min(r["collective"], r["backward"])) for r in rows) \
        / len(rows)


def collective_durations(trace: str | os.PathLike | dict) -> list[list[float]]:
    """Per rank, the seconds of each collective, in the order they started."""
    t = load(trace)
    return [[(b - a) / 1e6 for a, b in sorted(intervals(events(t, r, COLLECTIVE)))]
            for r in ranks(t)]


def alpha_beta(buckets: Sequence[int], world: int, alpha: float, beta: float,
               steps: int = 1) -> list[float]:
    """The α–β model's seconds of each collective a trace of ``steps`` steps holds: a ring
    allreduce of each bucket (lesson 06, ``runtime.costs.ring_time``), in order."""
    from ddl_lab.runtime.costs import ring_time
    return [ring_time(world, b, alpha, beta) for b in buckets] * steps


def timelines(trace: str | os.PathLike | dict, gap: float = 30.0) -> list[Timeline]:
    """The merged trace as the course's per-rank ``Timeline``s (``ddl_lab.timeline``), in
    seconds from the trace's first event: the step's ``forward`` and ``update`` (the
    profiled step's annotations), ``backward`` (the union of its events) and ``communicate``
    (the collectives), which ``plot_timeline`` draws in the lower lane of each row; gaps
    under ``gap`` µs inside a kind are closed, so backward's hundreds of events read as one
    bar where nothing else ran."""
    t = load(trace)
    stamps = [float(e["ts"]) for e in t["traceEvents"] if e.get("ph") == "X"]
    origin = min(stamps, default=0.0)
    out = []
    for r in ranks(t):
        tl = Timeline(rank=r)
        for kind, evs in (("forward", events(t, r, "forward")),
                          ("backward", events(t, r, BACKWARD)),
                          ("update", events(t, r, "optimizer")),
                          ("communicate", events(t, r, COLLECTIVE))):
            for a, b in union(intervals(e for e in evs if e.get("cat") != "cpu_op" or
                                        kind == "backward"), gap):
                tl.add(kind, (a - origin) / 1e6, (b - origin) / 1e6)
        out.append(tl)
    return out
