"""Lesson 06's reasoning and design tasks: the message size where the ring overtakes the
tree (and the mistakes that give other sizes), and DDP-style gradient buckets, their size
chosen by the learner, the allreduces the real hooks launch counted on real workers and
timed in the α–β model against the backward pass."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import fail
from ._diagnose import describe_value

# ------------------------------------------------------------------ tree against ring

def _rounds(n: int) -> int:
    return math.ceil(math.log2(n))


def _solve(n: int, a: float, b: float, tree_lat: float, tree_bw: float, ring_lat: float,
           ring_bw: float) -> float | None:
    """S where tree_lat·α + tree_bw·S·β = ring_lat·α + ring_bw·S·β, if the tree's bandwidth
    term is the larger (else None: the equation has no crossover of that shape)."""
    if tree_bw <= ring_bw:
        return None
    return (ring_lat - tree_lat) * a / ((tree_bw - ring_bw) * b)


def crossover(n: int, a: float, b: float) -> float:
    """Tree 2⌈log2 n⌉·(α + S·β) = ring 2(n−1)·α + 2(n−1)/n·S·β (0: the tree never wins)."""
    L = _rounds(n)
    return max(_solve(n, a, b, 2 * L, 2 * L, 2 * (n - 1), 2 * (n - 1) / n), 0.0)


CROSSOVER_MISTAKES: dict[str, Callable[..., float | None]] = {
    "the tree never wins only while its 2⌈log2 n⌉ rounds are no fewer than the ring's 2(n−1) "
    "steps (n ≤ 3); here it has fewer, so it is faster for small enough messages — return the "
    "S where the two times meet": lambda n, a, b: 0.0 if n > 3 else None,
    "that is the crossover of a tree that only reduces: the tree allreduce reduces to the "
    "root and broadcasts back down, 2⌈log2 n⌉ rounds of α + S·β":
        lambda n, a, b: _solve(n, a, b, _rounds(n), _rounds(n), 2 * (n - 1), 2 * (n - 1) / n),
    "the tree needs ⌈log2 n⌉ rounds each way — a whole number — not log2 n":
        lambda n, a, b: _solve(n, a, b, 2 * math.log2(n), 2 * math.log2(n), 2 * (n - 1),
                               2 * (n - 1) / n),
    "α and β are swapped: α is paid per message, β per byte":
        lambda n, a, b: crossover(n, b, a),
    "that is the time at the crossover, in seconds: return the message size S, in bytes":
        lambda n, a, b: 2 * _rounds(n) * (a + crossover(n, a, b) * b),
    "that is the size in bits: return bytes (α + S·β with β in seconds per byte)":
        lambda n, a, b: 8 * crossover(n, a, b),
    "the ring's latency term is 2(n−1)·α — both phases pay α at each step":
        lambda n, a, b: _solve(n, a, b, 2 * _rounds(n), 2 * _rounds(n), n - 1, 2 * (n - 1) / n),
    "the ring's bandwidth term is 2(n−1)/n·S·β — both phases send chunks":
        lambda n, a, b: _solve(n, a, b, 2 * _rounds(n), 2 * _rounds(n), 2 * (n - 1),
                               (n - 1) / n),
}

CROSSOVER_FIXED = [{"n": 4, "alpha": 5e-5, "beta": 1e-9}, {"n": 8, "alpha": 2e-5, "beta": 4e-10},
                   {"n": 5, "alpha": 1e-4, "beta": 1e-9}, {"n": 3, "alpha": 5e-5, "beta": 1e-9},
                   {"n": 2, "alpha": 1e-5, "beta": 1e-9}, {"n": 64, "alpha": 1e-6, "beta": 1e-10}]


def crossover_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"n": int(rng.choice([6, 7, 12, 16, 24, 33, 100, 256])),
            "alpha": float(10 ** rng.uniform(-6.5, -3.5)),
            "beta": float(10 ** rng.uniform(-10.5, -8.5))}


# ------------------------------------------------------------------ gradient buckets

TARGET = 1.10                 # within 10 % of the best bucket size's step time
BUCKET_CASES = [  # widths of a chain of Linear layers; the α–β machine; backward s per byte
    {"n": 4, "widths": [64, 256, 256, 128, 128, 64, 10], "alpha": 2e-5, "beta": 2e-9,
     "compute": 2e-9},
    {"n": 3, "widths": [32, 512, 256, 256, 64, 10], "alpha": 2e-4, "beta": 5e-10,
     "compute": 2e-9},
    {"n": 5, "widths": [64, 256, 256, 256, 256, 256, 10], "alpha": 4e-5, "beta": 1e-9,
     "compute": 3e-9},
]

REAL_DRAWS = 1                # drawn cases run on real workers too (n <= 5); the rest: model


def bucket_draw(rng: np.random.Generator) -> dict[str, Any]:
    """A network and machine the prompt does not show: 3–8 layers of 8–1024 units, 2–64
    ranks, α 1 µs–1 ms, β 0.1–10 ns/byte, backward 0.3–10 ns/byte."""
    layers = int(rng.integers(3, 9))
    return {"n": int(rng.choice([2, 3, 4, 5, 8, 16, 64])),
            "widths": [int(2 ** rng.uniform(3, 10)) for _ in range(layers + 1)],
            "alpha": float(f"{10 ** rng.uniform(-6, -3):.2g}"),
            "beta": float(f"{10 ** rng.uniform(-10, -8):.2g}"),
            "compute": float(f"{10 ** rng.uniform(-9.5, -8):.2g}")}


def grad_bytes(widths: list[int]) -> list[int]:
    """float32 gradient sizes in the order the backward pass produces them (last layer
    first; a layer's bias, then its weight)."""
    out: list[int] = []
    for a, b in reversed(list(zip(widths, widths[1:]))):
        out += [4 * b, 4 * a * b]
    return out


def buckets_of(grads: list[int], bucket_bytes: int) -> list[int]:
    """The bytes of each bucket GradientBuckets makes of gradients of ``grads`` bytes."""
    from ddl_lab.ring_allreduce.buckets import bucket_indices
    return [sum(grads[i] for i in b) for b in bucket_indices(grads, bucket_bytes)]


def step_time(sizes: list[int], n: int, a: float, b: float, compute: float) -> float:
    """Bucket j's allreduce (a ring) starts when backward has produced its gradients and the
    previous allreduce is done; the step ends with the last allreduce."""
    done = ready = 0.0
    for s in sizes:
        ready += compute * s
        done = max(done, ready) + 2 * (n - 1) * a + 2 * (n - 1) / n * s * b
    return done


def best_bucket(grads: list[int], n: int, a: float, b: float,
                compute: float) -> tuple[int, list[int], float]:
    """The bucket size (among all the partitions the rule can make) with the least step
    time: (bytes, bucket sizes, seconds)."""
    runs = {sum(grads[i:j]) for i in range(len(grads)) for j in range(i + 1, len(grads) + 1)}
    timed = [(step_time(buckets_of(grads, t), n, a, b, compute), t) for t in sorted(runs)]
    t, size = min(timed)
    return size, buckets_of(grads, size), t


def bucket_bytes_of(got: Any, call: str) -> int:
    """The learner's bucket size as a whole number of bytes >= 1, or a failure."""
    value = answers.scalar(got)
    if value is None or isinstance(got, (bool, np.bool_)):
        fail(f"{call} returned {describe_value(got)}; return the bucket size in bytes, a "
             "whole number >= 1.")
    if value < 1 or value != int(value):
        fail(f"{call} returned {value:g}; a bucket size is a whole number of bytes, at least 1.")
    return int(value)


def bucket_run(widths: list[int], bucket_bytes: int) -> list[int]:
    """Worker: one backward pass of a chain of Linear layers with the lesson's
    GradientBuckets; the bytes of each allreduce its hooks launched, in order."""
    import torch

    from ddl_lab.ring_allreduce.buckets import GradientBuckets
    from ddl_lab.runtime.wiretap import Wiretap
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])])
    with Wiretap() as tap:
        buckets = GradientBuckets(model, bucket_bytes)
        model(torch.randn(8, widths[0])).pow(2).mean().backward()
        buckets.wait()
        buckets.remove()
    return [op.nbytes for op in tap.ops if op.method == "allreduce"]


