"""Allreduce by hand on torch.distributed point-to-point messages (lesson 06; lesson 05 uses it).

Three ways to sum a tensor over every rank, in place, with ``send/recv/isend/irecv`` only:

- ``reduce_broadcast_allreduce``: every rank sends its tensor to a root, which adds them
  up and sends the sum back: the root moves 2(n−1)·S bytes while the others idle.
- ``tree_allreduce``: a binomial tree, ⌈log2 n⌉ rounds up and ⌈log2 n⌉ rounds down; every
  message carries the whole tensor.
- ``ring_allreduce``: the ring of seed 003 (neighbour (p+1) % n). The tensor is cut into n
  chunks; in the *share-reduce* phase (reduce-scatter) each rank passes one chunk to its
  right neighbour, which adds it to its own, n−1 times, until every rank holds one fully
  reduced chunk; in the *share-only* phase (allgather) the finished chunks travel round
  the ring n−1 more times. Each rank sends 2(n−1)/n·S bytes, whatever n: bandwidth-optimal.
  With ``segments > 1`` each chunk travels in pieces and a piece is forwarded as soon as it
  is reduced (a pipeline).

A ``Recorder`` logs every step of a run on one rank (which chunk it sent to whom, which it
received, the bytes sent, and optionally the data), which the pictures and the checks use.
The α–β model predicts each algorithm's time; ``fit_alpha_beta`` measures α and β here.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.runtime import device

__all__ = ["chunk_bounds", "Step", "Recorder", "ring_allreduce", "tree_allreduce",
           "reduce_broadcast_allreduce", "builtin_allreduce", "ALGORITHMS", "allreduce",
           "ring_bytes", "time_allreduce", "measure_allreduce", "best_of", "ping_pong",
           "fit_alpha_beta", "reduce_cost", "cost_model", "ring_trace", "ring_states",
           "plot_ring_step", "plot_cost_model", "plot_bytes_sent"]


# ---------------------------------------------------------------- recording

@dataclass
class Step:
    """One step of an allreduce on one rank (lesson 06's pictures and checks).

    ``sent``: (chunk, to rank, bytes) for each message sent; ``received``: (chunk, from
    rank); chunk −1 is the whole tensor. ``data``: a copy of the tensor after the step.
    """

    phase: str
    index: int
    sent: list[tuple[int, int, int]] = field(default_factory=list)
    received: list[tuple[int, int]] = field(default_factory=list)
    data: torch.Tensor | None = None

    @property
    def bytes_sent(self) -> int:
        return sum(b for _, _, b in self.sent)


@dataclass
class Recorder:
    """Every step one rank took in an allreduce; ``keep_data`` also copies the tensor."""

    keep_data: bool = False
    rank: int = 0
    initial: torch.Tensor | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank sent over the whole allreduce."""
        return sum(s.bytes_sent for s in self.steps)

    def begin(self, flat: torch.Tensor) -> None:
        self.rank = dist.get_rank()
        self.steps.clear()
        self.initial = flat.detach().clone() if self.keep_data else None

    def log(self, phase: str, sent: list, received: list, flat: torch.Tensor) -> None:
        data = flat.detach().clone() if self.keep_data else None
        self.steps.append(Step(phase, len(self.steps), sent, received, data))


# ------------------------------------------------------------------- helpers

def chunk_bounds(length: int, parts: int) -> list[tuple[int, int]]:
    """Cut ``range(length)`` into ``parts`` contiguous pieces as even as possible.

    The first ``length % parts`` pieces are one element longer (as ``torch.tensor_split``);
    pieces may be empty when ``length < parts``.
    """
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    base, extra = divmod(length, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _setup(tensor: torch.Tensor, name: str) -> tuple[int, int]:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} sums a torch.Tensor in place, got {type(tensor).__name__}")
    if not dist.is_initialized():
        raise RuntimeError(f"{name} needs torch.distributed: run it on a cluster's workers "
                           "(cluster.run(fn)) or under torchrun, not in the notebook itself")
    return dist.get_world_size(), dist.get_rank()


def _flat(tensor: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None]]:
    """A contiguous 1-D view of ``tensor`` and a function that writes it back if needed."""
    if tensor.is_contiguous():
        return tensor.view(-1), lambda: None
    flat = tensor.contiguous().view(-1)
    return flat, lambda: tensor.copy_(flat.view_as(tensor))


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def ring_bytes(world_size: int, nbytes: int) -> float:
    """Bytes each rank sends in a ring allreduce of ``nbytes``: 2(n−1)/n · S (lesson 06)."""
    return 2 * (world_size - 1) / world_size * nbytes


