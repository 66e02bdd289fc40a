"""Lesson 08's reasoning and design checks (``check/compression.py`` exports them): the size
of a Strom message after delta + varint coding, compared with the lesson's own encoder; and a
threshold τ (with or without error feedback), chosen from a sample gradient, that cuts the
traffic by 99 % within one point of fp32's accuracy, trained on 4 real workers."""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np
import torch

from ddl_lab.runtime.worlds import WorldFailed

from . import _answers as answers
from ._core import call_local, fail, passed, run_in_world, task
from ._diagnose import Cases, describe_value, returned_none

# ------------------------------------------------------------------ reasoning: message size


def _varint_len(v: int) -> int:
    """Bytes of v as an LEB128 varint: 7 bits a byte, at least one."""
    return max(1, math.ceil(int(v).bit_length() / 7))


def _message(d: int, k: int, length: Callable[[int], int] = _varint_len, sign_bytes: Any = None,
             header: bool = True, first: str = "itself") -> float:
    """Bytes of Strom's message for k entries at 0, g, …, (k − 1)g, g = d // k: the count,
    the packed sign bits, the first index and k − 1 gaps, each a varint."""
    g = d // k
    signs = math.ceil(k / 8) if sign_bytes is None else sign_bytes(k)
    head = length(k) if header else 0
    if first == "positions":
        return head + signs + sum(length(i * g) for i in range(k))
    return head + signs + (length(g) if first == "gap" else length(0)) + (k - 1) * length(g)


