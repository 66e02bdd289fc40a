"""Checks for lesson 09: a stage's GPipe step, the 1F1B order, a row-parallel linear layer
(real workers, seeded cases, compared with float64 in one process; each stage's messages
logged — ``_model_parallel_chain.py`` — so a deadlock says what each rank waited for, and a
pipeline off the chain or out of GPipe's order is named), memory per rank (a warm-up) and a
pipeline plan (design, in ``_model_parallel_plans.py``; the entry point is here)."""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any, Callable

import numpy as np

from ddl_lab.runtime.worlds import OP_TIMEOUT_S, WorldFailed

from . import _answers as answers
from ._core import call_local, fail, passed, run_cases, task
from ._diagnose import (Case, Cases, describe_value, differs, explain, same)
from ._model_parallel_chain import GUARD, gpipe_fault, off_the_chain, p2p_log, read_log, read_logs
from ._model_parallel_plans import pipeline_plan

__all__ = ["stage_step", "one_f_one_b", "row_parallel", "bytes_per_rank", "pipeline_plan"]

_PKG = "ddl_lab.model_parallel"


# ------------------------------------------------------------- a small pipeline

def _draw_pipeline(rng: np.random.Generator) -> dict[str, Any]:
    m = int(rng.integers(1, 7))
    return {"p": int(rng.integers(2, 5)), "m": m, "B": int(rng.integers(m, 14)), "reduction":
            str(rng.choice(["mean", "sum"])), "dtype": str(rng.choice(["float32", "float64"]))}


def _spec(case: Case) -> dict[str, Any]:
    """The model and data of a case: p stages Linear(d_r, d_r+1) (+ tanh), a batch of B."""
    rng, p = case.rng, case.params["p"]
    widths = [int(rng.integers(2, 9))]
    for r in range(p):                   # neighbours differ: a gradient's shape names its way
        widths.append(int(rng.choice([w for w in range(2, 9 if r < p - 1 else 6)
                                      if w != widths[-1]])))
    dt = np.float32 if case.params["dtype"] == "float32" else np.float64
    weights = [((rng.normal(size=(b, a)) * 0.7).astype(dt), (rng.normal(size=b) * 0.3).astype(dt))
               for a, b in zip(widths[:-1], widths[1:])]
    X = rng.normal(size=(case.params["B"], widths[0])).astype(dt)
    y = rng.integers(0, widths[-1], size=case.params["B"]).astype(np.int64)
    return dict(case.params, widths=widths, weights=weights, X=X, y=y)


def _stage(spec: dict, rank: int):
    """Worker and parent: stage ``rank`` of the case's model, in the case's dtype."""
    import torch
    lin = torch.nn.Linear(1, 1)
    lin.weight, lin.bias = (torch.nn.Parameter(torch.from_numpy(a.copy()))
                            for a in spec["weights"][rank])
    return torch.nn.Sequential(lin, *([torch.nn.Tanh()] if rank < spec["p"] - 1 else []))


def _inputs(spec: dict):
    """The micro-batches (x_i, y_i), and the loss function, of a case."""
    import torch
    from ddl_lab.model_parallel.stages import microbatches
    X, y = torch.from_numpy(spec["X"].copy()), torch.from_numpy(spec["y"].copy())
    return microbatches(X, y, spec["m"]), torch.nn.CrossEntropyLoss(reduction=spec["reduction"])


def _grads(stage) -> np.ndarray:
    import torch
    return torch.cat([(q.grad if q.grad is not None else torch.zeros_like(q)).detach()
                      .reshape(-1) for q in stage.parameters()]).numpy()


def _reference(spec: dict, weights: list[float]) -> tuple[list[np.ndarray], float]:
    """Float64, one process: Σ_i w_i · loss(micro-batch i); each stage's gradients."""
    import torch
    spec64 = dict(spec, weights=[(W.astype(np.float64), b.astype(np.float64))
                                 for W, b in spec["weights"]], X=spec["X"].astype(np.float64))
    stages = [_stage(spec64, r) for r in range(spec["p"])]
    model = torch.nn.Sequential(*stages)
    batches, loss_fn = _inputs(spec64)
    loss = sum(w * loss_fn(model(x), t) for w, (x, t) in zip(weights, batches))
    loss.backward()
    return [_grads(s) for s in stages], loss.item()


