"""Checks for lesson 13 (performance): reading real profiler traces of every rank (task 1,
implementation), the model FLOPs of a step and its MFU (task 2, reasoning), and the per-rank
batch that makes a data-parallel step compute-bound on a machine known only by measured
numbers (task 3, design).

Task 1's traces are made by the check, on real workers: training steps of lesson 12's GPT
under ``torch.profiler`` with DDP or a hand step, bucket sizes and world sizes drawn, the
ranks' files merged (``traces.merge_traces``); the learner's reading is held against the
course's own (``traces.summary``). Task 2's first case is lesson 12's GPT, its FLOPs
counted by ``FlopCounterMode`` too. Task 3's first case describes this machine as the check
measured it on two workers (matmul FLOP/s, α and β of gloo's allreduce), and the chosen
batch is run there: its compute must outlast its allreduce."""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import fail, on_workers, run_cases, stub_message, task
from ._diagnose import Case, apart, describe_value, explain, returned_none
from ._trial import Trial

__all__ = ["overlap_from_trace", "model_flops", "compute_bound_batch"]

_PKG = "ddl_lab.performance"


# ------------------------------------------------------ task 1 (implementation): a trace

TRACE_FIXED = [{"n": 2, "mode": "ddp", "bucket_mb": 0.05, "steps": 1},
               {"n": 2, "mode": "hand", "bucket_mb": 0.1, "steps": 1}]


def _draw_trace(rng: np.random.Generator) -> dict[str, Any]:
    return {"n": int(rng.choice([2, 3])), "mode": "ddp" if rng.random() < 0.75 else "hand",
            "bucket_mb": float(rng.choice([0.02, 0.03, 0.05, 0.08, 0.15])),
            "steps": int(rng.integers(1, 3))}


def _make_traces(cases: list[Case], root: str) -> list[str]:
    """The cases' merged traces, made on real workers (one call for all of them)."""
    from ddl_lab.performance import traces as T
    folders = [os.path.join(root, f"case{c.index}") for c in cases]
    for folder in folders:
        os.makedirs(folder)
    worlds = [(c.params["n"], (folder, c.params["mode"], c.params["bucket_mb"], T.TRACE_MODEL,
                               4, c.params["steps"], 1, c.index))
              for c, folder in zip(cases, folders)]
    paths = []
    for outcome, folder in zip(run_cases(T.profiled_steps, worlds, fn=T.profiled_steps,
                                         timeout=60.0), folders):
        if outcome.failure is not None:
            fail("the check could not make its traces: "
                 + outcome.failure.message("the profiled step", outcome.n))
        paths.append(T.merge_traces([r["path"] for r in outcome.results],
                                    os.path.join(folder, "merged.json")))
    return paths


def _unwritten(fn: Callable, root: str) -> bool:
    """Whether ``fn`` is the exercise's stub: it raises NotImplementedError on a small
    hand-made trace (two ranks, one backward event and one collective each) — asked before
    the workers profile anything, and nothing else about the answer is read."""
    from ddl_lab.performance.traces import BACKWARD, COLLECTIVE
    events = [{"ph": "X", "name": name, "pid": r, "tid": tid, "ts": ts, "dur": 10.0}
              for r in (0, 1) for name, tid, ts in ((BACKWARD + ": MmBackward0", 1, 0.0),
                                                    (COLLECTIVE, 2, 5.0))]
    path = os.path.join(root, "probe.json")
    with open(path, "w") as f:
        json.dump({"traceEvents": events}, f)
    try:
        fn(path)
    except NotImplementedError:
        return True
    except Exception:                       # judged on the real traces, with its message
        pass
    return False


def _readings(got: Any, n: int, name: str, case: Case) -> list[tuple[float, float]]:
    """The learner's answer as one (overlap, exposed) per rank, or a failure saying why."""
    want = (f"a list with one dict {{'overlap': share, 'exposed': seconds}} per rank, in "
            f"rank order ({n} here)")
    items = ([got[k] for k in sorted(got)] if isinstance(got, dict) and
             all(isinstance(k, (int, np.integer)) for k in got) else got)
    if not isinstance(items, (list, tuple)):
        fail(returned_none(got, name, want, f"{want} [{case}].") or "")
    if len(items) != n:
        one = (" — one rank's trace only: a merged trace holds every rank's events, one "
               "process (pid) per rank" if len(items) == 1 else "")
        fail(f"{name} returned {len(items)} readings for a trace of {n} ranks{one}; return "
             f"{want} [{case}].")
    out = []
    for r, item in enumerate(items):
        pair = (item.get("overlap"), item.get("exposed")) if isinstance(item, dict) else item
        both = answers.pair(pair)
        if both is None or not all(math.isfinite(v) for v in both):
            fail(f"{name} returned {describe_value(item)} for rank {r}; return {want} "
                 f"[{case}].")
        out.append(both)
    return out