def judge_buckets(case: dict, bucket_bytes: int, launched: list[int]) -> tuple[bool, str]:
    """(True, what the run achieved) if the step time of the allreduces the hooks launched
    is within TARGET of the best bucket size's, else (False, what happened and why)."""
    n, a, b, c = (case[k] for k in ("n", "alpha", "beta", "compute"))
    grads = grad_bytes(case["widths"])
    t = step_time(launched, n, a, b, c)
    best, best_sizes, best_t = best_bucket(grads, n, a, b, c)
    ran = (f"buckets of {bucket_bytes:,} bytes: the hooks launched {len(launched)} "
           f"allreduce(s), the step ends at {1e3 * t:.3g} ms")
    if t <= TARGET * best_t:
        return True, f"{ran} (best {1e3 * best_t:.3g} ms)"
    start = 2 * (n - 1) * a
    if len(launched) == 1:
        why = ("one bucket: its allreduce can start only when backward has finished, so none "
               "of the communication overlaps the backward pass.")
    elif len(launched) > len(best_sizes):
        why = (f"too many small buckets: every allreduce pays 2(n−1)·α = {1e6 * start:.3g} µs, "
               "and the allreduces fall behind the backward pass.")
    else:
        why = ("too few, too large buckets: the last one starts only when backward ends, and "
               "its allreduce is not hidden behind anything.")
    count = "1 allreduce" if len(best_sizes) == 1 else f"{len(best_sizes)} allreduces"
    return False, (f"{ran} in the α–β model, while buckets of {best:,} bytes "
                   f"({count}) end at {1e3 * best_t:.3g} ms: yours is "
                   f"{t / best_t - 1:.0%} slower (the target: within {TARGET - 1:.0%}) — {why}")
