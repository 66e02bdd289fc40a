"""check.overlap_from_trace, check.model_flops and check.compute_bound_batch pass right answers
written in several styles and name the mistakes learners make (lesson 13, tasks 1–3)."""
import json
import math

import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed


# ----------------------------------------------------------------- task 1: traces

def _spans(events, pid, pred):
    return [(e["ts"], e["ts"] + e["dur"]) for e in events
            if e.get("pid") == pid and e.get("ph") == "X" and pred(e["name"])]


def _merge(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def reading(path, launch=False, whole=False, first_only=False, summed=False,
            annotation=False):
    """A right reading (plain loops), or one with a learner's mistake switched on."""
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    pids = sorted({e["pid"] for e in events if isinstance(e.get("pid"), int)})
    name = "c10d::allreduce_" if launch else "gloo:all_reduce"
    out = []
    for pid in pids:
        raw = _spans(events, pid, lambda n: n == name)
        coll = _merge(raw)
        back = _merge(_spans(events, pid, (lambda n: n == "backward") if annotation else
                             lambda n: n.startswith("autograd::engine::evaluate_function")))
        total = sum(b - a for a, b in (raw if summed else coll))
        hidden = sum(max(0.0, min(b, d) - max(a, c)) for a, b in coll for c, d in back)
        exposed = total if whole else total - hidden
        out.append({"overlap": hidden / sum(b - a for a, b in coll), "exposed": exposed / 1e6})
    return [out[0]] * len(out) if first_only else out


def reading_numpy_pairs(path):
    """Another right style: numpy masks on a 1 µs grid are too coarse, so an exact sweep
    over the sorted boundaries; a dict {rank: (overlap, exposed)}."""
    trace = json.load(open(path))
    by_rank = {}
    for e in trace["traceEvents"]:
        if e.get("ph") != "X" or not isinstance(e.get("pid"), int):
            continue
        kind = ("c" if e["name"] == "gloo:all_reduce" else
                "b" if e["name"].startswith("autograd::engine::evaluate_function") else None)
        if kind:
            by_rank.setdefault(e["pid"], []).append((kind, e["ts"], e["ts"] + e["dur"]))
    out = {}
    for r, spans in by_rank.items():
        cuts = np.unique([t for _, a, b in spans for t in (a, b)])
        mids = (cuts[:-1] + cuts[1:]) / 2
        inside = {k: np.zeros(len(mids), bool) for k in "cb"}
        for k, a, b in spans:
            inside[k] |= (mids > a) & (mids < b)
        width = np.diff(cuts)
        coll, hidden = width[inside["c"]].sum(), width[inside["c"] & inside["b"]].sum()
        out[r] = (float(hidden / coll), float((coll - hidden) / 1e6))
    return out


def test_overlap_from_trace_passes_right_answers():
    check.overlap_from_trace(reading)
    check.overlap_from_trace(reading_numpy_pairs, seed=3)


@pytest.mark.parametrize("mistake, words", [
    (dict(whole=True), "whole wall time"),
    (dict(launch=True), "CPU-side launch events"),
    (dict(first_only=True), "one rank's trace only"),
    (dict(annotation=True), "annotation was taken for backward's work"),
    (dict(summed=True), "durations were added up"),
])
def test_overlap_from_trace_names_the_mistakes(mistake, words):
    with pytest.raises(CheckFailed, match=words):
        check.overlap_from_trace(lambda path: reading(path, **mistake))


def test_overlap_from_trace_names_one_reading_for_many_ranks():
    with pytest.raises(CheckFailed, match="1 readings for a trace of 2 ranks — one rank's"):
        check.overlap_from_trace(lambda path: reading(path)[:1])


# ----------------------------------------------------------------- task 2: FLOPs

def flops(N, L, h, s, batch, attention, causal, seconds, peak):
    per_token = 6 * N + (attention and (6 if causal else 12) * L * h * s)
    total = per_token * batch * s
    return {"flops": total, "mfu": total / (seconds * peak)}


def flops_numpy(N, L, h, s, batch, attention, causal, seconds, peak):
    """Another style: numpy float32 numbers, the attention term halved by a factor."""
    factor = 0.5 if causal else 1.0
    f = np.float32(batch * s) * (np.float32(6 * N) + np.float32(attention * 12 * L * h * s
                                                                  * factor))
    return {"flops": f, "mfu": np.float32(f / seconds / peak)}


def test_model_flops_passes_right_answers():
    check.model_flops(flops)
    check.model_flops(flops_numpy, seed=5)


def _wrong(per_n=6, causal_factor=True, tokens=True, forward=False):
    def fn(N, L, h, s, batch, attention, causal, seconds, peak):
        att = attention * (6 if causal and causal_factor else 12) * L * h * s
        per_token = (2 * N + att / 3) if forward else per_n * N + att
        total = per_token * (batch * s if tokens else 1)
        return {"flops": total, "mfu": total / (seconds * peak)}
    return fn


@pytest.mark.parametrize("fn, words", [
    (_wrong(per_n=2), "2N a token is the forward pass only"),
    (_wrong(forward=True), "backward pass was forgotten"),
    (_wrong(causal_factor=False), "non-causal attention term"),
    (_wrong(tokens=False), "FLOPs per token were returned"),
])
def test_model_flops_names_the_mistakes(fn, words):
    with pytest.raises(CheckFailed, match=words):
        check.model_flops(fn)


# ----------------------------------------------------------------- task 3: a batch

def batch(machine, ratio=2.0, alpha=True, bytes_per=4, tokens=True):
    n, S = machine["world"], bytes_per * machine["params"]
    comm = 2 * (n - 1) * machine["alpha"] * alpha + 2 * (n - 1) / n * S * machine["beta"]
    per_example = 6 * machine["params"] * (machine["tokens"] if tokens else 1)
    return max(1, math.ceil(ratio * comm * machine["flop_s"] / per_example))


def batch_search(machine):
    """Another style: doubling then bisection on the inequality compute ≥ 2 × comm."""
    from ddl_lab.runtime.costs import ring_time
    comm = ring_time(machine["world"], 4 * machine["params"], machine["alpha"], machine["beta"])

    def bound(b):
        return b * 6 * machine["params"] * machine["tokens"] / machine["flop_s"] >= 2 * comm
    hi = 1
    while not bound(hi):
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if bound(mid) else (mid, hi)
    return hi


def test_compute_bound_batch_passes_right_answers():
    check.compute_bound_batch(batch)
    check.compute_bound_batch(batch_search, seed=2)


@pytest.mark.parametrize("fn, words", [
    (lambda m: batch(m, ratio=1.0), "compute only equals the allreduce"),
    (lambda m: batch(m, alpha=False), "latency α was left out"),
    (lambda m: batch(m, bytes_per=1), "4 bytes each"),
    (lambda m: 10 * batch(m), "more than 25% above"),
    (lambda m: 64, "same batch, 64, for all 6 machines"),
])
def test_compute_bound_batch_names_the_mistakes(fn, words):
    with pytest.raises(CheckFailed, match=words):
        check.compute_bound_batch(fn)
