"""Checks for lesson 09 (model parallelism): a stage's GPipe step, the 1F1B order, a row-parallel
layer (real workers); memory per rank (reasoning); a pipeline plan (design)."""
from __future__ import annotations

import functools
import os
import tempfile
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ddl_lab.runtime import worlds

from . import _answers as answers
from ._core import call_local, fail, judge, on_workers, passed, task
from ._diagnose import Case, describe_value, differs, explain, same, table
from ._trial import Trial

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


def _run_all(body: Callable, specs: list[dict], trial: Trial, explain_failure: Callable,
             fault: Callable, *args: Any) -> None:
    """Every case of ``trial`` in one call to the workers, each rank's messages logged; fails
    with the first case that went wrong (``explain_failure`` names a failed run's mistake
    from the logs, ``fault`` a finished run's from its results)."""
    with tempfile.TemporaryDirectory(prefix="ddl_lab_p2p_", ignore_cleanup_errors=True) as root:
        logdirs = [tempfile.mkdtemp(dir=root) for _ in specs]
        outcomes = trial.run(body, [(s["p"], (*args, s, d)) for s, d in zip(specs, logdirs)])
        for o, spec, case, logdir in zip(outcomes, specs, trial, logdirs):
            f = o.failure
            if f is not None and f.kind == "stub":
                fail(f.line)
            if f is not None:
                logs = [read_log(logdir, r) for r in range(spec["p"])]
                named = explain_failure(f"{f.text}\n{f.line}", logs, spec, trial.name)
                head = f.message(trial.name, spec["p"])
                fail(f"{named} ({head}) ({case})" if named else f"{head} ({case})")
            trial.judge(fault(o.results, spec, trial.name), case, "({})")


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
    trial = Trial("stage_step", my_stage_step, seed, table(
        "p m B reduction dtype", (2, 1, 5, "mean", "float32"), (3, 4, 10, "mean", "float32"),
        (4, 3, 7, "sum", "float64")), draws=1,
        draw=_draw_pipeline, timeout=timeout)
    _run_all(_stage_body, [_spec(c) for c in trial], trial, _failure_fault, _result_fault,
             my_stage_step)
    passed("stage_step", f"{len(trial)} pipelines (2–4 stages, 1–6 micro-batches, some of "
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

    def waiting(what: str, i: int, peer: int) -> None:
        log.write(f"{what} {i} {peer}\n")
        log.flush()
    with open(os.path.join(logdir, f"rank{rank}.log"), "w") as log:
        run_schedule(stage, spec["orders"][rank], batches, loss_fn,
                     rank - 1 if rank else None, rank + 1 if rank < p - 1 else None,
                     (spec["widths"][rank],), on_wait=waiting, dtype=stage[0].weight.dtype)
    return _grads(stage)


def _deadlock(text: str, logs: list, spec: dict, name: str) -> str | None:
    if "Timed out" not in text:
        return None
    waits = [f"rank {r} for the {log[-1][0]} of micro-batch {log[-1][1]} from rank {log[-1][2]}"
             for r, log in enumerate(logs) if log]
    return (f"your orders deadlock: after {worlds.OP_TIMEOUT_S:g} s the ranks were still waiting — "
            + "; ".join(waits) + ". A stage can only run F i once the previous stage has run "
            "it, and B i once the next stage has; 1F1B warms up with p − rank − 1 forwards")


def _order_fault(got: list, spec: dict, name: str) -> str | None:
    """What is wrong with orders that ran: the gradients, the activations in flight, 1F1B."""
    from ddl_lab.model_parallel.pipeline import gpipe_order, in_flight, one_f_one_b_order
    p, m, orders = spec["p"], spec["m"], spec["orders"]
    want, _ = _reference(spec, _weightings(spec)["share"])
    if bad := [r for r in range(p) if not same(want[r], got[r])]:
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
    trial = Trial("one_f_one_b", my_one_f_one_b, seed, [
        {"p": 2, "m": 1}, {"p": 3, "m": 2}, {"p": 4, "m": 6}, {"p": 2, "m": 5}], draws=1,
        draw=lambda rng: {"p": int(rng.integers(2, 6)), "m": int(rng.integers(1, 9))},
        timeout=timeout)
    specs: list = []
    for case in trial:
        p, m = case.params["p"], case.params["m"]
        orders = [_as_ops(call_local(my_one_f_one_b, r, p, m)) for r in range(p)]
        for r, order in enumerate(orders):
            if problem := (validate_order(order, m) if isinstance(order, list) else
                           f"it returned {describe_value(order)}, not a list"):
                fail(f"rank {r}'s order is not a schedule of the {m} micro-batches: {problem} "
                     f"({case})")
        case.params.update(B=max(m, 6), reduction="mean", dtype="float64")
        specs.append(dict(_spec(case), orders=[[(o, int(i)) for o, i in order]
                                               for order in orders]))
    _run_all(_order_body, specs, trial, _deadlock, _order_fault)
    passed("one_f_one_b", f"{len(trial)} pipelines (2–5 stages, 1–8 micro-batches, fewer and "
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
        if (diff := differs(full + b64, g["y"])) is None:
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
    trial = Trial("row_parallel", my_row_parallel, seed, table(
        "n k out B dtype", (2, 6, 3, 4, "float32"),
        (4, 3, 2, 1, "float64"),                # a rank with no columns
        (3, 7, 5, 2, "float32")), draws=2, draw=_draw_row, timeout=timeout)
    specs: list = []
    for case in trial:
        n, k, out, B = (case.params[key] for key in ("n", "k", "out", "B"))
        dt = np.float32 if case.params["dtype"] == "float32" else np.float64
        X, W = case.rng.normal(size=(B, k)).astype(dt), case.rng.normal(size=(out, k)).astype(dt)
        cols = np.array_split(np.arange(k), n)
        specs.append({"p": n, "X": X, "W": W, "xs": [X[:, c] for c in cols],
                      "ws": [W[:, c] for c in cols],
                      "bias": (case.rng.normal(size=out) + 2.0).astype(dt)})
    _run_all(_row_body, specs, trial, lambda *a: None, _row_fault, my_row_parallel)
    passed("row_parallel", f"{len(trial)} cases (2–5 ranks, uneven column splits and a rank "
           "with none, float32 and float64): every rank returns x Wᵀ + b")


# ------------------------------------------------------------- task 4: memory per rank

_SHARDED = {"one process": "", "ddp": "", "zero1": "s", "zero2": "sg", "fsdp": "sgp",
            "pipeline": "sgp"}       # which of state, gradients, parameters each scheme splits
_MISSHARDED = {     # scheme → (what a learner making its named mistake splits, the mistake)
    "ddp": ("sgp", "nothing is divided under DDP: every rank holds a whole replica of "
                   "parameters, gradients and optimizer state"),
    "zero1": ("sg", "you sharded the gradients too: ZeRO-1 shards only the optimizer state"),
    "zero2": ("s", "ZeRO-2 shards the gradients as well as the optimizer state"),
    "fsdp": ("sg", "FSDP (ZeRO-3) shards the parameters too, not only gradients and state"),
    "pipeline": ("", "that is the whole model: a stage holds only its 1/n of the layers")}


def rank_bytes(split: str, P: float, n: int, s: int, parts: str = "pgs", p: int = 4,
               g: int = 4) -> float:
    """Bytes per rank of ``parts`` — p(arameters) p B, g(radients) g B, s(tate) s B each —
    when those in ``split`` are divided over the n ranks (ZeRO's accounting, lessons 09, 10)."""
    return sum({"p": p, "g": g, "s": s}[c] * P / (n if c in split else 1) for c in parts)


@task("model_parallel")
def bytes_per_rank(my_bytes_per_rank: Callable, seed: int = 0) -> None:
    """Lesson 09, task 4 (reasoning): ``my_bytes_per_rank(scheme, params, ranks,
    state_bytes=8)`` returns the bytes one rank holds for parameters, gradients and optimizer
    state (fp32; ``state_bytes`` per parameter: 8 for Adam, 4 for momentum, 0 for SGD) under
    'one process', 'ddp', 'zero1', 'zero2', 'fsdp' or 'pipeline' (equal stages)."""
    trial = Trial("bytes_per_rank", my_bytes_per_rank, seed, table(
        "P n s", (8_400_000, 2, 8), (1_200, 4, 0), (6_000, 3, 4)), draws=2, draw=lambda rng: {
            "n": int(rng.integers(2, 9)), "s": int(rng.choice([0, 4, 8])),
            "P": 840 * int(rng.integers(1, 10_000))})
    for case in trial:
        P, n, s = case.params["P"], case.params["n"], case.params["s"]
        for scheme in _SHARDED:
            got = call_local(my_bytes_per_rank, scheme, P, n, s)
            want = rank_bytes(_SHARDED[scheme], P, n, s)
            if answers.scalar(got) is not None and (same(want, got) or
                                                    abs(answers.scalar(got) - want) <= 0.5):
                continue                     # float32 at its own tolerance; ints within a byte
            split, mistake = _MISSHARDED.get(scheme, (None, ""))
            hint = explain(got, {
                mistake: None if split is None else rank_bytes(split, P, n, s),
                f"the optimizer state is missing ({s} bytes per parameter)":
                    rank_bytes(_SHARDED[scheme], P, n, s, "pg"),
                "the gradients are missing: as many bytes as the parameters (4 each, fp32)":
                    rank_bytes(_SHARDED[scheme], P, n, s, "ps")})
            fail(f"{trial.name}({scheme!r}, params={P:,}, ranks={n}, state_bytes={s}) returned "
                 f"{describe_value(got)}, expected {want:,.0f}"
                 + (f": {hint}." if hint else ".") + f" ({case})")
    passed("bytes_per_rank", f"{len(trial)} cases × {len(_SHARDED)} schemes: your bytes per "
           "rank match ZeRO's accounting (4 + 4 + state bytes per parameter, sharded or not)")


# ------------------------------------------------------------------ who sent what
# The logs (``p2p_log``) say what shape the pipeline took: a star through rank 0 or a
# shortcut to the last stage (``off_the_chain``), an order that is not GPipe's (``gpipe_fault``).

GUARD = "[neighbours]"


@contextmanager
def p2p_log(logdir: str, rank: int, prev: int | None, nxt: int | None, d_in: int,
             d_out: int) -> Iterator[None]:
    """Worker, while the learner's code runs: every send/recv is written to a file (a line
    each, flushed), and a message that cannot be right raises at once instead of hanging:
    None, to or from a rank that is not a neighbour, or the input's gradient sent forward."""
    from ddl_lab.runtime.wiretap import Wiretap
    peers = {prev, nxt}

    def judge(call: str, sending: bool, tensor: Any, peer: Any) -> None:
        if tensor is None:
            raise ValueError(f"{GUARD}none|{rank}|rank {rank} called dist.{call} with None")
        if sending and peer == nxt and _last_dim(tensor) == d_in != d_out:
            raise ValueError(f"{GUARD}forward|{rank}|rank {rank} sent a tensor shaped like "
                             f"its input's gradient to nxt = {peer}")
        if peer not in peers - {None}:
            raise ValueError(f"{GUARD}{'stray-send' if sending else 'stray'}|{rank}|rank "
                             f"{rank} called dist.{call} with rank {peer!r}, which is not one of "
                             f"its neighbours {sorted(peers - {None})}")

    def logged(op: Any, args: tuple) -> None:
        if op.op not in ("send", "recv"):
            return
        peer = op.dst if op.op == "send" else op.src
        log.write(f"{op.op} {peer}\n")
        log.flush()
        judge(op.call or op.op, op.op == "send", args[0][0], peer)
    with open(os.path.join(logdir, f"rank{rank}.log"), "w") as log, Wiretap(on_op=logged):
        yield


def _last_dim(t: Any) -> int | None:
    """The last size of a tensor, or of the tensor a ``send_tensor`` header announces."""
    if t.is_floating_point():
        return int(t.shape[-1]) if t.dim() else None
    if t.dim() == 1 and t.numel() == 8 and 0 < int(t[1]) <= 6:       # stages.send_tensor's header
        return int(t[1 + int(t[1])])
    return None


def read_log(logdir: str, rank: int) -> list[tuple[str, ...]]:
    path = os.path.join(logdir, f"rank{rank}.log")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(ln.split(" ")) for ln in f.read().split("\n") if ln.strip()]


_CHAIN = ("pipeline pieces go down the chain: activations from stage s to s + 1 (nxt), "
          "gradients back from s + 1 to s (prev), one hop at a time")


def off_the_chain(said: str, logs: list, p: int) -> str:
    """Messages to or from ranks that are not neighbours, named by the shape they take:
    a star through rank 0, activations sent straight to the last stage, or another shortcut."""
    strays = [(r, op, int(peer)) for r, log in enumerate(logs) for op, peer in log
              if peer.isdigit() and abs(int(peer) - r) != 1]
    if any(r >= 2 and peer == 0 for r, _, peer in strays):
        return (f"{said}: messages routed through rank 0, a star — {_CHAIN}; no stage talks "
                "to any rank but prev and nxt.")
    if any(op == "send" and peer == p - 1 for _, op, peer in strays):
        return (f"{said}: activations sent straight to the last stage, skipping the stages "
                f"between — {_CHAIN}.")
    return f"{said}: a stage talks only to prev and nxt — {_CHAIN}."


def _directions(log: list[tuple[str, ...]], rank: int) -> str:
    """Each message of a stage as 'F' (the forward pass: from prev, to nxt) or 'B'."""
    forward = {("recv", str(rank - 1)), ("send", str(rank + 1))}
    return "".join("F" if tuple(msg) in forward else "B" for msg in log)


def _ops(directions: str, m: int) -> list[tuple[str, int]] | None:
    """The order of a stage's operations read off its messages ("F", i) / ("B", i), every
    micro-batch sending as many messages as the others; None if they do not split so."""
    per = {d: directions.count(d) // m for d in "FB"}
    if any(directions.count(d) != per[d] * m or not per[d] for d in "FB"):
        return None
    seen, order = {"F": 0, "B": 0}, []
    for d in directions:
        op = (d, seen[d] // per[d])
        seen[d] += 1
        if op not in order:
            order.append(op)
    return order


def gpipe_fault(got: list[dict], spec: dict) -> str | None:
    """None if every stage ran GPipe's order — every forward message before any backward
    one — else what the learner's order was and the idle time it costs, counted in slots."""
    from ddl_lab.model_parallel.interleaved import slot_makespan
    p, m = spec["p"], spec["m"]
    dirs = [_directions(g["log"], r) for r, g in enumerate(got)]
    late = [r for r, d in enumerate(dirs) if "B" in d and "F" in d[d.index("B"):]]
    if not late:
        return None
    r, orders = late[0], [_ops(d, m) for d in dirs]
    head = (f"the gradients are right, but the order is not GPipe's: rank {r} sent or received "
            "a gradient before its last activation")
    if any(o is None for o in orders):
        return head + ". GPipe runs every micro-batch's forward, then every backward."
    slots, gpipe = slot_makespan([[(k, i, 0) for k, i in o] for o in orders], 1), 2 * (m + p - 1)
    shown = " ".join(f"{k}{i}" for k, i in orders[r])
    idle = (f"each stage idles {1 - 2 * m / slots:.0%} of the step instead of GPipe's "
            f"(p − 1)/(m + p − 1) = {(p - 1) / (m + p - 1):.0%}")
    if all(o == [op for i in range(m) for op in (("F", i), ("B", i))] for o in orders):
        return (f"{head} — each micro-batch's backward ran right after its forward ({shown}), "
                f"so only one stage is ever busy: counted in slots (every forward and backward "
                f"one slot) the step takes 2·p·m = {slots} slots instead of GPipe's "
                f"2(m + p − 1) = {gpipe}, and {idle}. Run every forward, then every backward.")
    if slots > gpipe:
        return (f"{head} (rank {r} ran {shown}): counted in slots the step takes {slots} slots "
                f"instead of GPipe's 2(m + p − 1) = {gpipe}, and {idle}. Run every forward, "
                "then every backward.")
    return (f"{head} (rank {r} ran {shown}): as short as GPipe's {gpipe} slots, a 1F1B-like "
            "order (task 2's, which keeps fewer activations) — this task asks for GPipe's: "
            "every forward, then every backward.")


# ------------------------------------------------------------------ design: a pipeline plan
# The bubble is counted in slots (the orders the stages ran, replayed: 1 − 2m/makespan), the
# clock's beside it; the memory is measured (``ActivationMeter``), in examples.

PAD = 0.002                 # seconds of padded compute per example and stage, as the lesson's
FIXED = table("p batch max_bubble max_examples", (4, 48, 0.2, 16), (3, 36, 0.25, 36),
              (2, 24, 0.1, 4))


DRAWN = 8                   # budgets per call the prompt never shows; the first is run for real


def _draw(rng: np.random.Generator, far: bool) -> dict[str, Any]:
    """A feasible case: 1F1B with some m0 meets it (bubble rounded up, its memory). Small
    enough to run on the workers, or ``far`` (up to 8 stages, batches up to 512), judged by
    the schedules' arithmetic."""
    p, batch = int(rng.integers(2, 9 if far else 5)), int(rng.integers(16, 513 if far else 49))
    m0 = int(rng.integers(p, batch // 2 + 1))
    bubble = np.ceil(100 * (p - 1) / (m0 + p - 1)) / 100
    roomy = far and rng.random() < 0.3              # memory to spare: GPipe fits too
    return {"p": p, "batch": batch, "max_bubble": float(bubble),
            "max_examples": batch if roomy else min(p, m0) * -(-batch // m0)}


def _kept(p: int, batch: int, schedule: str, m: int) -> int:
    """The most examples a stage keeps for backward: GPipe every micro-batch (the batch);
    1F1B on stage 0 the first min(p, m) micro-batches of ``torch.tensor_split``, the largest."""
    if schedule == "gpipe":
        return batch
    return sum(batch // m + (1 if i < batch % m else 0) for i in range(min(p, m)))


def _choice(out: Any, name: str, case: Any) -> tuple[str, int]:
    judge(answers.plan(out, name, {"schedule": "'gpipe' or '1f1b'", "m": ""}, f" ({case})"))
    schedule, batch = out["schedule"], case.params["batch"]
    if schedule not in ("gpipe", "1f1b"):
        fail(f"{name} chose the schedule {schedule!r}; choose 'gpipe' or '1f1b' ({case}).")
    if (m := answers.Whole(1, batch).read(out["m"])) is None:
        fail(f"{name} chose m = {out['m']!r}: the number of micro-batches is a whole number "
             f"from 1 to the batch size, {batch} (a micro-batch holds at least one example) "
             f"({case}).")
    return str(schedule), m


def slot_bubble(orders: Sequence[Sequence[tuple[str, int]]]) -> float:
    """The idle share of a pipeline whose stage r ran ``orders[r]``, every operation one slot
    (lesson 09's slot replay, one chunk per stage): 1 − (busy slots) / (p × makespan)."""
    from ddl_lab.model_parallel.interleaved import slot_makespan
    chunked = [[(op, i, 0) for op, i in order] for order in orders]
    return 1.0 - sum(len(o) for o in orders) / (len(orders) * slot_makespan(chunked, 1))


def _ran(runs: Sequence[Any]) -> list[list[tuple[str, int]]]:
    """The order each stage ran in its last step, read off its timeline."""
    kinds = {"forward": "F", "backward": "B"}
    return [[(kinds[s.kind], s.step) for s in sorted(r.timelines[-1].spans, key=lambda s: s.start)
             if s.kind in kinds] for r in runs]


@functools.lru_cache(maxsize=16)
def _bytes_per_example(p: int, batch: int) -> tuple[float, ...]:
    """Bytes each stage keeps for backward per example: one micro-batch of the whole batch."""
    from ddl_lab.model_parallel.pipeline import pipeline_run
    runs = on_workers(pipeline_run, p, "mlp", p, 1, "gpipe", 1, batch)
    return tuple(r.peak_activations / batch for r in runs)


def _measure(p: int, batch: int, schedule: str, m: int) -> tuple[float, float, float, int]:
    """(slot bubble, clock bubble, most examples any stage kept, that stage) of one real run."""
    from ddl_lab.model_parallel.pipeline import bubble_fraction, pipeline_run
    runs = on_workers(pipeline_run, p, "mlp", p, m, schedule, 2, batch, 0.1, PAD)
    per = _bytes_per_example(p, batch)
    # the last stage always keeps the fewest micro-batches; its loss adds a few bytes per
    # micro-batch that are not an example's, so the stages before it are the ones measured
    held = {r: runs[r].peak_activations / per[r] for r in range(p - 1 if p > 1 else 1)
            if per[r] > 0}
    worst = max(held, key=held.get)
    return slot_bubble(_ran(runs)), bubble_fraction(runs), held[worst], worst


@task("model_parallel")
def pipeline_plan(my_pipeline_plan: Callable[[int, int, float, int], dict],
                  seed: int = 0) -> None:
    """Lesson 09, design: ``my_pipeline_plan(p, batch, max_bubble, max_examples)`` returns
    {schedule: 'gpipe' | '1f1b', m} for the lesson's MLP cut into p padded stages training
    on batches of ``batch``: its bubble at most ``max_bubble`` and no stage keeping the
    activations of more than ``max_examples`` examples at once. Every case's plan is judged
    by the schedules' arithmetic — the fixed ones and budgets drawn per call, far from them —
    and two (the first fixed, the first drawn) run on p real workers: the bubble counted in
    slots, the memory measured."""
    far = iter([False] + [True] * (DRAWN - 1))    # the first drawn runs on the workers
    trial = Trial("pipeline_plan", my_pipeline_plan, seed, FIXED, draws=DRAWN,
                  draw=lambda rng: _draw(rng, next(far)))
    name = trial.name
    plans = [_choice(answers.plan_call(my_pipeline_plan, c.params, name, str(c), trial.unseen(c)),
                     name, c) for c in trial]
    for case, (schedule, m) in zip(trial, plans):
        p, batch = case.params["p"], case.params["batch"]
        slots = (p - 1) / (m + p - 1)            # slot_bubble of either schedule's orders
        _judge(name, case, schedule, m, slots, None, _kept(p, batch, schedule, m), 0, plans)
    done = []
    for case, (schedule, m) in ((trial.cases[i], plans[i]) for i in (0, len(FIXED))):
        p, batch = case.params["p"], case.params["batch"]
        slots, clock, held, stage = _measure(p, batch, schedule, m)
        _judge(name, case, schedule, m, slots, clock, held, stage, plans)
        done.append(f"p={p}: {schedule} m={m}, bubble {slots:.2f} ({clock:.2f} on the clock), "
                    f"{held:.0f} ≤ {case.params['max_examples']} examples")
    trial.passed(f"on real workers — {'; '.join(done)}; and {len(trial) - 2} more budgets (up "
                 "to 8 stages, batches up to 512) met by the schedules' arithmetic")


def _judge(name: str, case: Any, schedule: str, m: int, slots: float, clock: float | None,
           held: float, stage: int, plans: list) -> None:
    """Fails if the plan breaks the case's bubble target or memory budget, saying which."""
    p, batch = case.params["p"], case.params["batch"]
    target, budget = case.params["max_bubble"], case.params["max_examples"]
    chose = (f"{name}(p={p}, batch={batch}, max_bubble={target:g}, max_examples={budget}) "
             f"chose {schedule} with m = {m}")
    unseen = answers.drawn(case.index >= len(FIXED), plans)
    measured = f" ({clock:.3f} on the clock)" if clock is not None else " (counted in slots)"
    if slots > target + 1e-9:
        fail(f"{chose}: its bubble is {slots:.3f} of each step{measured}, over {target:g}. "
             + _bubble_hint(p, m, target) + f"{unseen} ({case})")
    if held > budget + 0.25:
        fail(f"{chose}: stage {stage} kept the activations of {held:.0f} examples at once, "
             f"over {budget}. " + _memory_hint(p, batch, schedule, m) + f"{unseen} ({case})")


def _bubble_hint(p: int, m: int, target: float) -> str:
    need = int(np.ceil((p - 1) * (1 - target) / target - 1e-9))
    if m < p:
        return (f"The bubble is (p − 1)/(m + p − 1): with m = {m} ≤ p micro-batches most of "
                f"each step is filling and draining; it takes m ≥ {need}.")
    return (f"The bubble is (p − 1)/(m + p − 1), the same for GPipe and 1F1B: it falls to "
            f"{target:g} only at m ≥ {need}.")


def _memory_hint(p: int, batch: int, schedule: str, m: int) -> str:
    if schedule == "gpipe":
        return (f"GPipe runs every forward before any backward, so each stage keeps all m "
                f"micro-batches — the whole batch of {batch}, whatever m is. 1F1B keeps at "
                "most p − rank micro-batches.")
    return (f"1F1B keeps up to p micro-batches on the first stages (p − rank on rank rank), "
            f"here of up to ⌈{batch}/{m}⌉ = {-(-batch // m)} examples each: more, smaller "
            "micro-batches keep fewer examples.")