def _weightings(spec: dict) -> dict[str, list[float]]:
    sizes = [len(t) for t in np.array_split(spec["y"], spec["m"])]
    return {"share": [n / spec["B"] for n in sizes], "ones": [1.0] * len(sizes),
            "by_m": [1.0 / len(sizes)] * len(sizes)}


def _stage_body(fn: Callable, spec: dict, logdir: str) -> dict:
    """Worker: the learner's step on this rank's stage, its messages logged."""
    import torch.distributed as dist
    rank, p = dist.get_rank(), dist.get_world_size()
    stage = _stage(spec, rank)
    batches, loss_fn = _inputs(spec)
    prev, nxt = (rank - 1 if rank else None), (rank + 1 if rank < p - 1 else None)
    with p2p_log(logdir, rank, prev, nxt, spec["widths"][rank], spec["widths"][rank + 1]):
        ret = fn(stage, batches, loss_fn, prev, nxt)
    try:
        returned: Any = float(ret)
    except (TypeError, ValueError, RuntimeError):
        returned = describe_value(ret)
    return {"grads": _grads(stage), "returned": returned, "log": read_log(logdir, rank)}


# ------------------------------------------------------------- task 1: the stage step

_NO_GRAD = ("no gradient flowed back: rank {r} received its activations but x.grad was None "
            "when it had to send it back to rank {prev}. The activation a stage receives "
            "must be a leaf that requires grad: call .requires_grad_() on it right after "
            "receiving, so that backward fills x.grad.")


def _failure_fault(text: str, logs: list, spec: dict, name: str) -> str | None:
    """The named mistake behind a failed or deadlocked run, from what each rank sent."""
    p = spec["p"]
    if GUARD in text:
        kind, r, said = text[text.index(GUARD) + len(GUARD):].split("|", 2)
        r, said = int(r), said.splitlines()[0]
        if kind == "forward" or (kind == "stray-send" and r == p - 1):
            return (f"gradients sent to the wrong neighbour: {said}. The gradient of a stage's "
                    f"input goes back to the stage the activation came from, prev (rank "
                    f"{r - 1}): send it to prev, not nxt.")
        if kind == "none" and r > 0:
            return _NO_GRAD.format(r=r, prev=r - 1)
        return off_the_chain(said, logs, p)
    for r in range(1, p):
        if not any(op == "send" and peer == str(r - 1) for op, peer in logs[r]) and \
                ("NoneType" in text or "Timed out" in text):
            return _NO_GRAD.format(r=r, prev=r - 1)
    return None


def _result_fault(got: list[dict], spec: dict, name: str) -> str | None:
    p, m, red, ways = spec["p"], spec["m"], spec["reduction"], _weightings(spec)
    right = "share" if red == "mean" else "ones"
    want, loss = _reference(spec, ways[right])
    if all(same(want[r], g["grads"]) for r, g in enumerate(got)):
        ret = got[-1]["returned"]
        if not isinstance(ret, float) or not np.isclose(ret, loss, rtol=1e-4, atol=1e-6):
            return (f"the gradients are right, but the last stage returned {ret}; return the "
                    f"batch's loss, {loss:.6g} (the sum of the micro-batches' weighted losses).")
        return gpipe_fault(got, spec)
    for r in range(1, p):
        if all(same(want[k], got[k]["grads"]) for k in range(r, p)) and \
                all(not np.any(got[k]["grads"]) for k in range(r)):
            return (f"stages {r}…{p - 1} have the right gradients but stages before {r} got "
                    "none: no gradient flowed back. The activation a stage receives must "
                    "require grad (x.requires_grad_()), and x.grad is what goes back to prev.")
    sizes = [len(t) for t in np.array_split(spec["y"], m)]
    mistakes = {
        "ones": (f"micro-batch losses summed where they must be averaged: loss_fn averages "
                 f"over examples (reduction='mean'), so the whole batch's loss is Σ (n_i/B)·"
                 f"loss_i; with m = {m} your gradients are about {m}× too large. Weight each "
                 "micro-batch's loss by its share n_i/B."),
        "by_m": (f"you divided each micro-batch's loss by m = {m}, but the batch of {spec['B']} "
                 f"does not split evenly (sizes {sizes}): weight each loss by its share n_i/B, "
                 "so that the step equals loss_fn on the whole batch."),
        "share": ("micro-batch losses averaged where they must be summed: loss_fn adds up over "
                  "examples (reduction='sum'), so the whole batch's loss is the plain sum of "
                  "the micro-batch losses — do not weight them."),
    }
    if red == "sum":
        mistakes["by_m"] = mistakes["share"]
    for way, message in mistakes.items():
        if way != right and all(same(alt, g["grads"]) for alt, g in
                                zip(_reference(spec, ways[way])[0], got)):
            return message
    r = next(r for r in range(p) if not same(want[r], got[r]["grads"]))
    return (f"stage {r}'s gradients: {differs(want[r], got[r]['grads'])}. After the step, each "
            "stage's .grad must equal the gradient of loss_fn over the whole batch, as one "
            "process computes it.")


