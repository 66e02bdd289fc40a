"""DistBelief's diminishing returns: one model partitioned over 1…n machines (lesson 09;
Dean et al. 2012, as summarised).

DistBelief cuts every layer of a model into blocks of units, one block per machine;
"only those nodes with edges that cross partition boundaries will need to have their
state transmitted between machines". Two models with the same number of edges (the same
computation) per layer:

- **locally connected** (DistBelief's kind): unit j sees only the ``window`` inputs
  around j. A machine needs just ``window // 2`` values from each neighbouring block
  (a *halo*), whatever the number of machines.
- **fully connected**: every unit sees every input, so every machine needs every other
  machine's block (an ``all_gather``): the traffic per machine grows with the number of
  machines while its computation shrinks.

``distbelief_run`` times a forward pass partitioned over ``partitions`` ranks. Each
rank's computation is real and then padded to ``cost`` seconds per edge and example it
owns (each partition computes as if on its own machine: a 2-core laptop cannot run 8
at once); its communication is real and padded to what a ``Network`` of DistBelief's
time would take (a loopback on one machine is far faster than a cluster's network).
Speed-up = time on 1 partition / time on n: it rises while computation dominates and
falls once the cut's communication does — the "diminishing returns … if too many
machines/partitions are used". Every time is therefore *emulated* (``Cut.emulated`` says
with what): sleeping partitions overlap, so 4 partitions on 2 cores can run 4× faster,
which real computation on 2 cores never could.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.model_parallel.stages import group

__all__ = ["KINDS", "Network", "Cut", "local_layer", "halo", "distbelief_run", "speedups",
           "equal_edges_width", "one_machine"]

KINDS = ("locally connected", "fully connected")
_FC_WIDTH, _WINDOW = 840, 9          # 840 divides by 1…8; a window of 9 inputs per unit


def equal_edges_width(fc_width: int = _FC_WIDTH, window: int = _WINDOW, multiple: int = 840
                      ) -> int:
    """The width of a locally connected layer with as many edges as a fully connected one
    of ``fc_width`` units (rounded to a ``multiple``, so that it divides evenly)."""
    return max(multiple, round(fc_width * fc_width / window / multiple) * multiple)


@dataclass(frozen=True)
class Network:
    """A modelled network between the partitions: ``latency`` seconds per message one
    after another, ``bandwidth`` bytes per second (default: DistBelief's era, 1 Gb/s) —
    the α and 1/β of lesson 06's cost model."""

    latency: float = 4e-3
    bandwidth: float = 125e6

    def seconds(self, messages: int, values: int) -> float:
        return messages * self.latency + 4 * values / self.bandwidth

    def describe(self) -> str:
        """'α = 4 ms, β = 8 ns/B (1 Gb/s)'."""
        return (f"α = {1e3 * self.latency:g} ms, β = {1e9 / self.bandwidth:.3g} ns/B "
                f"({8 * self.bandwidth / 1e9:g} Gb/s)")


@dataclass
class Cut:
    """One rank's timing of a partitioned forward pass (lesson 09), and what was emulated:
    ``cost`` seconds of compute per edge and example (a sleep pads to it), the ``network``
    the communication was padded to (None: the loopback alone)."""

    kind: str
    partitions: int
    time: float            # seconds per forward pass (median over steps)
    compute: float         # of which computing (padded)
    communicate: float     # of which sending and receiving
    sent: int              # values this rank sends per pass
    output: torch.Tensor | None = None
    cost: float = 0.0
    network: Network | None = None

    @property
    def emulated(self) -> str:
        """'' if nothing was padded, else what was emulated (for printouts and plots)."""
        parts = ([f"network {self.network.describe()}"] if self.network else []) + \
            ([f"compute padded to {1e9 * self.cost:g} ns per edge and example"]
             if self.cost else [])
        return "emulated: " + ", ".join(parts) if parts else ""


def local_layer(x_ext: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """y_j = relu(Σ_d w_{d,j} x_{j+d}) for each of this block's units j: ``x_ext`` (B,
    w + window − 1) is the block's inputs with the halos, ``weight`` (window, w)."""
    window, w = weight.shape
    y = torch.zeros(len(x_ext), w)
    for d in range(window):                                   # one shift of the window at a time
        y.addcmul_(x_ext[:, d:d + w], weight[d])
    return torch.relu(y)


def halo(x: torch.Tensor, k: int, left: int | None, right: int | None) -> torch.Tensor:
    """This block's inputs with k values of each neighbouring block on either side (zeros
    at the ends of the layer): two sends and two receives."""
    lo, hi = torch.zeros(len(x), k), torch.zeros(len(x), k)
    works = []
    if left is not None:
        works += [dist.isend(x[:, :k].contiguous(), left), dist.irecv(lo, left)]
    if right is not None:
        works += [dist.isend(x[:, -k:].contiguous(), right), dist.irecv(hi, right)]
    for w in works:
        w.wait()
    return torch.cat([lo, x, hi], dim=1)


def _weights(kind: str, width: int, window: int, layers: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shape = (window, width) if kind == KINDS[0] else (width, width)      # fan-in first for LC
    fan_in = window if kind == KINDS[0] else width
    return [torch.randn(*shape, generator=g) / np.sqrt(fan_in) for _ in range(layers)]


def _pad(t0: float, seconds: float) -> None:
    left = seconds - (time.perf_counter() - t0)
    if left > 0:
        time.sleep(left)


def distbelief_run(kind: str = KINDS[0], partitions: int = 2, layers: int = 3,
                   batch: int = 8, cost: float = 4e-9, steps: int = 5, seed: int = 0,
                   network: Network | None = Network(), fc_width: int = _FC_WIDTH,
                   window: int = _WINDOW) -> Cut | None:
    """Worker function: a forward pass of ``layers`` layers of ``kind``, each layer's units
    split over ranks 0..partitions−1 (lesson 09). Ranks from ``partitions`` on idle.

    Computing is real, padded to ``cost`` seconds per edge and example this rank owns;
    communicating is real, padded to what ``network`` would take (None: the loopback
    alone) — the messages of a halo go out at once, an all-gather's one after another.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: use one of {KINDS}")
    rank = dist.get_rank()
    ranks = list(range(partitions))
    g = group(ranks)
    if rank >= partitions:
        return None
    local = kind == KINDS[0]
    width = equal_edges_width(fc_width, window) if local else fc_width
    if width % partitions:
        raise ValueError(f"{width} units do not split into {partitions} equal blocks")
    w = width // partitions
    mine = slice(rank * w, (rank + 1) * w)
    weights = [(W[:, mine] if local else W[mine]).contiguous()
               for W in _weights(kind, width, window, layers, seed)]
    X = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed + 1))
    left = rank - 1 if rank > 0 else None
    right = rank + 1 if rank + 1 < partitions else None
    sides = (left is not None) + (right is not None)
    messages, values = (min(1, sides), (window // 2) * sides * batch) if local else \
        (partitions - 1, (partitions - 1) * w * batch)
    wire = network.seconds(messages, values) if network else 0.0
    times, comp, comm = [], [], []
    for _ in range(steps):
        x = X[:, mine]
        dist.barrier(group=g)
        c = m = 0.0
        t0 = time.perf_counter()
        for W in weights:
            t1 = time.perf_counter()
            if local:
                x_in = halo(x, window // 2, left, right)
            else:
                parts = [torch.empty_like(x) for _ in ranks]
                dist.all_gather(parts, x.contiguous(), group=g)
                x_in = torch.cat(parts, dim=1)
            _pad(t1, wire)                                  # as slow as the network
            t2 = time.perf_counter()
            x = local_layer(x_in, W) if local else torch.relu(x_in @ W.T)
            _pad(t2, cost * W.numel() * batch)             # as fast as a machine of its own
            t3 = time.perf_counter()
            m, c = m + t2 - t1, c + t3 - t2
        times.append(time.perf_counter() - t0)
        comp.append(c)
        comm.append(m)
    return Cut(kind, partitions, float(np.median(times)), float(np.median(comp)),
               float(np.median(comm)), values * layers, x, cost, network)


def one_machine(kind: str = KINDS[0], layers: int = 3, batch: int = 8, seed: int = 0,
                fc_width: int = _FC_WIDTH, window: int = _WINDOW) -> torch.Tensor:
    """The same forward pass, unpartitioned, in this process (what the blocks must join to)."""
    local = kind == KINDS[0]
    width = equal_edges_width(fc_width, window) if local else fc_width
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed + 1))
    k = window // 2
    for W in _weights(kind, width, window, layers, seed):
        x = local_layer(nn_pad(x, k), W) if local else torch.relu(x @ W.T)
    return x


def nn_pad(x: torch.Tensor, k: int) -> torch.Tensor:
    """``x`` with k zeros on either side of every row (a whole layer's halo)."""
    return torch.nn.functional.pad(x, (k, k))


def speedups(cuts: dict[int, list[Cut | None]]) -> dict[int, float]:
    """Partitions → speed-up over one partition (the slowest rank's time per pass)."""
    slowest = {n: max(c.time for c in cs if c is not None) for n, cs in cuts.items()}
    return {n: slowest[min(slowest)] / t for n, t in slowest.items()}