# ------------------------------------------------------------------ the ring

def ring_allreduce(tensor: torch.Tensor, segments: int = 1,
                   record: Recorder | None = None) -> torch.Tensor:
    """Sum ``tensor`` over every rank of the default group, in place (lesson 06).

    Share-reduce, then share-only, around the ring (p+1) % n, with ``isend``/``irecv``
    only, so no rank ever blocks in a send that its neighbour cannot yet receive (no
    deadlock, whatever the size). Any length works: chunks differ by at most one
    element. ``segments`` splits each chunk into pieces that are pipelined. Returns
    ``tensor``.
    """
    n, rank = _setup(tensor, "ring_allreduce")
    if not isinstance(segments, int) or segments < 1:
        raise ValueError(f"segments must be a positive integer, got {segments!r}")
    flat, write_back = _flat(tensor)
    if record is not None:
        record.begin(flat)
    if n == 1:
        return tensor
    right, left = (rank + 1) % n, (rank - 1) % n
    chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), n)]
    pieces = [[c[a:b] for a, b in chunk_bounds(c.numel(), segments)] for c in chunks]
    buffer = torch.empty_like(chunks[0])                    # chunk 0 is the longest
    slots = [buffer[a:b] for a, b in chunk_bounds(buffer.numel(), segments)]
    steps = 2 * (n - 1)
    pending: dict[tuple[int, int], dist.Work] = {}          # sends still reading a piece
    receiving: list[tuple[dist.Work, torch.Tensor, torch.Tensor] | None] = [None] * segments
    snapshots = record is not None and record.keep_data

    def post(s: int, j: int) -> None:
        """Start step s for piece j: receive from the left, send to the right."""
        out_chunk, in_chunk = (rank - s) % n, (rank - s - 1) % n
        out, into = pieces[out_chunk][j], pieces[in_chunk][j]
        receiving[j] = None
        if into.numel():
            earlier = pending.pop((in_chunk, j), None)
            if earlier is not None:          # never overwrite a piece that is still being sent
                earlier.wait()
            target = slots[j][:into.numel()] if s < n - 1 else into
            receiving[j] = (dist.irecv(target, left, tag=s * segments + j), target, into)
        if out.numel():
            pending[(out_chunk, j)] = dist.isend(out, right, tag=s * segments + j)

    for j in range(segments):
        post(0, j)
    for s in range(steps):
        for j in range(segments):
            if receiving[j] is not None:
                work, target, into = receiving[j]
                work.wait()
                if s < n - 1:                # share-reduce: add the neighbour's partial sum
                    into.add_(target)
            if s + 1 < steps and not snapshots:
                post(s + 1, j)               # forward this piece at once: the pipeline
        if record is not None:
            out_chunk, in_chunk = (rank - s) % n, (rank - s - 1) % n
            record.log("share-reduce" if s < n - 1 else "share-only",
                       [(out_chunk, right, _nbytes(chunks[out_chunk]))],
                       [(in_chunk, left)], flat)
        if s + 1 < steps and snapshots:
            for j in range(segments):
                post(s + 1, j)
    for work in pending.values():
        work.wait()
    write_back()
    return tensor


# --------------------------------------------------------- tree and root

def _lowbit(rank: int, n: int) -> int:
    """The distance to a rank's parent in the binomial tree rooted at 0."""
    return rank & -rank if rank else 1 << max(n - 1, 1).bit_length()