def _trace_mistakes(path: str) -> dict[str, list[tuple[float, float]]]:
    """What each named mistake reads from the trace at ``path``, per rank."""
    from ddl_lab.performance import traces as T
    t = T.load(path)
    right = T.summary(t)
    launch = T.summary(t, collective=T.LAUNCH)
    annotated = T.summary(t, backward="backward")
    summed = []
    for row in right:
        total = sum(b - a for a, b in T.intervals(T.events(t, row["rank"], T.COLLECTIVE))) / 1e6
        summed.append((row["overlap"], total - row["hidden"]))
    return {
        "the collectives' whole wall time was returned as the exposed part: the exposed "
        "communication is what no backward work hides, the collectives' time minus the part "
        "under backward's events": [(r["overlap"], r["collective"]) for r in right],
        "the CPU-side launch events (c10d::allreduce_, on the thread that calls backward) "
        "were counted as the collective: they hand the tensor to gloo and return; the "
        "communication is gloo's own gloo:all_reduce events, on its pt_gloo_runloop threads":
            [(r["overlap"], r["exposed"]) for r in launch],
        "the step's \"backward\" annotation was taken for backward's work: it lasts until "
        "loss.backward() returns, which under DDP includes the wait for the last buckets' "
        "allreduces, when nothing is computed; backward's work is its "
        "autograd::engine::evaluate_function events": [(r["overlap"], r["exposed"])
                                                       for r in annotated],
        "one rank's trace only: every rank got rank 0's reading — a merged trace holds one "
        "process (pid) per rank; read each one's events": [(right[0]["overlap"],
                                                           right[0]["exposed"])] * len(right),
        "the collectives' durations were added up, but gloo runs two of them at once (two "
        "pt_gloo_runloop threads): take the union of their intervals, not the sum":
            summed,
        "the exposed time came back in microseconds: a trace's ts and dur are µs; return "
        "seconds": [(r["overlap"], r["exposed"] * 1e6) for r in right],
        "the overlap share was divided by backward's time: it is hidden ÷ the collectives' "
        "time": [(r["hidden"] / r["backward"] if r["backward"] else 0.0, r["exposed"])
                 for r in right],
    }


def _close(got: tuple[float, float], want: tuple[float, float]) -> bool:
    return (math.isclose(got[0], want[0], rel_tol=1e-3, abs_tol=1e-4) and
            math.isclose(got[1], want[1], rel_tol=1e-3, abs_tol=2e-6))


def _trace_verdict(got: list[tuple[float, float]], path: str) -> tuple[bool, set[str]]:
    """Whether ``got`` is the course's reading of the trace at ``path``, and the named
    mistakes that would have returned ``got`` on it (several where this trace cannot tell
    them apart; on a right answer, those that read this trace right too)."""
    from ddl_lab.performance.traces import summary
    right = [(r["overlap"], r["exposed"]) for r in summary(path)]
    return (all(_close(g, w) for g, w in zip(got, right)),
            {message for message, wrong in _trace_mistakes(path).items()
             if all(_close(g, w) for g, w in zip(got, wrong))})


def _trace_fault(got: list[tuple[float, float]], path: str, name: str,
                 named: set[str]) -> str:
    from ddl_lab.performance.traces import summary
    if named:
        return f"{name}(…): " + next(m for m in _trace_mistakes(path) if m in named)
    right = [(r["overlap"], r["exposed"]) for r in summary(path)]
    r = next(i for i, (g, w) in enumerate(zip(got, right)) if not _close(g, w))
    (go, ge), (wo, we) = got[r], right[r]
    return (f"rank {r}: {name} returned overlap {go:.4g} and exposed {ge:.6g} s, the course's "
            f"reading of the same trace is overlap {wo:.4g} and exposed {we:.6g} s. The "
            "collectives are the gloo:all_reduce events (union of their intervals), backward "
            "is the autograd::engine::evaluate_function events; overlap = the collectives' "
            "time under backward ÷ the collectives' time, exposed = the rest, in seconds.")