def _run_all(body: Callable, specs: list[dict], cases: list[Case], fn: Callable,
             timeout: float, explain_failure: Callable, judge: Callable, *args: Any) -> None:
    """Every case in one call to the workers, each rank's messages logged; fails with the
    first case that went wrong (``explain_failure`` names a failed run's mistake from the
    logs, ``judge`` a finished run's from its results)."""
    name = getattr(fn, "__name__", "your function")
    logdirs = [tempfile.mkdtemp(prefix="ddl_lab_p2p_") for _ in specs]
    try:
        outcomes = run_cases(body, [(s["p"], (*args, s, d)) for s, d in zip(specs, logdirs)],
                             fn=fn, timeout=timeout)
        for o, spec, case, logdir in zip(outcomes, specs, cases, logdirs):
            f = o.failure
            if f is not None and f.kind == "stub":
                fail(f.line)
            if f is not None:
                named = explain_failure(f"{f.text}\n{f.line}", read_logs(logdir, spec["p"]),
                                        spec, name)
                head = f.message(name, spec["p"])
                fail(f"{named} ({head}) ({case})" if named else f"{head} ({case})")
            message = judge(o.results, spec, name)
            if message:
                fail(f"{message} ({case})")
    except WorldFailed as e:
        fail(e.failure.message(name, max(s["p"] for s in specs)))
    finally:
        for d in logdirs:
            shutil.rmtree(d, ignore_errors=True)


@task("model_parallel", refuses=(_PKG, "stage_step", "run_schedule", "pipeline_run", "hybrid_run"))
def stage_step(my_stage_step: Callable, seed: int = 0, timeout: float = 20.0) -> None:
    """Lesson 09, task 1: ``my_stage_step(stage, batches, loss_fn, prev, nxt)`` runs one
    GPipe step of one pipeline stage — every micro-batch forward (receive the activation
    from ``prev``, forward, send to ``nxt``), then every backward (receive the gradient from
    ``nxt``, backward, send the input's gradient to ``prev``) — so that the stages' .grad
    equal one un-pipelined step; the last stage returns the batch's loss. Every message is
    logged: it must go down the chain (only to prev and nxt), and each stage's messages in
    GPipe's order (every activation before any gradient; another order is named with the
    idle time it costs, counted in slots)."""
    cases = Cases("stage_step", seed, [
        {"p": 2, "m": 1, "B": 5, "reduction": "mean", "dtype": "float32"},
        {"p": 3, "m": 4, "B": 10, "reduction": "mean", "dtype": "float32"},
        {"p": 4, "m": 3, "B": 7, "reduction": "sum", "dtype": "float64"}], draws=1,
        draw=_draw_pipeline)
    _run_all(_stage_body, [_spec(c) for c in cases], list(cases), my_stage_step, timeout,
             _failure_fault, _result_fault, my_stage_step)
    passed("stage_step", f"{len(cases)} pipelines (2–4 stages, 1–6 micro-batches, some of "
           "unequal size, mean and sum losses, float32 and float64): every stage's gradients "
           "equal one process's step on the whole batch, its messages went down the chain in "
           "GPipe's order (every forward, then every backward)")


# ------------------------------------------------------------- task 2: the 1F1B order