def _size_mistakes() -> dict[str, Callable[[int, int], float]]:
    return {
        "you coded the positions themselves; delta coding sends the GAPS between sorted "
        "indices (the first index as itself), and a gap of d // k needs far fewer bytes than a "
        "position near d": lambda d, k: _message(d, k, first="positions"),
        "that is 4 bytes per index (int32): after delta + varint coding each gap takes "
        "⌈bits/7⌉ bytes": lambda d, k: _varint_len(k) + math.ceil(k / 8) + 4 * k,
        "one byte per sign: the k signs are bits, packed 8 to a byte, ⌈k/8⌉ bytes":
            lambda d, k: _message(d, k, sign_bytes=lambda k: k),
        "the count is missing: the message starts with k itself, as a varint":
            lambda d, k: _message(d, k, header=False),
        "the first index is sent as itself (here 0, one byte), not as a gap of d // k":
            lambda d, k: _message(d, k, first="gap"),
        "a varint byte carries 7 bits: values up to 127 take one byte, 128 … 16,383 two — "
        "you gave a value of exactly 7, 14, … bits one byte too many":
            lambda d, k: _message(d, k, length=lambda v: int(v).bit_length() // 7 + 1),
        "log₂ v undercounts the bits of a power of two (128 has 8 bits, log₂ 128 = 7): the "
        "bits of v are ⌊log₂ v⌋ + 1, v.bit_length()":
            lambda d, k: _message(d, k, length=lambda v: max(1, math.ceil(math.log2(v) / 7))
                                  if v > 0 else 1),
    }


_SIZE_FIXED = [{"d": 1000, "k": 10}, {"d": 1280, "k": 10}, {"d": 8970, "k": 45},
               {"d": 5, "k": 5}, {"d": 1, "k": 1}, {"d": 2_000_000, "k": 130},
               {"d": 3_000_000, "k": 150}]


def _size_draw(rng: np.random.Generator) -> dict[str, Any]:
    d = int(10 ** rng.uniform(1, 7))
    return {"d": d, "k": int(rng.integers(1, min(d, 5000) + 1))}


def _real_message(d: int, k: int) -> int:
    """The lesson's own encoder (no entropy coder) on a vector whose entries at 0, g, … are
    ±2 (beyond τ = 1) and 0 elsewhere; its flag byte naming the coder left out."""
    from ddl_lab.compression.compressors import Threshold
    x = torch.zeros(d)
    x[torch.arange(k) * (d // k)] = torch.tensor([2.0, -2.0]).repeat(k)[:k]
    return len(Threshold(1.0, coder="none").encode(x)) - 1


@task("compression")
def strom_bytes(my_strom_bytes: Callable[[int, int], int], seed: int = 0) -> None:
    """Lesson 08, reasoning: ``my_strom_bytes(d, k)`` is the size in bytes of Strom's message
    for k sent entries of a d-entry vector, at 0, g, …, (k − 1)g with g = d // k: the count k
    as a varint, ⌈k/8⌉ bytes of sign bits, then the first index and the k − 1 gaps g, each
    an LEB128 varint. The lesson's encoder, run on the same entries, agrees."""
    name = getattr(my_strom_bytes, "__name__", "your function")
    cases = list(Cases("strom_bytes", seed, _SIZE_FIXED, draws=3, draw=_size_draw))
    got = []
    for case in cases:
        d, k = case.params["d"], case.params["k"]
        out = call_local(my_strom_bytes, d, k)
        if answers.scalar(out) is None:
            fail(returned_none(out, name, "a number of bytes") or
                 f"{name}({d}, {k}) returned {describe_value(out)}; return a number of bytes "
                 f"({case}).")
        got.append(answers.scalar(out))              # a whole number: exact in float32 too
    for case, g in zip(cases, got):
        d, k = case.params["d"], case.params["k"]
        want = _message(d, k)
        if g == want:
            continue
        hint = next((h for h, f in _size_mistakes().items()
                     if all(f(c.params["d"], c.params["k"]) == v for c, v in zip(cases, got))),
                    None)
        if hint is None and not g.is_integer():
            hint = "a message is a whole number of bytes: round the sign bits up, ⌈k/8⌉"
        fail(f"{name}(d={d:,}, k={k:,}) returned {g:,.6g}, expected {want:,.0f} (count "
             f"{_varint_len(k)} + signs {math.ceil(k / 8)} + first index {_varint_len(0)} + "
             f"{k - 1:,} gaps of {d // k:,} × {_varint_len(d // k)})"
             + (f": {hint}." if hint else ".") + f" ({case})")
    d, k = 8970, 45
    real = _real_message(d, k)
    passed("strom_bytes", f"right on {len(cases)} cases (1 to 3,000,000 entries, gaps across "
           f"the 1-, 2- and 3-byte varints); the lesson's encoder sends {real} bytes for {k} of "
           f"{d:,} entries (plus one byte naming its coder) — {4 * k + math.ceil(k / 8)} with "
           f"32-bit indices, {4 * d:,} as fp32")


# ------------------------------------------------------------------ design: choosing τ

PLAN_WORKERS = 4
PLAN_EPOCHS = 8             # the lesson's run: 168 steps of 4 × 16 examples
PLAN_SAVING = 0.99          # at least 99 % less traffic than fp32
PLAN_POINTS = 1.0           # within one point of fp32's test accuracy
_SCALES = {1.0: "the lesson's own gradients",
           16.0: "the loss summed over the 16 examples of a minibatch instead of averaged"}


def _scale_words(c: float) -> str:
    return _SCALES.get(c, f"the loss multiplied by {c:g} (as loss scaling in mixed-precision "
                          "training does)")


def _scale_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"scale": float(2.0 ** int(rng.choice([-3, -2, -1, 2, 3, 5, 8, 10])))}


def sample_gradient() -> torch.Tensor:
    """Rank 0's gradient of its first minibatch at the initial model (the lesson's run)."""
    from ddl_lab.compression.training import batches, gradient, setup
    net, X, y, _, per_epoch, gen = setup("mlp", 0, 16, PLAN_WORKERS, 0)
    batch = next(batches(len(y), 16, per_epoch, 1, gen))
    return gradient(net, X[batch], y[batch])[0]


def _train(scheme: Any) -> Any:
    from ddl_lab.compression.training import train_worker
    return train_worker(scheme, epochs=PLAN_EPOCHS)


@functools.lru_cache(maxsize=16)
def _trained(relative_tau: float | None, ef: bool) -> tuple[float, float, int]:
    """(test accuracy, bytes per update, fp32 bytes) of the lesson's run on 4 workers, with
    Strom's threshold at ``relative_tau`` (None: fp32). Synchronous training with fixed seeds
    is deterministic, so a plan asked for twice is trained once."""
    from ddl_lab.compression.compressors import Scheme
    from ddl_lab.compression.training import merge_logs
    scheme = Scheme("fp32") if relative_tau is None else Scheme("threshold", relative_tau, ef=ef)
    result = merge_logs(run_in_world(_train, PLAN_WORKERS, scheme, fn=_train, timeout=120))
    return result.final_accuracy, result.update_bytes, result.fp32_bytes


_SHOWN = [{"scale": 1.0}, {"scale": 16.0}]          # the scales the prompt names


def _ask(fn: Callable, base: torch.Tensor, case: Any, name: str) -> Any:
    """The learner's plan for the sample gradient at this case's scale; a plan that fails only
    at a scale the prompt does not name is named as a table of the prompt's scales."""
    c = case.params["scale"]
    try:
        out = fn((base * c).clone())
    except Exception as e:                         # noqa: BLE001 — worded below or by call_local
        if case.params in _SHOWN or not isinstance(e, LookupError):
            return call_local(fn, (base * c).clone())
        out = e
    if case.params not in _SHOWN and (out is None or isinstance(out, LookupError)):
        what = "returned None" if out is None else f"raised {type(out).__name__}: {out}"
        fail(f"for {_scale_words(c)} (gradients ×{c:g}, a scale the prompt does not name) "
             f"{name} {what}. τ must be a function of the sample gradient it is given, not a "
             f"table of the prompt's cases: the check draws other scales. ({case})")
    return out


def _strom_choice(out: Any, name: str, case: Any) -> tuple[float, bool]:
    if problem := answers.plan(out, name, {"tau": "", "error_feedback": ""}, f" ({case})"):
        fail(problem)
    tau, ef = out["tau"], out["error_feedback"]
    if type(tau).__module__.startswith("torch") and getattr(tau, "numel", lambda: 2)() == 1:
        tau = tau.item()
    if isinstance(tau, (bool, np.bool_)) or not isinstance(tau, (int, float, np.number)) \
            or not 0 < float(tau) < math.inf:
        fail(f"{name} chose tau = {describe_value(tau)}: τ is a positive number, in the units "
             f"of the gradient ({case}).")
    if not isinstance(ef, (bool, np.bool_)):
        fail(f"{name} chose error_feedback = {ef!r}: say True or False ({case}).")
    return float(tau), bool(ef)


@task("compression")
def strom_plan(my_strom_plan: Callable[[torch.Tensor], dict], seed: int = 0) -> None:
    """Lesson 08, design: ``my_strom_plan(sample_grad)`` returns {tau, error_feedback} such
    that the lesson's run (4 workers, 8 epochs, Strom's threshold) sends at least 99 % fewer
    bytes than fp32 and ends within one point of fp32's test accuracy — for gradients of
    several scales: the loss multiplied by c, the rate divided by c. A threshold τ on
    gradients c× larger sends exactly what τ/c sends on the lesson's, so that is what trains."""
    name = getattr(my_strom_plan, "__name__", "your function")
    cases = list(Cases("strom_plan", seed, _SHOWN, draws=3, draw=_scale_draw))
    base = sample_gradient()
    plans = [_strom_choice(_ask(my_strom_plan, base, case, name), name, case) for case in cases]
    try:
        fp32_acc, _, fp32_bytes = _trained(None, False)
        results = []
        for case, (tau, ef) in zip(cases, plans):
            c = case.params["scale"]
            acc, sent, _ = _trained(float(f"{tau / c:.7g}"), ef)   # one run per τ/c
            results.append((acc, sent))
            message = _plan_fault(tau, ef, c, acc, sent, fp32_acc, fp32_bytes, plans, cases)
            if message:
                fail(f"{name} chose τ = {tau:.4g}{'' if ef else ' without error feedback'} for "
                     f"{_scale_words(c)} — {message} ({case})")
    except WorldFailed as e:
        fail(e.failure.message(name, PLAN_WORKERS))
    acc, sent = results[0]
    scales = ", ×".join(f"{c.params['scale']:g}" for c in cases)
    passed("strom_plan", f"{len(cases)} gradient scales (×{scales}); "
           f"the lesson's run on 4 workers with your τ: {100 * acc:.1f}% test accuracy (fp32 "
           f"{100 * fp32_acc:.1f}%) with {sent:,.0f}-byte updates, "
           f"{100 * (1 - sent / fp32_bytes):.2f}% less than fp32's {fp32_bytes:,}")


def _plan_fault(tau: float, ef: bool, c: float, acc: float, sent: float, fp32_acc: float,
                fp32_bytes: int, plans: list, cases: list) -> str | None:
    """What is wrong with one trained plan, or None."""
    share = sent / fp32_bytes
    ran = (f"the run sent {sent:,.0f} bytes per update ({100 * share:.2f}% of fp32's "
           f"{fp32_bytes:,}) and reached {100 * acc:.1f}% test accuracy (fp32: "
           f"{100 * fp32_acc:.1f}%)")
    relative = [t / k.params["scale"] for (t, _), k in zip(plans, cases)]
    scaled = ("" if max(relative) <= 1.01 * min(relative) else
              " Your τ did not grow with the gradients: divided by each case's scale it is "
              + ", ".join(f"{t / k.params['scale']:.3g}" for (t, _), k in zip(plans, cases))
              + " — a threshold is in the units of the gradient, so scale it with a size of "
                "the sample (its mean |g|, its RMS, its largest entry …).")
    if share > 1 - PLAN_SAVING:
        return (f"{ran}: less than 99 % saved, so τ is too small here. With error feedback, "
                "entries below τ grow in the residual until they cross it, so over time far "
                "more than the largest 1 % of one gradient are sent." + scaled)
    if acc < fp32_acc - PLAN_POINTS / 100:
        why = ("Without error feedback the entries below τ are dropped for good, and nearly "
               "all of them are below τ: the model barely learns — keep the residual" if not ef
               else "This τ is too large: few entries cross it, the residual holds back most "
                    "of every update and the model learns too slowly")
        return f"{ran}: more than one point below fp32. {why}." + scaled
    return None