@task("performance", refuses=(_PKG, "summary", "phi"))
def overlap_from_trace(my_overlap_from_trace: Callable, seed: int = 0) -> None:
    """Lesson 13, task 1 (implementation): ``my_overlap_from_trace(path)`` reads the merged
    Chrome trace at ``path`` — one process (pid) per rank of a profiled training step — and
    returns, per rank in rank order, {"overlap": the share of the collectives' time spent
    under backward's work, "exposed": the seconds of collective time left uncovered}. The
    check profiles real steps on workers (DDP and a hand step, drawn bucket sizes, 2 and 3
    ranks) and compares your reading with the course's own reading of the same files."""
    trial = Trial("overlap_from_trace", my_overlap_from_trace, seed, TRACE_FIXED, draws=3,
                  draw=_draw_trace)
    name = trial.name
    root = tempfile.mkdtemp(prefix="ddl_lab-trace-", dir=os.environ.get("DDL_LAB_SHARED_DIR"))
    try:
        if _unwritten(my_overlap_from_trace, root):
            fail(stub_message(my_overlap_from_trace))
        paths = _make_traces(trial.cases, root)
        readings, wrong = [], None
        for case in trial:
            path = paths[case.index]
            got = _readings(trial.call(case, path), case.params["n"], name, case)
            readings.append((case.params["mode"], got))
            right, fits = _trace_verdict(got, path)
            if wrong is None and not right:     # the first wrong case is the one the message
                wrong = (case, got, path, fits)             # quotes; the later ones only
            elif wrong is not None:                         # narrow down which mistake
                wrong[3].intersection_update(fits or wrong[3])  # it was
            if wrong is not None and len(wrong[3]) <= 1:
                break
        if wrong is not None:
            case, got, path, named = wrong
            trial.judge(_trace_fault(got, path, name, named), case)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ddp = [o for mode, got in readings if mode == "ddp" for o, _ in got]
    hand = [o for mode, got in readings if mode == "hand" for o, _ in got]
    trial.passed(f"{len(trial)} traces of real steps on 2 and 3 ranks read as the course reads "
                 f"them (DDP hid {np.mean(ddp):.0%} of its collectives' time on average, the "
                 f"hand step {np.mean(hand):.0%})")


# --------------------------------------------------- task 2 (reasoning): FLOPs and MFU

_FLOP_ARGS = ("N", "L", "h", "s", "batch", "attention", "causal", "seconds", "peak")


def _lesson_case() -> dict[str, Any]:
    """Lesson 12's GPT at batch 4, its step timed and the matmul peak measured here."""
    from ddl_lab.performance.flops import gpt_matmul_params, timed_step
    from ddl_lab.performance.roofline import matmul_flop_s, threads
    from ddl_lab.transformers.train import MODEL
    with threads(1):
        seconds, peak = timed_step(MODEL, 4, repeats=2), matmul_flop_s(256, repeats=3)
    return {"N": gpt_matmul_params(MODEL), "L": MODEL.layers, "h": MODEL.hidden,
            "s": MODEL.seq, "batch": 4, "attention": True, "causal": False,
            "seconds": float(seconds), "peak": float(peak)}


FLOP_FIXED = [{"N": 1_300_000_000, "L": 24, "h": 2048, "s": 2048, "batch": 8,
               "attention": True, "causal": True, "seconds": 0.9, "peak": 312e12}]


def _draw_flops(rng: np.random.Generator) -> dict[str, Any]:
    L, h = int(rng.integers(2, 97)), 128 * int(rng.integers(2, 97))
    return {"N": int(12 * L * h * h + 50_000 * h), "L": L, "h": h,
            "s": int(2 ** rng.integers(7, 16)), "batch": int(rng.integers(1, 65)),
            "attention": bool(rng.random() < 0.7), "causal": bool(rng.random() < 0.6),
            "seconds": float(rng.uniform(0.05, 20)), "peak": float(rng.choice([1e11, 1e14,
                                                                             312e12, 989e12]))}