def _order_body(spec: dict, logdir: str) -> np.ndarray:
    """Worker: the package's engine runs this rank's order; what it waits for is logged."""
    import torch.distributed as dist
    from ddl_lab.model_parallel.pipeline import run_schedule
    rank, p = dist.get_rank(), dist.get_world_size()
    stage = _stage(spec, rank)
    batches, loss_fn = _inputs(spec)
    log = open(os.path.join(logdir, f"rank{rank}.log"), "w")

    def waiting(what: str, i: int, peer: int) -> None:
        log.write(f"{what} {i} {peer}\n")
        log.flush()
    run_schedule(stage, spec["orders"][rank], batches, loss_fn,
                 rank - 1 if rank else None, rank + 1 if rank < p - 1 else None,
                 (spec["widths"][rank],), on_wait=waiting,
                 dtype=stage[0].weight.dtype)
    log.close()
    return _grads(stage)


def _deadlock(text: str, logs: list, spec: dict, name: str) -> str | None:
    if "Timed out" not in text:
        return None
    waits = [f"rank {r} for the {log[-1][0]} of micro-batch {log[-1][1]} from rank {log[-1][2]}"
             for r, log in enumerate(logs) if log]
    return (f"your orders deadlock: after {OP_TIMEOUT_S:g} s the ranks were still waiting — "
            + "; ".join(waits) + ". A stage can only run F i once the previous stage has run "
            "it, and B i once the next stage has; 1F1B warms up with p − rank − 1 forwards")


def _order_fault(got: list, spec: dict, name: str) -> str | None:
    """What is wrong with orders that ran: the gradients, the activations in flight, 1F1B."""
    from ddl_lab.model_parallel.pipeline import gpipe_order, in_flight, one_f_one_b_order
    p, m, orders = spec["p"], spec["m"], spec["orders"]
    want, _ = _reference(spec, _weightings(spec)["share"])
    bad = [r for r in range(p) if not same(want[r], got[r])]
    if bad:
        return (f"with your orders stage {bad[0]}'s gradients differ: "
                f"{differs(want[bad[0]], got[bad[0]])}")
    for r, order in enumerate(orders):
        if in_flight(order) > min(p - r, m):
            gpipe = (" — that is GPipe's order, all forwards first"
                     if order == gpipe_order(r, p, m) else "")
            return (f"too many forwards in flight: on rank {r} of {p} your order holds the "
                    f"activations of {in_flight(order)} micro-batches at once{gpipe}; 1F1B "
                    f"holds at most p − rank = {p - r} (warm up with p − rank − 1 forwards, "
                    "then alternate one forward, one backward)")
        if order != one_f_one_b_order(r, p, m):
            return (f"rank {r}'s order runs, but it is not 1F1B: {order} — expected "
                    f"{one_f_one_b_order(r, p, m)}: min(p − rank − 1, m) forwards to warm up, "
                    "then one forward and one backward in turn, then the remaining backwards")
    return None


def _as_ops(order: Any) -> Any:
    """A returned order with integral micro-batch numbers as ints (3.0, np.int64(3) → 3)."""
    if not isinstance(order, list):
        return order
    return [(item[0], answers.whole(item[1])) if isinstance(item, (tuple, list)) and
            len(item) == 2 and answers.whole(item[1]) is not None else item for item in order]


@task("model_parallel", refuses=(_PKG, "one_f_one_b_order", "gpipe_order"))
def one_f_one_b(my_one_f_one_b: Callable, seed: int = 0, timeout: float = 20.0) -> None:
    """Lesson 09, task 2: ``my_one_f_one_b(rank, p, m)`` returns the 1F1B order of rank
    ``rank`` of ``p`` stages for ``m`` micro-batches: a list of ("F", i) / ("B", i)."""
    from ddl_lab.model_parallel.pipeline import validate_order
    cases = Cases("one_f_one_b", seed, [
        {"p": 2, "m": 1}, {"p": 3, "m": 2}, {"p": 4, "m": 6}, {"p": 2, "m": 5}],
        draws=1, draw=lambda rng: {"p": int(rng.integers(2, 6)), "m": int(rng.integers(1, 9))})
    cases, specs = list(cases), []
    for case in cases:
        p, m = case.params["p"], case.params["m"]
        orders = [_as_ops(call_local(my_one_f_one_b, r, p, m)) for r in range(p)]
        for r, order in enumerate(orders):
            problem = validate_order(order, m) if isinstance(order, list) else \
                f"it returned {describe_value(order)}, not a list"
            if problem:
                fail(f"rank {r}'s order is not a schedule of the {m} micro-batches: {problem} "
                     f"({case})")
        case.params.update(B=max(m, 6), reduction="mean", dtype="float64")
        specs.append(dict(_spec(case), orders=[[(o, int(i)) for o, i in order]
                                               for order in orders]))
    _run_all(_order_body, specs, cases, my_one_f_one_b, timeout, _deadlock, _order_fault)
    passed("one_f_one_b", f"{len(cases)} pipelines (2–5 stages, 1–8 micro-batches, fewer and "
           "more micro-batches than stages) ran your orders on real workers: no deadlock, "
           "gradients equal one process, at most p − rank micro-batches in flight")