def tree_allreduce(tensor: torch.Tensor, record: Recorder | None = None) -> torch.Tensor:
    """Sum in place over every rank with a binomial tree to rank 0 and back (lesson 06).

    Rank r receives from r+1, r+2, r+4, … (its children), adds, and sends the whole
    tensor to its parent r − lowbit(r); the sum then flows back down the same tree.
    ⌈log2 n⌉ rounds each way, every message the whole tensor.
    """
    n, rank = _setup(tensor, "tree_allreduce")
    flat, write_back = _flat(tensor)
    if record is not None:
        record.begin(flat)
    if n == 1:
        return tensor
    low, buf, size = _lowbit(rank, n), torch.empty_like(flat), _nbytes(flat)
    m = 1
    while m < low:                                   # reduce: children first
        if rank + m < n:
            dist.recv(buf, rank + m)
            flat.add_(buf)
            if record is not None:
                record.log("reduce", [], [(-1, rank + m)], flat)
        m <<= 1
    if rank:
        dist.send(flat, rank - low)
        if record is not None:
            record.log("reduce", [(-1, rank - low, size)], [], flat)
        dist.recv(flat, rank - low)                  # broadcast: parent first
        if record is not None:
            record.log("broadcast", [], [(-1, rank - low)], flat)
    m = low >> 1
    while m >= 1:
        if rank + m < n:
            dist.send(flat, rank + m)
            if record is not None:
                record.log("broadcast", [(-1, rank + m, size)], [], flat)
        m >>= 1
    write_back()
    return tensor


def reduce_broadcast_allreduce(tensor: torch.Tensor, root: int = 0,
                               record: Recorder | None = None) -> torch.Tensor:
    """Sum in place: everyone sends to ``root``, which adds and sends the sum back (lesson 06)."""
    n, rank = _setup(tensor, "reduce_broadcast_allreduce")
    if not 0 <= root < n:
        raise ValueError(f"root must be a rank in 0..{n - 1}, got {root}")
    flat, write_back = _flat(tensor)
    if record is not None:
        record.begin(flat)
    if n == 1:
        return tensor
    others = [r for r in range(n) if r != root]
    if rank == root:
        buf = torch.empty_like(flat)
        for src in others:
            dist.recv(buf, src)
            flat.add_(buf)
        if record is not None:
            record.log("reduce", [], [(-1, s) for s in others], flat)
        works = [dist.isend(flat, dst) for dst in others]
        for w in works:
            w.wait()
        if record is not None:
            record.log("broadcast", [(-1, d, _nbytes(flat)) for d in others], [], flat)
    else:
        dist.send(flat, root)
        if record is not None:
            record.log("reduce", [(-1, root, _nbytes(flat))], [], flat)
        dist.recv(flat, root)
        if record is not None:
            record.log("broadcast", [], [(-1, root)], flat)
    write_back()
    return tensor


def builtin_allreduce(tensor: torch.Tensor, record: Recorder | None = None) -> torch.Tensor:
    """The library's own ``dist.all_reduce`` (gloo's ring on CPU), for comparison."""
    _setup(tensor, "builtin_allreduce")
    if record is not None:
        raise ValueError("the built-in allreduce cannot be recorded: it runs inside gloo")
    dist.all_reduce(tensor)
    return tensor


ALGORITHMS: dict[str, Callable[..., torch.Tensor]] = {
    "reduce_broadcast": reduce_broadcast_allreduce, "tree": tree_allreduce,
    "ring": ring_allreduce, "dist.all_reduce": builtin_allreduce}


Algorithm = str | Callable[..., torch.Tensor]


def allreduce(tensor: torch.Tensor, algorithm: Algorithm = "ring", **options) -> torch.Tensor:
    """Sum ``tensor`` in place over every rank with one of ``ALGORITHMS`` or any function
    ``f(tensor, **options)`` that does it (lessons 05, 06)."""
    if callable(algorithm):
        return algorithm(tensor, **options)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}: use one of {list(ALGORITHMS)}"
                         " or pass a function")
    return ALGORITHMS[algorithm](tensor, **options)


# ---------------------------------------------------------------- measuring