def _flops(p: dict[str, Any], mistake: str | None = None) -> tuple[float, float]:
    """(FLOPs of the step, MFU) as the lesson counts them, or as ``mistake`` would."""
    N, L, h, s, b = (p[k] for k in ("N", "L", "h", "s", "batch"))
    per_n = {"2N": 2, "forward only": 2, "4N": 4}.get(mistake or "", 6)
    attention, causal = p["attention"], p["causal"]
    if mistake == "no attention":
        attention = False
    if mistake == "attention always":
        attention = True
    if mistake == "non-causal":
        causal = False
    if mistake == "halved":
        causal = True
    att = (6.0 if causal else 12.0) * L * h * s if attention else 0.0
    if mistake == "forward only":
        att /= 3
    tokens = {"per token": 1, "per sequence": s, "per example batch": b}.get(mistake or "",
                                                                             b * s)
    flops = (per_n * N + att) * tokens
    mfu = flops / (p["seconds"] * p["peak"])
    return flops, mfu * (100 if mistake == "percent" else 1)


_FLOP_MISTAKES = {
    "2N": "2N a token is the forward pass only: a training step does 6N (2N forward, 4N "
          "backward: the input's gradient and the weight's, a matmul each)",
    "forward only": "the backward pass was forgotten: it costs twice the forward, for the "
                    "parameters (4N) and for attention alike",
    "4N": "4N a token counts backward as one matmul per weight: it does two (the input's "
          "gradient and the weight's), 2N + 4N = 6N",
    "non-causal": "the non-causal attention term 12·L·h·s for a causal model: under a "
                  "causal mask only the half of the scores below the diagonal is needed, "
                  "6·L·h·s",
    "halved": "the attention term was halved for a model that is not causal: every query "
              "sees every key, 12·L·h·s",
    "no attention": "the attention term was left out: attention's q·kᵀ and p·v hold no "
                    "parameter, so 6N does not count them — add 12·L·h·s (6·L·h·s causal)",
    "attention always": "the attention term was added where the count asks for 6N alone "
                        "(attention=False)",
    "per token": "FLOPs per token were returned: a step processes batch × s tokens",
    "per sequence": "the batch was forgotten: a step processes batch × s tokens",
    "per example batch": "the sequence length was forgotten in the token count: a step "
                         "processes batch × s tokens",
    "percent": "MFU came back as a percentage: return the fraction (0.42, not 42)",
}


@task("performance", refuses=(_PKG, "step_flops", "attention_flops"))
def model_flops(my_model_flops: Callable, seed: int = 0) -> None:
    """Lesson 13, task 2 (reasoning): ``my_model_flops(N, L, h, s, batch, attention, causal,
    seconds, peak)`` returns {"flops": the model FLOPs of one training step of a GPT with N
    matmul parameters, L layers of width h, on batch sequences of s tokens — attention's
    term included if ``attention``, for a causal mask if ``causal`` —, "mfu": its model
    FLOPs utilisation for a step of ``seconds`` on a machine of ``peak`` FLOP/s}. The first
    case is lesson 12's GPT, its FLOPs counted by FlopCounterMode as well."""
    trial = Trial("model_flops", my_model_flops, seed, [_lesson_case(), *FLOP_FIXED],
                  draws=8, draw=_draw_flops)
    name = trial.name
    for case in trial:
        p = case.params
        call = f"{name}({', '.join(f'{k}={p[k]!r:.12}' for k in _FLOP_ARGS)})"
        got = trial.call(case, *(p[k] for k in _FLOP_ARGS))
        if not (isinstance(got, dict) and {"flops", "mfu"} <= set(got)):
            fail(returned_none(got, name, 'a dict with "flops" and "mfu"',
                               f'a dict {{"flops": FLOPs of the step, "mfu": a fraction}} '
                               f'({case}).', call))
        flops = answers.answer(got["flops"], answers.Real(0, math.inf, "neither", "FLOPs"),
                               name, call, case)
        util = answers.answer(got["mfu"], answers.Real(0, math.inf, "neither", "MFU"), name,
                              call, case)
        want = _flops(p)
        rel = max(1e-6, answers.answer_rtol([got["flops"], got["mfu"]]))
        for what, value, right, i in (("flops", flops, want[0], 0), ("mfu", util, want[1], 1)):
            if math.isclose(value, right, rel_tol=rel):
                continue
            hint = explain(value, [(msg, _flops(p, m)[i]) for m, msg in _FLOP_MISTAKES.items()],
                           rtol=rel, right=right)
            shown, wanted = apart(value, right)
            fail(f"{call} returned {what} = {shown}, expected {wanted} ({case})"
                 + (f": {hint}." if hint else "."))
        if case.index == 0:
            from ddl_lab.performance.flops import gpt_counted_flops
            from ddl_lab.transformers.train import MODEL
            counted = gpt_counted_flops(MODEL, p["batch"])
            if abs(flops / counted - 1) > 0.02:
                fail(f"{call} returned flops = {flops:.6g}; FlopCounterMode counted {counted:,} "
                     f"in a real step of lesson 12's GPT ({case}).")
    trial.passed(f"lesson 12's GPT (within 2 % of FlopCounterMode's count of a real step) and "
                 f"{len(trial) - 1} more configurations, causal and not, with and without "
                 "attention's term, match 6N + 12·L·h·s (× ½ causal) and MFU")