# ------------------------------------------------------------- task 3: row-parallel layer

def _draw_row(rng: np.random.Generator) -> dict[str, Any]:
    n = int(rng.integers(2, 6))
    return {"n": n, "k": int(rng.integers(1, 3 * n + 2)), "out": int(rng.integers(1, 7)),
            "B": int(rng.integers(1, 6)), "dtype": str(rng.choice(["float32", "float64"]))}


def _row_body(fn: Callable, spec: dict, logdir: str) -> dict:
    """Worker: the learner's row-parallel layer on this rank's columns."""
    import torch
    import torch.distributed as dist
    r = dist.get_rank()
    x, w, b = (torch.from_numpy(a.copy()) for a in (spec["xs"][r], spec["ws"][r], spec["bias"]))
    y = fn(x, w, b)
    arr = y.detach().numpy() if isinstance(y, torch.Tensor) else y
    return {"y": arr, "bias_changed": not np.array_equal(b.numpy(), spec["bias"])}


def _row_fault(got: list[dict], spec: dict, name: str) -> str | None:
    """What is wrong with the ranks' outputs, in words; None if nothing."""
    n, xs, ws, bias = spec["p"], spec["xs"], spec["ws"], spec["bias"]
    b64, full = bias.astype(np.float64), spec["X"].astype(np.float64) @ spec["W"].astype(
        np.float64).T
    for r, g in enumerate(got):
        if g["bias_changed"]:
            return (f"{name} changed the bias in place on rank {r} (`bias += …`, or `y += "
                    "bias` where y is the bias): the caller's bias must stay as it was")
        diff = differs(full + b64, g["y"])
        if diff is None:
            continue
        partial = xs[r].astype(np.float64) @ ws[r].astype(np.float64).T
        hint = explain(g["y"], {
            "each rank returned only its own partial sum x_r·W_rᵀ (+ b): the partial "
            "products of all ranks must be added — one dist.all_reduce": partial + b64,
            f"the bias was added on every rank before the allreduce, so the output holds it "
            f"{n} times: add it once, after the allreduce (or on one rank before it)":
                full + n * b64,
            "the bias is missing: add it after the allreduce": full,
            f"the partial sums were averaged (divided by {n}): they must be added":
                full / n + b64,
            "each rank returned only its own partial sum x_r·W_rᵀ, without the bias": partial})
        return (f"rank {r} of {n} returned {describe_value(g['y'])}: {diff}"
                + (f" — {hint}." if hint else ". Expected x Wᵀ + b: each rank's partial "
                   "x_r W_rᵀ, summed over the ranks by one allreduce, plus the bias once."))
    return None


@task("model_parallel", refuses=(_PKG, "row_parallel", "RowParallelLinear", "megatron_mlp",
                                 "tp_run"))
def row_parallel(my_row_parallel: Callable, seed: int = 0, timeout: float = 20.0) -> None:
    """Lesson 09, task 3: ``my_row_parallel(x_part, weight_cols, bias)`` — this rank holds
    the columns ``weight_cols`` of W (out, k_r) and the matching slice ``x_part`` (B, k_r)
    of the input — returns the whole output x Wᵀ + b on every rank."""
    cases = Cases("row_parallel", seed, [
        {"n": 2, "k": 6, "out": 3, "B": 4, "dtype": "float32"},
        {"n": 4, "k": 3, "out": 2, "B": 1, "dtype": "float64"},      # a rank with no columns
        {"n": 3, "k": 7, "out": 5, "B": 2, "dtype": "float32"}], draws=2, draw=_draw_row)
    cases, specs = list(cases), []
    for case in cases:
        n, k, out, B = (case.params[key] for key in ("n", "k", "out", "B"))
        dt = np.float32 if case.params["dtype"] == "float32" else np.float64
        X, W = case.rng.normal(size=(B, k)).astype(dt), case.rng.normal(size=(out, k)).astype(dt)
        cols = np.array_split(np.arange(k), n)
        specs.append({"p": n, "X": X, "W": W, "xs": [X[:, c] for c in cols],
                      "ws": [W[:, c] for c in cols],
                      "bias": (case.rng.normal(size=out) + 2.0).astype(dt)})
    _run_all(_row_body, specs, cases, my_row_parallel, timeout, lambda *a: None, _row_fault,
             my_row_parallel)
    passed("row_parallel", f"{len(cases)} cases (2–5 ranks, uneven column splits and a rank "
           "with none, float32 and float64): every rank returns x Wᵀ + b")