def time_allreduce(algorithm: Algorithm = "ring", nbytes: int = 1 << 20, repeats: int = 5,
                   dtype: torch.dtype = torch.float32, **options) -> list[float]:
    """Worker function: seconds each of ``repeats`` allreduces of ``nbytes`` took here.

    Every repetition starts after a barrier; the first, untimed run warms up (and for
    the shared-memory allreduce creates the shared segment). The result is verified: a wrong sum raises.
    """
    n, rank = dist.get_world_size(), dist.get_rank()
    numel = max(1, nbytes // torch.tensor([], dtype=dtype).element_size())
    t = torch.empty(numel, dtype=dtype, device=device())
    times = []
    for i in range(repeats + 1):
        t.fill_(rank + 1)
        dist.barrier()
        t0 = time.perf_counter()
        allreduce(t, algorithm, **options)
        if i:
            times.append(time.perf_counter() - t0)
    want = n * (n + 1) / 2
    if float(t[0]) != want or float(t[-1]) != want:
        raise RuntimeError(f"{algorithm} gave {float(t[0])}…{float(t[-1])}, expected {want}")
    return times


def measure_allreduce(cluster, algorithm: str, nbytes: int, repeats: int = 5,
                      **options) -> float:
    """Seconds of an allreduce on ``cluster``: the best of ``repeats`` runs, each timed on
    its slowest rank (on a shared machine, the best run is the least disturbed one)."""
    per_rank = cluster.run(time_allreduce, algorithm, nbytes, repeats, **options)
    return best_of(per_rank)


def best_of(per_rank: Sequence[Sequence[float]]) -> float:
    """Min over repetitions of the max over ranks of per-rank times (seconds)."""
    return float(np.min(np.max(np.array(per_rank), axis=0)))


def ping_pong(sizes: Sequence[int], repeats: int = 5) -> list[float]:
    """Worker function: one-way time of a message of each size between ranks 0 and 1.

    Half the best round-trip time over ``repeats``; other ranks idle. (lesson 06's α–β fit)
    """
    rank = dist.get_rank()
    out = []
    for size in sizes:
        t = torch.zeros(max(1, size // 4), device=device())
        best = math.inf
        for _ in range(repeats + 1):
            dist.barrier()
            if rank > 1:
                continue
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            else:
                dist.recv(t, 0)
                dist.send(t, 0)
            best = min(best, time.perf_counter() - t0)
        out.append(best / 2)
    return out


def fit_alpha_beta(sizes: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares α (s) and β (s/byte) of t = α + β·S, weighted by relative error."""
    S, t = np.asarray(sizes, float), np.asarray(seconds, float)
    A = np.stack([1 / t, S / t], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    return max(float(alpha), 0.0), max(float(beta), 0.0)


def reduce_cost(nbytes: int = 16 << 20, dtype: torch.dtype = torch.float32) -> float:
    """γ: seconds per byte of ``a += b`` on this machine (the reduction's own cost)."""
    a = torch.ones(nbytes // torch.tensor([], dtype=dtype).element_size(), dtype=dtype)
    b = torch.ones_like(a)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        a.add_(b)
        best = min(best, time.perf_counter() - t0)
    return best / nbytes


def cost_model(algorithm: str, n: int, nbytes: float, alpha: float, beta: float,
               gamma: float = 0.0) -> float:
    """Predicted seconds of an allreduce of ``nbytes`` on ``n`` ranks (lesson 06).

    ring: 2(n−1)·α + 2(n−1)/n·S·β (+ (n−1)/n·S·γ for the additions);
    tree: 2⌈log2 n⌉·(α + S·β) (+ ⌈log2 n⌉·S·γ);
    reduce_broadcast: 2(n−1)·(α + S·β) (+ (n−1)·S·γ): the root handles every message.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    S = float(nbytes)
    if algorithm == "ring":
        return 2 * (n - 1) * alpha + 2 * (n - 1) / n * S * beta + (n - 1) / n * S * gamma
    if algorithm == "tree":
        rounds = math.ceil(math.log2(n))
        return 2 * rounds * (alpha + S * beta) + rounds * S * gamma
    if algorithm == "reduce_broadcast":
        return 2 * (n - 1) * (alpha + S * beta) + (n - 1) * S * gamma
    raise ValueError(f"no cost model for {algorithm!r}: use 'ring', 'tree' or "
                     "'reduce_broadcast'")


# ----------------------------------------------------------- the seed's figures

_COLORS = {"reduce_broadcast": "tab:red", "tree": "tab:purple", "ring": "tab:blue"}

def ring_trace(chunk_length: int = 1) -> Recorder:
    """Worker function: a recorded ring allreduce whose data says who contributed.

    Rank r starts with 2**r in every element, so after any step an element holding the
    sum over a set of ranks equals the bitmask of that set: the recorded data of a real
    run tell exactly which ranks' data each chunk holds (lesson 06's widget).
    """
    n, rank = dist.get_world_size(), dist.get_rank()
    t = torch.full((n * chunk_length,), float(2 ** rank), dtype=torch.float64,
                   device=device())
    rec = Recorder(keep_data=True)
    ring_allreduce(t, record=rec)
    return rec


def ring_states(recorders: Sequence[Recorder]) -> np.ndarray:
    """(steps + 1, n ranks, n chunks) array of bitmasks: which ranks' data each chunk holds."""
    n = len(recorders)
    bounds = chunk_bounds(recorders[0].initial.numel(), n)

    def masks(data: torch.Tensor) -> list[int]:
        return [int(round(float(data[a]))) if b > a else 0 for a, b in bounds]

    states = [[masks(r.initial.cpu()) for r in recorders]]
    for s in range(len(recorders[0].steps)):
        states.append([masks(r.steps[s].data.cpu()) for r in recorders])
    return np.array(states, dtype=np.int64)


def plot_ring_step(states: np.ndarray, step: int, recorders: Sequence[Recorder] | None = None,
                   ax=None, colorbar: bool = True):
    """Ranks on a ring, each with its n chunks coloured by how many ranks' data they hold.

    Step 0 is the start; steps 1..n−1 are share-reduce, n..2(n−1) share-only, as in
    seed 003's figures 3–11 (for n = 5). Arrows show the chunk each rank sent to get here.
    """
    import matplotlib.pyplot as plt
    import matplotlib
    from matplotlib.patches import FancyArrowPatch, Rectangle
    total, n, _ = states.shape
    if not 0 <= step < total:
        raise ValueError(f"step must be in 0..{total - 1}, got {step}")
    ax = ax or plt.gca()
    cmap = matplotlib.colormaps["YlGn"].resampled(n + 1)
    angles = [math.pi / 2 - 2 * math.pi * r / n for r in range(n)]
    pos = [(math.cos(a), math.sin(a)) for a in angles]
    w, h = 0.16, 0.12
    for r, (x, y) in enumerate(pos):
        x0 = x - n * w / 2
        for c in range(n):
            mask = int(states[step, r, c])
            count = bin(mask).count("1")
            ax.add_patch(Rectangle((x0 + c * w, y - h / 2), w, h, facecolor=cmap(count),
                                   edgecolor="black", lw=0.8))
            label = "".join(chr(ord("a") + k) for k in range(n) if mask >> k & 1)
            ax.text(x0 + c * w + w / 2, y, label if count < n else "all",
                    ha="center", va="center", fontsize=7 if n <= 5 else 6)
        ax.text(x, y + h / 2 + 0.07, f"rank {r} (data {chr(ord('a') + r)})", ha="center",
                fontsize=9, weight="bold")
    if step > 0:
        for r in range(n):
            (x1, y1), (x2, y2) = pos[r], pos[(r + 1) % n]
            arrow = FancyArrowPatch((x1, y1 - h / 2 - 0.03), (x2, y2 - h / 2 - 0.03),
                                    connectionstyle="arc3,rad=-0.25", arrowstyle="-|>",
                                    mutation_scale=12, color="tab:red", lw=1.2)
            ax.add_patch(arrow)
            if recorders is not None:
                chunk = recorders[r].steps[step - 1].sent[0][0]
                ax.text((x1 + x2) / 2 * 0.72, (y1 + y2) / 2 * 0.72 - 0.05, f"chunk {chunk}",
                        ha="center", fontsize=8, color="tab:red")
    phase = ("start: every rank holds only its own data" if step == 0 else
             f"share-reduce (reduce-scatter) {step}/{n - 1}" if step <= n - 1 else
             f"share-only (allgather) {step - n + 1}/{n - 1}")
    fig_no = f" — seed 003, figure {3 + step}" if n == 5 else ""
    ax.set_title(f"Step {step}: {phase}{fig_no}", fontsize=10)
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.45, 1.45)
    ax.set_aspect("equal")
    ax.axis("off")
    if colorbar:
        sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(-0.5, n + 0.5))
        bar = plt.colorbar(sm, ax=ax, ticks=range(1, n + 1), fraction=0.04, pad=0.02)
        bar.set_label("ranks whose data the chunk holds")
    return ax


def plot_cost_model(measured: dict[tuple[str, int, int], float], alpha: float, beta: float,
                    gamma: float = 0.0, axes=None):
    """Measured times (markers) against the α–β(–γ) model (lines) (lesson 06).

    ``measured`` maps (algorithm, world size, bytes) to seconds. Left: time vs message
    size at the largest world size; right: time vs world size at the largest size.
    """
    import matplotlib.pyplot as plt
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    algs = sorted({k[0] for k in measured}, key=list(ALGORITHMS).index)
    ns = sorted({k[1] for k in measured})
    sizes = sorted({k[2] for k in measured})
    colors = _COLORS
    a, b = axes
    nmax, smax = ns[-1], sizes[-1]
    grid = np.geomspace(sizes[0], sizes[-1], 50)
    for alg in algs:
        c = colors.get(alg, "black")
        pts = [(s, measured[(alg, nmax, s)]) for s in sizes if (alg, nmax, s) in measured]
        a.plot(*zip(*pts), "o", color=c, label=f"{alg} measured")
        a.plot(grid, [cost_model(alg, nmax, s, alpha, beta, gamma) for s in grid], "-",
               color=c, alpha=0.6, label=f"{alg} model")
        pts = [(n, measured[(alg, n, smax)]) for n in ns if (alg, n, smax) in measured]
        b.plot(*zip(*pts), "o", color=c)
        b.plot(ns, [cost_model(alg, n, smax, alpha, beta, gamma) for n in ns], "-",
               color=c, alpha=0.6)
    a.set(xscale="log", yscale="log", xlabel="message size S (bytes)", ylabel="seconds",
          title=f"{nmax} ranks: time vs message size")
    b.set(xlabel="world size n", ylabel="seconds", xticks=ns,
          title=f"S = {smax / 2**20:.0f} MiB: time vs world size")
    for x in axes:
        x.grid(True, alpha=0.3)
    a.legend(fontsize=7, ncol=2)
    return axes


def plot_bytes_sent(bytes_sent: dict[str, Sequence[int]], nbytes: int, ax=None):
    """Bytes each rank sent, per algorithm, against the ring's 2(n−1)/n·S (lesson 06)."""
    import matplotlib.pyplot as plt
    ax = ax or plt.gca()
    algs = list(bytes_sent)
    n = len(next(iter(bytes_sent.values())))
    width = 0.8 / len(algs)
    for i, alg in enumerate(algs):
        ax.bar(np.arange(n) + (i - (len(algs) - 1) / 2) * width,
               np.asarray(bytes_sent[alg]) / nbytes, width, label=alg, color=_COLORS.get(alg))
    ax.axhline(ring_bytes(n, nbytes) / nbytes, color="black", ls="--",
               label="2(n−1)/n · S (ring, optimal)")
    ax.set(xticks=range(n), xticklabels=[f"rank {r}" for r in range(n)],
           ylabel="bytes sent / S", title=f"bytes each rank sends, n = {n}")
    ax.legend(fontsize=8)
    return ax