# ---------------------------------------------- task 3 (design): a compute-bound batch

RATIO = 2.0                 # compute at least twice the allreduce
SLACK = 1.25                # at most 25 % above the least such batch
ATTEMPTS = 3                # real runs of the chosen batch before it is called comm-bound


def _least(d: dict[str, float], mistake: str | None = None) -> int:
    """The least per-rank batch whose compute is ≥ RATIO × the allreduce (or as a mistake
    would compute it)."""
    n, N = d["world"], d["params"]
    S = (1.0 if mistake == "bytes as params" else 4.0) * N
    alpha = 0.0 if mistake == "no alpha" else d["alpha"]
    if mistake == "one message":
        comm = alpha + S * d["beta"]
    elif mistake == "no share":
        comm = 2 * (n - 1) * alpha + 2 * S * d["beta"]
    else:
        comm = 2 * (n - 1) * alpha + 2 * (n - 1) / n * S * d["beta"]
    per_example = (2.0 if mistake == "2N" else 6.0) * N * \
        (1 if mistake == "tokens" else d["tokens"])
    ratio = 1.0 if mistake == "ratio 1" else RATIO
    return max(1, math.ceil(ratio * comm * d["flop_s"] / per_example * (1 - 1e-12)))


_BATCH_MISTAKES = {
    "ratio 1": "that is where compute only equals the allreduce: the task asks for compute "
               f"at least {RATIO:g} times the communication",
    "2N": "the FLOPs of an example were counted as 2N a token (forward only): a training "
          "step does 6N",
    "tokens": "the tokens of an example were left out: an example of s tokens costs 6N·s",
    "bytes as params": "the gradients' bytes were taken as the parameter count: float32 "
                       "gradients are 4 bytes each",
    "no alpha": "the latency α was left out: a ring allreduce pays 2(n−1)·α",
    "one message": "the allreduce was costed as one message, α + S·β: the ring takes 2(n−1) "
                   "rounds, 2(n−1)·α + 2(n−1)/n·S·β",
    "no share": "the ring's bytes were taken as 2S: each rank sends 2(n−1)/n·S",
}


def _draw_machine(rng: np.random.Generator) -> dict[str, float]:
    from ddl_lab.performance.crossover import describe
    while True:
        d = describe(flop_s=float(10 ** rng.uniform(10, 14.5)), alpha=float(10 ** rng.uniform(-6, -4)),
                     beta=float(1 / 10 ** rng.uniform(8.5, 11)),
                     params=int(10 ** rng.uniform(5, 9.5)), world=int(rng.choice([2, 4, 8, 64, 512])),
                     tokens=int(rng.choice([1, 1, 128, 1024])))
        least = _least(d)
        wrong = {_least(d, m) for m in _BATCH_MISTAKES}
        if 8 <= least <= 100_000 and all(w < least or w > SLACK * least + 1 for w in wrong):
            return d


def _measure_machine(width: int, depth: int) -> dict[str, float]:
    """This machine, as the check measures it on two workers: one rank's matmul FLOP/s and
    gloo's α, β (``crossover.link``, ``fit_ring``); the MLP's parameters."""
    from ddl_lab.performance import crossover as X
    sizes = (4 << 10, 64 << 10, 512 << 10, 2 << 20)
    runs = on_workers(X.sweep, 2, [1], width, depth, 3, fn=X.sweep)
    links = on_workers(X.link, 2, sizes, 5, fn=X.link)
    alpha, beta = X.fit_ring(2, sizes, [max(t) for t in zip(*links)])
    return X.describe(runs[0]["flop_s"], alpha, beta, runs[0]["params"], 2)