# ------------------------------------------------------------- task 4: memory per rank

_SHARDED = {"one process": "", "ddp": "", "zero1": "s", "zero2": "sg", "fsdp": "sgp",
            "pipeline": "sgp"}       # which of state, gradients, parameters each scheme splits


def _part(scheme: str, what: str, P: int, n: int, s: int) -> float:
    """Bytes per rank of one component: p(arameters) and g(radients) 4 B, s(tate) s B each."""
    return {"p": 4, "g": 4, "s": s}[what] * P / (n if what in _SHARDED[scheme] else 1)


@task("model_parallel")
def bytes_per_rank(my_bytes_per_rank: Callable, seed: int = 0) -> None:
    """Lesson 09, task 4 (reasoning): ``my_bytes_per_rank(scheme, params, ranks,
    state_bytes=8)`` returns the bytes one rank holds for parameters, gradients and optimizer
    state (fp32; ``state_bytes`` per parameter: 8 for Adam, 4 for momentum, 0 for SGD) under
    'one process', 'ddp', 'zero1', 'zero2', 'fsdp' or 'pipeline' (equal stages)."""
    name = getattr(my_bytes_per_rank, "__name__", "your function")
    cases = Cases("bytes_per_rank", seed, [{"P": 8_400_000, "n": 2, "s": 8},
                                           {"P": 1_200, "n": 4, "s": 0},
                                           {"P": 6_000, "n": 3, "s": 4}], draws=2,
                  draw=lambda rng: {"n": int(rng.integers(2, 9)), "s": int(rng.choice([0, 4, 8])),
                                    "P": 840 * int(rng.integers(1, 10_000))})
    for case in cases:
        P, n, s = case.params["P"], case.params["n"], case.params["s"]
        for scheme in _SHARDED:
            got = call_local(my_bytes_per_rank, scheme, P, n, s)
            want = sum(_part(scheme, c, P, n, s) for c in "pgs")
            if answers.scalar(got) is not None and (same(want, got) or
                                                    abs(answers.scalar(got) - want) <= 0.5):
                continue                     # float32 at its own tolerance; ints within a byte
            other = {"ddp": ("nothing is divided under DDP: every rank holds a whole replica "
                             "of parameters, gradients and optimizer state", want / n),
                     "zero1": ("you sharded the gradients too: ZeRO-1 shards only the optimizer "
                               "state", _part("zero2", "g", P, n, s) + 4 * P + s * P / n),
                     "zero2": ("ZeRO-2 shards the gradients as well as the optimizer state",
                               8 * P + s * P / n),
                     "fsdp": ("FSDP (ZeRO-3) shards the parameters too, not only gradients "
                              "and state", 4 * P + (4 + s) * P / n),
                     "pipeline": ("that is the whole model: a stage holds only its 1/n of the "
                                  "layers", want * n)}.get(scheme, ("", None))
            hint = explain(got, {
                other[0]: other[1],
                f"the optimizer state is missing ({s} bytes per parameter)":
                    want - _part(scheme, "s", P, n, s),
                "the gradients are missing: as many bytes as the parameters (4 each, fp32)":
                    want - _part(scheme, "g", P, n, s)})
            fail(f"{name}({scheme!r}, params={P:,}, ranks={n}, state_bytes={s}) returned "
                 f"{describe_value(got)}, expected {want:,.0f}"
                 + (f": {hint}." if hint else ".") + f" ({case})")
    passed("bytes_per_rank", f"{len(cases)} cases × {len(_SHARDED)} schemes: your bytes per "
           "rank match ZeRO's accounting (4 + 4 + state bytes per parameter, sharded or not)")