REAL = {"width": 256, "depth": 2}
FIXED_MACHINES = [{"flop_s": 312e12, "alpha": 5e-6, "beta": 1 / 50e9, "params": 1_300_000_000,
                   "tokens": 2048, "world": 64}]


def _batch(trial: Trial, case: Case, name: str) -> int:
    got = trial.call(case, dict(case.params), where=f"{name}(machine) ({case})")
    return answers.answer(got, answers.Whole(1, math.inf, what="a per-rank batch"), name,
                          f"{name}(machine)", case)


def _judge_batch(b: int, d: dict[str, float], name: str, case: Case, plans: list) -> None:
    least = _least(d)
    tail = answers.same_for_all(plans, "batch", "machines") + f" ({case})"
    if least <= b <= max(least + 1, math.ceil(SLACK * least)):
        return
    hint = next((msg for m, msg in _BATCH_MISTAKES.items() if _least(d, m) == b
                 and _least(d, m) != least), None)
    compute = b * 6.0 * d["params"] * d["tokens"] / d["flop_s"]
    from ddl_lab.performance.crossover import comm_seconds
    comm = comm_seconds(d)
    where = (f"{name}(…) chose b = {b}: compute {compute:.3g} s against an allreduce of "
             f"{comm:.3g} s ({compute / comm:.2f}×)")
    if b < least:
        fail(f"{where}, less than {RATIO:g}× — the least batch that reaches it is {least}"
             + (f": {hint}." if hint else ".") + tail)
    fail(f"{where}: more than {SLACK - 1:.0%} above the least batch that is compute-bound "
         f"by {RATIO:g}×, {least} — a larger batch costs memory and convergence for nothing"
         + (f": {hint}." if hint else ".") + tail)


@task("performance", refuses=(_PKG, "comm_seconds"))
def compute_bound_batch(my_compute_bound_batch: Callable, seed: int = 0) -> None:
    """Lesson 13, task 3 (design): ``my_compute_bound_batch(machine)`` gets a dict of measured
    numbers — "flop_s" (one rank's FLOP/s), "alpha" (s), "beta" (s per byte) of the link,
    "params" (the model's parameters, float32 gradients allreduced by a ring), "tokens" (an
    example's tokens) and "world" (ranks) — and returns the per-rank batch at which a
    data-parallel step is compute-bound: compute (6N FLOPs a token) at least twice the
    allreduce, and no more than 25 % above the least batch that achieves it. The first
    machines are drawn, judged by the cost model; the last is this one, measured by the
    check on two workers, and the chosen batch runs there: its measured compute must
    outlast its measured allreduce."""
    trial = Trial("compute_bound_batch", my_compute_bound_batch, seed, FIXED_MACHINES,
                  draws=5, draw=_draw_machine, plan=True)
    name = trial.name
    plans = [_batch(trial, c, name) for c in trial]
    for case, b in zip(trial, plans):
        _judge_batch(b, case.params, name, case, plans)
    here = Trial("compute_bound_batch", my_compute_bound_batch, seed,
                 [_measure_machine(**REAL)])      # this machine, measured: shown nowhere
    case = here.cases[0]
    plans.append(_batch(here, case, name))
    _judge_batch(plans[-1], case.params, name, case, plans)
    from ddl_lab.performance.crossover import sweep
    tries = []
    for _ in range(ATTEMPTS):               # a load spike on a shared machine slows gloo's
        run = on_workers(sweep, 2, [plans[-1]], REAL["width"], REAL["depth"], 5, fn=sweep)
        tries.append([float(np.mean([r[k][0] for r in run])) for k in ("compute", "comm")])
        compute, comm = tries[-1]                   # loopback for a while: a right batch
        if compute >= comm:                         # passes as soon as one run shows it
            break
    else:
        runs = "; ".join(f"{c * 1e3:.3g} ms against {m * 1e3:.3g} ms" for c, m in tries)
        fail(f"{name}(machine) chose b = {plans[-1]} for this machine; run on two workers "
             f"{ATTEMPTS} times, its forward and backward against the allreduce of its "
             f"gradients took {runs}: still communication-bound ({case}).")
    trial.passed(f"b = {plans[-1]} ran compute-bound on two workers here (compute "
                 f"{compute * 1e3:.2f} ms, allreduce {comm * 1e3:.2f} ms); {len(trial)} "
                 "more machines, up to 512 ranks, met by the cost model")
