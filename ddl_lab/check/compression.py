"""Checks for lesson 08 (compressed updates): Strom's threshold, 1-bit SGD with error feedback
(trained on real workers), QSGD, index coding, a gossip step (on real workers), a Strom message's
size and a choice of τ — judged in the learner's dtype against references written here."""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np
import torch

from ddl_lab.compression.compressors import (QSGD, ErrorFeedback, OneBit, Scheme, Threshold,
                                             encode_indices, varint_encode)
from ddl_lab.compression.gossip import mixing_matrix, neighbours, second_eigenvalue
from ddl_lab.runtime.worlds import RankFailure

from . import _answers as answers
from ._core import call_local, fail, judge, on_workers, task
from ._diagnose import (Case, Snapshot, as_array, describe_value, differs, explain,
                        returned_none, same, table, tolerance)
from ._trial import Trial

__all__ = ["strom_threshold", "error_feedback_onebit", "qsgd_rounding", "index_coding",
           "strom_bytes", "strom_plan", "gossip_step"]

_PACKAGE = "ddl_lab.compression"
# ----------------------------------------------------------------- task 1: Strom

def _strom_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor, float]:
    """grad and residual; their first four entries sum exactly to ±τ (sent: |v| ≥ τ)."""
    tau = case.params["tau"]
    grad, residual = _inputs(case, 2)
    k = min(4, grad.numel())
    grad[:k] = torch.tensor([tau / 2, -tau / 2, tau, -tau][:k], dtype=grad.dtype)
    residual[:k] = torch.tensor([tau / 2, -tau / 2, 0.0, 0.0][:k], dtype=grad.dtype)
    return grad, residual, tau


@task("compression", refuses=(_PACKAGE, "strom_step", "_strom_step"))
def strom_threshold(my_strom_threshold: Callable, seed: int = 0) -> None:
    """Lesson 08, task 1: ``my_strom_threshold(grad, residual, tau)`` returns (indices, signs,
    new_residual): v = residual + grad; the indices where |v| ≥ τ (sorted, from 0), their
    signs ±1, and v with τ·sign taken off the sent entries. ``grad`` stays unchanged."""
    trial = Trial("strom_threshold", my_strom_threshold, seed, [
        {"d": 1000, "tau": 0.5, "dtype": "float32", "scale": 0.3},
        {"d": 300, "tau": 0.125, "dtype": "float64", "scale": 0.1},
        {"d": 1, "tau": 0.25, "dtype": "float32", "scale": 0.3},
        {"d": 0, "tau": 0.5, "dtype": "float32"}], draws=3, draw=lambda rng: {
            "d": int(rng.choice([2, 17, 100, 1000, 4099])), "tau": int(rng.integers(3, 64)) / 64,
            "dtype": str(rng.choice(["float32", "float64"])),
            "scale": round(float(rng.uniform(0.05, 2.0)), 3)})
    for case in trial:
        grad, residual, tau = _strom_inputs(case)
        idx, signs, new = _answer(trial, case, (grad, residual.clone(), tau), {"grad": grad},
                                  ("indices", "signs", "new_residual"))
        judge(_strom_fault(idx, signs, new, grad, residual, tau), case, "({})")
    sent, err = _conservation(trial.fn, trial.name, 0.5)
    size = len(Threshold(0.5).encode(torch.ones(4)))
    trial.passed(f"right on {len(trial)} cases (0 to 4,099 entries, float32 and float64, τ = "
                 f"1/64 … 1, entries exactly at ±τ); over 40 steps you sent {sent} entries and Σ "
                 f"decoded + residual = Σ gradients (max error {err:.1e}): nothing is lost, only "
                 f"delayed. Each sent entry costs one sign bit and a coded index ({size} bytes "
                 "for 4 entries).")


def _strom_fault(idx: np.ndarray, signs: np.ndarray, new: np.ndarray, grad: torch.Tensor,
                 residual: torch.Tensor, tau: float) -> str | None:
    """The first of the indices, the signs and the new residual that is wrong, in words."""
    v, g = (residual + grad).numpy(), grad.numpy()
    want_idx = np.flatnonzero(np.abs(v) >= tau)
    want_signs = np.where(v[want_idx] >= 0, 1, -1)
    want_new = v.copy()
    want_new[want_idx] -= tau * want_signs
    if idx.dtype == bool:
        return ("the indices came back as a boolean mask; return the positions of the sent "
                "entries, e.g. `torch.nonzero(mask).flatten()`")
    if idx.dtype.kind not in "iu":
        return (f"the indices are {idx.dtype} numbers; return integers (positions), e.g. "
                "`torch.nonzero(mask).flatten()`")
    idx, signs = idx.ravel(), signs.ravel()
    if not np.array_equal(idx, want_idx):
        hints = {"the indices are off by one: count from 0, as torch.nonzero does": want_idx + 1,
                 "you thresholded the gradient alone: add the residual first, v = residual + "
                 "grad, and compare |v| with τ — that is how small gradients add up until sent":
                     np.flatnonzero(np.abs(g) >= tau),
                 "entries with |v| exactly τ are missing: send every entry with |v| ≥ τ":
                     np.flatnonzero(np.abs(v) > tau),
                 "the indices are right but not in increasing order; sort them (delta coding "
                 "needs sorted indices)": lambda got: sorted(got.tolist()) == want_idx.tolist(),
                 **{f"you used τ = {c:g}, not the tau given ({tau:g})": np.flatnonzero(
                     np.abs(v) >= c) for c in (0.5, 1.0, 0.1, 0.01, 0.25) if c != tau}}
        return explain(idx, hints, rtol=0.0) or (
            f"expected {want_idx.size} indices (the entries with |residual + grad| ≥ τ = "
            f"{tau:g}), got {idx.size}; the first expected are {want_idx[:5].tolist()}, yours "
            f"{idx[:5].tolist()}")
    if not np.array_equal(signs, want_signs):
        return explain(signs, {
            "the signs are 0/1; send them as +1/−1 (each sent entry decodes to sign·τ)":
                (want_signs > 0).astype(int),
            "the signs are those of grad; use the sign of v = residual + grad, the value being "
            "sent": np.where(g[want_idx] >= 0, 1, -1)}, rtol=0.0) or (
            f"the signs differ: {differs(want_signs, signs, rtol=0.0)}. The sign of entry i is "
            "that of v = residual + grad (+1 for v ≥ τ, −1 for v ≤ −τ)")
    new = new.ravel() if new.size == want_new.size else new
    if same(want_new, new, scale=max(tau, 1e-3)):
        return None
    zeroed, flipped = v.copy(), v.copy()
    zeroed[want_idx] = 0
    flipped[want_idx] += tau * np.sign(v[want_idx])
    return explain(new, {
        "the new residual is all zeros: the residual was not kept. Entries that were not sent, "
        "and what ±τ did not carry of the sent ones, must wait in the residual for the next "
        "step": np.zeros_like(v),
        "the new residual is v = residual + grad unchanged: take τ·sign off the sent entries, "
        "since that part has now been sent": v,
        "the sent entries' residual was set to 0, but a sent entry only carries ±τ: keep "
        "v − τ·sign there (the part of v beyond τ is still owed)": zeroed,
        "the residual grew at the sent entries: subtract τ·sign (what was sent), do not add "
        "it": flipped}) or (
        f"the new residual differs: {differs(want_new, new, scale=max(tau, 1e-3))}. It should "
        "be v = residual + grad, minus τ·sign at the sent entries")


def _conservation(fn: Callable, name: str, tau: float) -> tuple[int, float]:
    """40 steps feeding the learner's residual back: Σ decoded + residual = Σ grads."""
    g = torch.Generator().manual_seed(3)
    residual, total, count = torch.zeros(300), torch.zeros(300, dtype=torch.float64), 0
    for _ in range(40):
        grad = torch.randn(300, generator=g) * 0.2 + 0.05
        idx, signs, new = answers.arrays(call_local(fn, grad, residual, tau),
                                         ("indices", "signs", "new_residual"), name)
        residual = torch.from_numpy(np.array(new, dtype=np.float32).ravel())
        total += grad.double()
        np.subtract.at(total.numpy(), idx.ravel().astype(int), tau * signs.ravel())
        count += idx.size
    err = float((total - residual.double()).abs().max())
    if err > 1e-3:
        fail(f"over 40 steps, Σ decoded + residual differs from Σ gradients by {err:.3g}: "
             "something is lost between steps (is the residual carried over?).")
    return count, err


# ------------------------------------------------------- task 1: 1-bit with error feedback

class LearnerOneBitEF(ErrorFeedback):
    """The learner's ``(grad, residual) -> (q, residual)`` as a compressor: q is ±scale, so
    it travels losslessly as one bit per entry and one float."""

    def __init__(self, fn: Callable):
        super().__init__(OneBit())
        self.fn, self.name = fn, "your 1-bit + EF"

    def encode(self, x: torch.Tensor) -> bytes:
        g = torch.as_tensor(x).detach().float().reshape(-1)
        if self.residual is None:
            self.residual = torch.zeros_like(g)
        q, new = self.fn(g, self.residual)
        self.residual = torch.as_tensor(np.asarray(new), dtype=torch.float32).reshape(-1)
        return OneBit(bucket=g.numel()).encode(torch.as_tensor(np.asarray(q)))

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        return OneBit(bucket=numel).decode(data, numel)


@task("compression", refuses=(_PACKAGE, "ef_onebit_step", "_ef_onebit_step"))
def error_feedback_onebit(my_error_feedback_onebit: Callable, seed: int = 0, world_size: int = 4,
                          epochs: int = 4, min_accuracy: float = 0.85) -> None:
    """Lesson 08, task 1: ``my_error_feedback_onebit(grad, residual)`` returns (q, new_residual)
    with v = grad + residual, q = mean|v|·sign(v) (sign(0) = +1), new_residual = v − q; then
    it trains the digits MLP on ``world_size`` real workers."""
    trial = Trial("error_feedback_onebit", my_error_feedback_onebit, seed, [
        {"d": 500, "dtype": "float32", "scale": 0.7}, {"d": 1, "dtype": "float32", "scale": 3.0},
        {"d": 2, "dtype": "float64", "scale": 0.0}], draws=3, draw=lambda rng: {
            "d": int(rng.choice([2, 3, 64, 1000, 4099])),
            "dtype": str(rng.choice(["float32", "float64"])),
            "scale": round(float(10 ** rng.uniform(-3, 1)), 5)}, name="yours", timeout=120)
    for case in trial:
        grad, residual = _inputs(case, 2)
        k = min(3, grad.numel())
        residual[:k] = -grad[:k]                  # v = 0 exactly: sign(0) counts as +
        q, new = _answer(trial, case, (grad, residual.clone()), {"grad": grad},
                         ("q", "new_residual"))
        judge(_ef_fault(q, new, grad.numpy(), residual.numpy()), case, "({})")
    from ddl_lab.compression.training import merge_logs, train_worker
    result = merge_logs(trial.world(train_worker, world_size, LearnerOneBitEF(trial.fn), epochs))
    if result.final_accuracy < min_accuracy:
        fail(f"on {world_size} workers your 1-bit + EF reached {100 * result.final_accuracy:.1f}% "
             f"test accuracy after {epochs} epochs; the reference reaches over "
             f"{100 * min_accuracy:.0f}%.")
    trial.passed(f"q and the residual match on {len(trial)} cases (1 to 4,099 entries, float32 "
                 f"and float64, zeros in v); trained on {world_size} workers for "
                 f"{len(result.loss)} steps: {100 * result.final_accuracy:.1f}% test accuracy "
                 f"with {result.update_bytes:,.0f}-byte updates, {result.reduction:.0f}× less "
                 "than fp32.")


def _ef_fault(q: np.ndarray, new: np.ndarray, grad: np.ndarray, residual: np.ndarray) -> str | None:
    """What is wrong with q, else with the new residual, which must be v − q for the
    learner's own (right) q, in the precision of q and new."""
    v = grad + residual
    sign = np.where(v >= 0, 1.0, -1.0)
    want = (np.abs(v).mean() * sign).astype(v.dtype)
    q, new = (a.ravel() if a.size == v.size else a for a in (q, new))
    scale = float(np.abs(want).max()) if want.size else 1.0
    if not same(want, q, scale=scale):
        return explain(q, {
            "q ignores the residual: quantize v = grad + residual, not the gradient alone":
                np.abs(grad).mean() * np.where(grad >= 0, 1.0, -1.0),
            "q is ±1: scale the signs by mean|v| so that q keeps the size of the update": sign,
            "the scale is max|v|; use mean|v| (it minimises ‖v − scale·sign(v)‖)":
                np.abs(v).max() * sign,
            "the scale is the root mean square of v; use mean|v| (it minimises "
            "‖v − scale·sign(v)‖)": np.sqrt((v * v).mean()) * sign,
            "the scale is mean(v), which can be negative or 0; use mean|v|": v.mean() * sign,
            "entries with v = 0 got q = 0 (torch.sign(0) is 0): every entry sends one bit, so "
            "treat 0 as +: `torch.where(v >= 0, 1.0, -1.0)`": np.abs(v).mean() * np.sign(v)}
        ) or (f"q differs: {differs(want, q, scale=scale)}; expected mean|v|·sign(v), "
              "v = grad + residual")
    scale = float(np.abs(v).max()) if v.size else 1.0
    if same(v - q, new, rtol=tolerance(q, new, v), scale=scale):
        return None
    return explain(new, {
        "the new residual is all zeros: without it this is plain 1-bit SGD; keep v − q, what "
        "the signs failed to carry, for the next step": lambda got: not np.any(got),
        "the residual came back unchanged: it must become v − q": residual,
        "the new residual has the wrong sign: it is v − q (what is still owed), not q − v":
            q - v}) or (f"the new residual differs: {differs(v - q, new, scale=scale)}; "
                        "expected v − q")


# ------------------------------------------------------------------ shared by the tasks

def _inputs(case: Case, count: int) -> list[torch.Tensor]:
    """``count`` random vectors of the case's length and dtype, values far from ±1."""
    d, dtype = case.params["d"], case.params["dtype"]
    return [torch.from_numpy(case.rng.normal(size=d) * case.params.get("scale", 1.0))
            .to(getattr(torch, dtype)) for _ in range(count)]


def _answer(trial: Trial, case: Case, args: tuple, unchanged: dict[str, Any],
            names: tuple[str, ...] = ()) -> Any:
    """The learner's answer to ``args`` (its tuple of ``names`` as arrays, if named); it
    fails if the function changed one of the ``unchanged`` inputs in place."""
    snap = Snapshot(**unchanged)
    out = trial.call(case, *args)
    judge(snap.changed(trial.name), case, "({})")
    return answers.arrays(out, names, trial.name) if names else out


# ------------------------------------------------------------------ task 2: QSGD

DRAWS = 3000
BIAS_LIMIT = 5.0        # standard errors


def _qsgd_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    d = case.params["d"]
    if case.params.get("onehot"):
        v = torch.zeros(d, dtype=getattr(torch, case.params["dtype"]))
        v[d // 2] = -3.0                          # r = s exactly there: the top level
    else:
        v = _inputs(case, 1)[0] * torch.linspace(0.1, 2.0, d, dtype=torch.float64).to(
            getattr(torch, case.params["dtype"]))
    return v, torch.from_numpy(case.rng.random(d)).to(v.dtype)


def _qsgd_ref(v: np.ndarray, s: int, u: np.ndarray, norm: float | None = None) -> np.ndarray:
    """The levels, computed in v's own dtype (as a torch answer would)."""
    norm = float(np.sqrt((v * v).sum(dtype=v.dtype))) if norm is None else norm
    if norm == 0:
        return np.zeros(v.shape, dtype=np.int64)
    r = np.abs(v) / v.dtype.type(norm) * v.dtype.type(s)
    low = np.floor(r)
    return (np.sign(v) * (low + (u.astype(v.dtype) < r - low))).astype(np.int64)


@task("compression", refuses=(_PACKAGE, "qsgd_levels", "_qsgd_levels"))
def qsgd_rounding(my_qsgd_rounding: Callable, seed: int = 0) -> None:
    """Lesson 08, task 2: ``my_qsgd_rounding(v, s, u)`` returns QSGD's signed integer levels:
    with r = |v|/‖v‖₂·s, level = ⌊r⌋ + 1 if u < r − ⌊r⌋ else ⌊r⌋, times sign(v)."""
    trial = Trial("qsgd_rounding", my_qsgd_rounding, seed, [
        {"d": 256, "s": 4, "dtype": "float32", "scale": 1.0},
        {"d": 16, "s": 4, "dtype": "float32", "scale": 0.0},
        {"d": 9, "s": 7, "dtype": "float64", "onehot": True},
        {"d": 1, "s": 1, "dtype": "float32", "scale": 0.3}], draws=3, draw=lambda rng: {
            "d": int(rng.choice([1, 2, 3, 50, 256, 1000])), "s": int(rng.integers(1, 17)),
            "dtype": str(rng.choice(["float32", "float64"])),
            "scale": round(float(10 ** rng.uniform(-3, 2)), 5)})
    for case in trial:
        v, u = _qsgd_inputs(case)
        s = case.params["s"]
        got = _levels(trial, v, s, u, case)
        v_np, u_np = v.numpy(), u.numpy()
        exact = _qsgd_ref(v_np.astype(np.float64), s, u_np.astype(np.float64))
        if not (np.array_equal(got, exact) or np.array_equal(got, _qsgd_ref(v_np, s, u_np))):
            fail(f"{_levels_fault(trial, got, exact, v_np, s, u_np)} ({case})")
    v, _ = _qsgd_inputs(trial.cases[0])
    worst = _bias(trial, v, 4, trial.cases[0])
    nbytes = len(QSGD(4, bucket=v.numel()).encode(v))
    trial.passed(f"levels match on {len(trial)} cases (1 to 1,000 entries, s = 1 to 16, a zero "
                 f"vector, an entry exactly at the top level); averaged over {DRAWS} draws of u, "
                 f"‖v‖/s·level is within {worst:.1f} standard errors of v everywhere (unbiased); "
                 f"with s = 4, {v.numel()} entries take {nbytes} bytes (levels entropy-coded, "
                 f"plus the norm) instead of {4 * v.numel()}.")


def _levels(trial: Trial, v: torch.Tensor, s: int, u: torch.Tensor, case: Case | None
            ) -> np.ndarray:
    name, raw = trial.name, trial.call(case, v.clone(), s, u.clone())
    out = as_array(raw)
    if out is None:
        fail(returned_none(raw, name, "the integer levels", f"the levels as a tensor ({case})."))
    if out.shape != tuple(v.shape):
        fail(f"{name} returned shape {out.shape}, expected {tuple(v.shape)} (one level per "
             f"entry) ({case}).")
    if np.isnan(out.astype(float)).any():
        fail(f"the levels contain NaN ({case}): ‖v‖ = 0 for a zero vector, so divide by it only "
             "when it is > 0 — a zero vector gives zero levels.")
    if not np.array_equal(out, np.round(out)):
        fail(f"the levels must be integers (−s … s), not the decoded values ‖v‖/s·level ({case}).")
    if out.size and np.abs(out).max() > s:
        fail(f"a level is {int(np.abs(out).max())}, beyond s = {s} ({case}): r = |v|/‖v‖₂·s is "
             "at most s, so levels lie in −s … s (normalise by the Euclidean norm).")
    return out.astype(np.int64)


def _levels_fault(trial: Trial, got: np.ndarray, want: np.ndarray, v: np.ndarray, s: int,
                  u: np.ndarray) -> str:
    v = v.astype(np.float64)
    sign, norm = np.sign(v), float(np.linalg.norm(v))
    r = np.abs(v) / norm * s
    low = np.floor(r)
    guesses = {
        "your rounding goes to the nearest level: that is biased (E[Q(v)] ≠ v); round up "
        "with probability r − ⌊r⌋ instead, using u": sign * np.round(r),
        "you always round down (⌊r⌋): biased towards 0; round up when u < r − ⌊r⌋": sign * low,
        "you always round up: biased away from 0; round up only when u < r − ⌊r⌋":
            sign * np.ceil(r),
        "you round up when u > r − ⌊r⌋, i.e. with probability 1 − (r − ⌊r⌋): biased; round up "
        "when u < r − ⌊r⌋": sign * (low + (u > r - low)),
        "you normalised by max|v|; QSGD uses the Euclidean norm ‖v‖₂":
            _qsgd_ref(v, s, u, float(np.abs(v).max())),
        "you normalised by the L1 norm; QSGD uses the Euclidean norm ‖v‖₂":
            _qsgd_ref(v, s, u, float(np.abs(v).sum())),
        "the levels have no sign: multiply by sign(v)": np.abs(want),
        **{f"you used s = {c}, not the s given ({s})": _qsgd_ref(v, c, u)
           for c in range(1, 17) if c != s}}
    if hint := next((h for h, w in guesses.items() if np.array_equal(got, w)), None):
        return hint
    if v.size >= 50 and _bias(trial, torch.from_numpy(v), s, None, strict=False) <= BIAS_LIMIT:
        return ("your rounding looks unbiased but does not follow the u it is given: round up "
                "exactly when u < r − ⌊r⌋ (so the check can reproduce your draws)")
    return (f"the levels differ: {differs(want, got, rtol=0.0)}; level = ⌊r⌋ + 1 when "
            "u < r − ⌊r⌋, else ⌊r⌋, times sign(v), with r = |v|/‖v‖₂·s")


def _bias(trial: Trial, v: torch.Tensor, s: int, case: Case | None, strict: bool = True) -> float:
    """Largest |mean of ‖v‖/s·level over DRAWS draws − v|, in standard errors of the exact
    QSGD rounding (p(1−p) per entry); with ``strict`` a biased one fails."""
    g = torch.Generator().manual_seed(17)
    v = v.double()
    norm, total = float(v.norm()), np.zeros(v.shape)
    for _ in range(DRAWS):
        u = torch.rand(v.shape, generator=g, dtype=torch.float64)
        total += _levels(trial, v.float(), s, u.float(), case)
    mean = total / DRAWS * norm / s
    r = v.abs().numpy() / norm * s
    p = r - np.floor(r)
    se = np.sqrt(p * (1 - p) / DRAWS) * norm / s + norm / s / DRAWS
    worst = float((np.abs(mean - v.numpy()) / se).max())
    if strict and worst > BIAS_LIMIT:
        fail(f"averaged over {DRAWS} draws of u the decoded vector is off by up to {worst:.1f} "
             "standard errors: the rounding is biased.")
    return worst


# ------------------------------------------------------------ task 3: index coding

_INDEX_FIXED = [[], [137], [5, 6, 300], [0], [0, 1, 2], [127, 255, 16_383, 32_767, 32_768],
                [5, 16_389, 2_113_541, 270_549_125, 2_147_483_647]]


def _index_draw(rng: np.random.Generator) -> dict[str, Any]:
    span = int(10 ** rng.uniform(2, 9.3))
    return {"count": int(rng.integers(1, min(span, 500))), "span": span, "first": 0,
            "dtype": str(rng.choice(["int64", "int32"]))}


def _index_array(case: Case) -> np.ndarray:
    """The case's sorted indices: a fixed set, or up to ``count`` distinct ones below
    ``span`` (after ``first``, if it is not 0)."""
    p = case.params
    if "indices" in p:
        return np.array(p["indices"], dtype=p["dtype"])
    low = 200 if p["first"] else 0
    rest = np.unique(case.rng.integers(low, p["span"], size=p["count"]))     # sorted, distinct
    return np.concatenate([[p["first"]] if p["first"] else [], rest]).astype(p["dtype"])


@task("compression", refuses=(_PACKAGE, "varint_encode", "encode_indices", "_varint_encode"))
def index_coding(my_index_coding: Callable, seed: int = 0) -> None:
    """Lesson 08, task 3: ``my_index_coding(indices)`` codes sorted indices as gaps (the first
    index itself, then i_k − i_{k−1}) in LEB128 varints: low 7 bits first, high bit set on
    every byte but a number's last."""
    fixed = [{"indices": i, "dtype": "int64"} for i in _INDEX_FIXED]
    fixed.append({"count": 400, "span": 60_000, "first": 137, "dtype": "int64"})
    trial = Trial("index_coding", my_index_coding, seed, fixed, draws=3, draw=_index_draw)
    for case in trial:
        idx = _index_array(case)
        data = _answer(trial, case, (idx,), {"indices": idx})
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            fail(returned_none(data, trial.name, "bytes") or f"{trial.name} returned a "
                 f"{type(data).__name__}; return bytes (e.g. `bytes(out)` of a bytearray).")
        gaps = np.diff(idx.astype(np.int64), prepend=0)
        if data != varint_encode(gaps):
            fail(f"{_coding_fault(data, gaps, idx)} ({case})")
    big = _index_array(trial.cases[len(_INDEX_FIXED)])
    trial.passed(f"{len(big)} indices in {len(varint_encode(np.diff(big, prepend=0)))} bytes "
                 f"instead of {4 * len(big)} as int32 (deflate on top: "
                 f"{len(encode_indices(big, 'deflate'))}); right on {len(trial)} cases: no "
                 "index, a first index 0, gaps of 127/128, 16,383/16,384 and up to 2³¹ − 1")


def _coding_fault(data: bytes, gaps: np.ndarray, idx: np.ndarray) -> str:
    """What the learner's bytes are: a whole-message mistake, or the first gap whose bytes
    differ and how."""
    for width in ("<i4", "<i8"):
        if idx.size and data in (gaps.astype(width).tobytes(), idx.astype(width).tobytes()):
            return (f"you wrote fixed-width integers of {width[-1]} bytes: not smaller than "
                    "int32; a varint takes one byte per 7 bits of the gap (mostly one byte)")
    whole = {"you coded the indices themselves; code the gaps: the first index, then "
             "i_k − i_{k−1} (small numbers, so mostly one byte)": idx.astype(np.int64),
             "the gaps are one too small (i_k − i_{k−1} − 1): the decoder adds the gaps up, so "
             "the indices come back off by one. Use i_k − i_{k−1}": np.r_[gaps[:1], gaps[1:] - 1]}
    for message, values in whole.items():
        if idx.size > 1 and values.min() >= 0 and data == varint_encode(values):
            return message
    if idx.size and gaps[0] and data == varint_encode(gaps[1:]):
        return "the first index is missing: the first value is the first index itself"
    if data == bytes(b ^ 0x80 for b in varint_encode(gaps)):
        return ("the continuation bit is inverted: set 0x80 on every byte except the last of "
                "each number")
    pos = 0
    for k, gap in enumerate(gaps):
        want = varint_encode([gap])
        if data[pos:pos + len(want)] == want:
            pos += len(want)
            continue
        which = "the first index" if k == 0 else f"gap {k} (i_{k} − i_{k - 1})"
        mine = data[pos:next((i + 1 for i in range(pos, len(data)) if data[i] < 0x80), len(data))]
        if not mine:
            return (f"{which} is {gap} and your code wrote nothing for it"
                    + (": 0 must still be written as one byte 0x00 (write at least one byte: a "
                       "loop that runs while the value is > 0 writes nothing for 0)" if gap == 0
                       else f"; expected {want.hex(' ')}"))
        payload, expected = [b & 0x7F for b in mine], [b & 0x7F for b in want]
        tail = ""
        if len(mine) < len(want) and payload == expected[:len(mine)]:
            tail = (f": {gap} needs {len(want)} bytes (7 bits each) but your code wrote only "
                    f"{len(mine)} — loop while the value is ≥ 0x80, for any number of bytes")
        elif len(mine) == len(want) > 1 and payload == expected[::-1]:
            tail = ": the high 7 bits came first; LEB128 writes the LOW 7 bits first"
        return (f"{which} is {gap}, coded as {want.hex(' ')}, but your bytes are "
                f"{mine.hex(' ')}{tail}")
    return (f"the bytes for all {gaps.size} gaps are right, but {len(data) - pos} byte(s) "
            "follow them: write nothing after the last gap")


# ------------------------------------------------- task 6: gossip, one D-PSGD step on a ring

STEPS = 3                   # steps in a row on each case's 2–5 real workers


def _start(n: int, length: int, seed: int) -> np.ndarray:
    """(n, length) starting replicas: a common part, the ring's slowest mode cos(2πr/n)·a
    (what gossip removes last) and a little of every other mode."""
    rng = np.random.default_rng(seed)
    common, a, noise = (rng.uniform(-2, 2, length) for _ in range(3))
    mode = np.cos(2 * np.pi * np.arange(n) / n)[:, None]
    return common + 3 * mode * a + 0.3 * rng.standard_normal((n, length)) * noise


def _gossip_case(fn: Callable, x0: np.ndarray, dtype: str, steps: int) -> dict:
    """Worker: ``fn(tensor)`` ``steps`` times (in place, or its returned tensor kept), wiretapped:
    the values after each step, the collectives it called and whom it messaged."""
    import torch.distributed as dist

    from ddl_lab.runtime.wiretap import Wiretap
    x = torch.tensor(x0[dist.get_rank()], dtype=getattr(torch, dtype))
    values = []
    with Wiretap(refuse_new_group=(
            "dist.new_group was called: gossip runs on the group it is given (the default "
            "group); talk to your two ring neighbours with isend/irecv or send/recv.")) as tap:
        for _ in range(steps):
            out = fn(x)
            if isinstance(out, torch.Tensor) and out is not x and out.shape == x.shape:
                x = out
            values.append(x.detach().double().cpu().numpy().copy())
    return {"values": values, "used": sorted({op.op for op in tap.ops} - {"send", "recv"}),
            "messages": [(op.op, op.src, op.dst) for op in tap.ops
                         if op.op in ("send", "recv") and not op.refused]}


def _consensus(x: np.ndarray) -> float:
    return float(np.sqrt(((x - x.mean(0)) ** 2).sum(1).mean()))


def _mistakes(n: int) -> dict[str, np.ndarray]:
    """Named wrong W's: what the learner's first step may have applied instead."""
    eye, left = np.eye(n), np.roll(np.eye(n), -1, axis=1)      # (left @ x)[i] = x[i−1]
    right = left.T
    near, k = (left + right, 2) if n > 2 else (left, 1)        # the distinct neighbours
    out = {"the values were summed, not averaged: divide by the number of values added "
           "(yourself and your distinct neighbours)": eye + near,
           "each rank took only its neighbours' mean and left its own value out — on an even "
           "ring the replicas then swap between two states and never agree": near / k,
           "each rank averaged with one neighbour only (the left, rank − 1): still an "
           "average, but the spread shrinks by cos(π/n) per step instead of |λ₂|":
               (eye + left) / 2,
           "each rank averaged with one neighbour only (the right, rank + 1): still an "
           "average, but the spread shrinks by cos(π/n) per step instead of |λ₂|":
               (eye + right) / 2,
           "you divided by the world size n, not by the number of values averaged":
               (eye + near) / n}
    if n == 2:
        out["on 2 ranks the left and the right neighbour are the same rank: you counted it "
            "twice, (x + 2·x_other)/3; average over the DISTINCT neighbours"] = (eye + 2 * left) / 3
    return {k: v for k, v in out.items() if not np.allclose(v, mixing_matrix(n))}


def _where(case: Case) -> str:
    p = case.params
    return f"{p['n']} ranks, a {p['dtype']} tensor of {p['length']:,} elements — {case}"


def _structure_fault(got: list[dict], n: int) -> str | None:
    if used := sorted({u for g in got for u in g["used"]}):
        return (f"it called {', '.join('dist.' + u for u in used)}: a gossip step talks to its "
                "two ring neighbours only, with point-to-point messages (isend/irecv or "
                "send/recv). A collective makes every rank wait for all the others — the "
                "global step gossip exists to avoid")
    for r, g in enumerate(got):
        near = neighbours(r, n)
        for op, s, d in g["messages"]:
            peer = d if op == "send" else s
            if peer is None:
                return (f"rank {r} received from any source (src=None): name the neighbour, "
                        f"one of {near}, or the values arriving depend on timing")
            if peer not in near:
                return (f"rank {r} {'sent to' if op == 'send' else 'received from'} rank "
                        f"{peer}, which is not one of its ring neighbours {near} on {n} ranks: "
                        "gossip talks to (rank − 1) % n and (rank + 1) % n only")
    if n > 1 and not any(g["messages"] for g in got):
        return "no rank sent or received anything: each rank must exchange with its neighbours"
    return None


def _value_fault(got: list[np.ndarray], x0: np.ndarray, n: int, rtol: float) -> str | None:
    """The steps' first fault — the first step's mean, a named W, a wrong value; the
    consensus distance after the last (W shrinks it by |λ₂| a step); each step's values."""
    scale = float(np.abs(x0).max(initial=1.0))
    named = next((text for text, M in _mistakes(n).items()
                  if same(M @ x0, got[0], rtol=rtol, scale=scale)), None)
    mean0, mean1 = x0.mean(0), got[0].mean(0)
    if not same(mean0, mean1, rtol=rtol, scale=scale):
        return (f"after one step the replicas' mean is no longer the average of the inputs "
                f"({differs(mean0, mean1, rtol=rtol, scale=scale)}): a gossip step must keep "
                "it (W is doubly stochastic)" + (f"; {named}" if named else ""))
    if named:
        return named
    want = mixing_matrix(n) @ x0
    for r in range(n):
        if diff := differs(want[r], got[0][r], rtol=rtol, scale=scale):
            return (f"rank {r} after one step: {diff}; expected the mean of its own value and "
                    f"its ring neighbours' {neighbours(r, n)}")
    want = np.linalg.matrix_power(mixing_matrix(n), STEPS) @ x0
    c0, c_got, c_want = _consensus(x0), _consensus(got[-1]), _consensus(want)
    if c_got > c_want * (1 + 1e-3) + rtol * c0:
        return (f"the consensus distance fell from {c0:.4g} to {c_got:.4g} in {STEPS} steps; "
                f"the ring's W brings it to {c_want:.4g} (≤ |λ₂|^{STEPS} = "
                f"{second_eigenvalue(n) ** STEPS:.3g} of the start) — steps after the first "
                "must average the values of the step before")
    for t in range(STEPS):
        w = np.linalg.matrix_power(mixing_matrix(n), t + 1) @ x0
        if not same(w, got[t], rtol=rtol * (t + 1), scale=float(np.abs(x0).max())):
            return (f"step {t + 1} is wrong ({differs(w, got[t], rtol=rtol)}): each call must "
                    "average the tensor as it is now")
    return None


def _judge(got: list[dict], x0: np.ndarray, case: Case, name: str) -> float:
    """Fail with the first fault — whom the ranks talked to, then the values — else the
    consensus distance's factor per step."""
    n, length = case.params["n"], case.params["length"]
    rtol = 2e-5 if case.params["dtype"] == "float32" else 1e-10
    if fault := _structure_fault(got, n):
        fail(f"{name} is not a gossip step ({_where(case)}): {fault}.")
    if not length:
        return math.nan
    values = [np.stack([g["values"][t] for g in got]) for t in range(STEPS)]
    if fault := _value_fault(values, x0, n, rtol):
        fail(f"{name}: {fault} ({_where(case)}).")
    c0 = _consensus(x0)
    return (_consensus(values[-1]) / c0) ** (1 / STEPS) if c0 else math.nan


def _failure(f: RankFailure, name: str, case: Case | None) -> str:
    """A failure on the workers, worded: a receive buffer of the wrong size kills a worker."""
    where = f" ({_where(case)})" if case is not None else ""
    return f.message(name, case.params["n"] if case else 0) + where + (
        ". A receive buffer must have the length and dtype of what the neighbour sends "
        "(torch.empty_like(tensor))." if f.kind == "died" else "")


@task("compression", refuses=("ddl_lab.compression", "_gossip_average", "gossip_worker"))
def gossip_step(my_gossip_step: Callable, seed: int = 0, timeout: float = 60.0) -> None:
    """Lesson 08, task 6: ``my_gossip_step(tensor)`` replaces this rank's tensor (in place, or
    returns the new one) by the mean of itself and its distinct ring neighbours'
    ((rank ± 1) % n), with point-to-point messages to those neighbours only."""
    trial = Trial("gossip_step", my_gossip_step, seed, table(
        "n length dtype", (4, 1000, "float32"), (5, 13, "float64"), (3, 1, "float32"),
        (2, 7, "float64"), (5, 0, "float32")), draws=3, draw=lambda rng: {
            "n": int(rng.integers(2, 6)), "length": int(rng.choice([2, 11, 97, 257, 4099])),
            "dtype": str(rng.choice(["float32", "float64"]))},
        timeout=timeout, word=lambda f, case: _failure(f, trial.name, case))
    starts = [_start(c.params["n"], c.params["length"], int(c.rng.integers(1 << 30)))
              for c in trial]
    outcomes = trial.run(_gossip_case, [
        (c.params["n"], (my_gossip_step, x0, c.params["dtype"], STEPS))
        for c, x0 in zip(trial, starts)])
    rates: dict[int, float] = {}
    for case, x0, outcome in zip(trial, starts, outcomes):
        rate = _judge(trial.results(outcome, case), x0, case, trial.name)
        if case.params["n"] > 2 and not math.isnan(rate):
            rates[case.params["n"]] = rate
    shown = ", ".join(f"×{r:.3f} per step on {k} ranks (|λ₂| = {second_eigenvalue(k):.3f})"
                      for k, r in sorted(rates.items()))
    trial.passed(f"{len(trial)} cases (2–5 ranks, lengths 0 to 4,099, float32 and float64), "
                 f"{STEPS} steps each: messages to ring neighbours only, no collective; the "
                 f"replicas' mean stayed the average and the consensus distance shrank {shown}")


# ---------------------------------------------- reasoning: a Strom message's size in bytes

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


_SIZE_MISTAKES: dict[str, Callable[[int, int], float]] = {     # message -> the size it gives
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


_SIZE_FIXED = table("d k", (1000, 10), (1280, 10), (8970, 45), (5, 5), (1, 1), (2_000_000, 130),
                    (3_000_000, 150))


def _size_draw(rng: np.random.Generator) -> dict[str, Any]:
    d = int(10 ** rng.uniform(1, 7))
    return {"d": d, "k": int(rng.integers(1, min(d, 5000) + 1))}


@task("compression")
def strom_bytes(my_strom_bytes: Callable[[int, int], int], seed: int = 0) -> None:
    """Lesson 08, reasoning: ``my_strom_bytes(d, k)`` is the size in bytes of Strom's message
    for k sent entries of a d-entry vector, at 0, g, …, (k − 1)g with g = d // k: the count k
    as a varint, ⌈k/8⌉ bytes of sign bits, then the first index and the k − 1 gaps g, each
    an LEB128 varint. The lesson's encoder, run on the same entries, agrees."""
    trial = Trial("strom_bytes", my_strom_bytes, seed, _SIZE_FIXED, draws=3, draw=_size_draw)
    name, rule = trial.name, answers.Real(what="a number of bytes")  # whole: exact in float32
    got = [answers.answer(trial.call(c, *c.params.values()), rule, name,
                          f"{name}({c.params['d']}, {c.params['k']})", c) for c in trial]
    for case, g in zip(trial, got):
        d, k = case.params["d"], case.params["k"]
        want = _message(d, k)
        if g == want:
            continue
        hint = next((h for h, f in _SIZE_MISTAKES.items()
                     if all(f(c.params["d"], c.params["k"]) == v for c, v in zip(trial, got))),
                    None)
        if hint is None and not g.is_integer():
            hint = "a message is a whole number of bytes: round the sign bits up, ⌈k/8⌉"
        fail(f"{name}(d={d:,}, k={k:,}) returned {g:,.6g}, expected {want:,.0f} (count "
             f"{_varint_len(k)} + signs {math.ceil(k / 8)} + first index {_varint_len(0)} + "
             f"{k - 1:,} gaps of {d // k:,} × {_varint_len(d // k)})"
             + (f": {hint}." if hint else ".") + f" ({case})")
    d, k = 8970, 45
    x = torch.zeros(d)          # the lesson's encoder (no entropy coder) on ±2 at 0, g, …
    x[torch.arange(k) * (d // k)] = torch.tensor([2.0, -2.0]).repeat(k)[:k]
    real = len(Threshold(1.0, coder="none").encode(x)) - 1     # its coder's flag byte left out
    trial.passed(f"right on {len(trial)} cases (1 to 3,000,000 entries, gaps across the 1-, 2- "
                 f"and 3-byte varints); the lesson's encoder sends {real} bytes for {k} of {d:,} "
                 f"entries (plus one byte naming its coder) — {4 * k + math.ceil(k / 8)} with "
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


def sample_gradient() -> torch.Tensor:
    """Rank 0's gradient of its first minibatch at the initial model (the lesson's run)."""
    from ddl_lab.compression.training import batches, gradient, setup
    net, X, y, _, per_epoch, gen = setup("mlp", 0, 16, PLAN_WORKERS, 0)
    batch = next(batches(len(y), 16, per_epoch, 1, gen))
    return gradient(net, X[batch], y[batch])[0]


@functools.lru_cache(maxsize=16)
def _trained(relative_tau: float | None, ef: bool) -> tuple[float, float, int]:
    """(test accuracy, bytes per update, fp32 bytes) of the lesson's run on 4 workers, with
    Strom's threshold at ``relative_tau`` (None: fp32). Synchronous training with fixed seeds
    is deterministic, so a plan asked for twice is trained once."""
    from ddl_lab.compression.training import merge_logs, train_worker
    scheme = Scheme("fp32") if relative_tau is None else Scheme("threshold", relative_tau, ef=ef)
    result = merge_logs(on_workers(train_worker, PLAN_WORKERS, scheme, PLAN_EPOCHS, timeout=120))
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
    judge(answers.plan(out, name, {"tau": "", "error_feedback": ""}, f" ({case})"))
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
    trial = Trial("strom_plan", my_strom_plan, seed, _SHOWN, draws=3, draw=lambda rng: {
        "scale": float(2.0 ** int(rng.choice([-3, -2, -1, 2, 3, 5, 8, 10])))})
    name = trial.name
    base = sample_gradient()
    plans = [_strom_choice(_ask(my_strom_plan, base, case, name), name, case) for case in trial]
    fp32_acc, _, fp32_bytes = _trained(None, False)
    results = []
    for case, (tau, ef) in zip(trial, plans):
        c = case.params["scale"]
        acc, sent, _ = _trained(float(f"{tau / c:.7g}"), ef)   # one run per τ/c
        results.append((acc, sent))
        if message := _plan_fault(ef, acc, sent, fp32_acc, fp32_bytes, plans, trial):
            fail(f"{name} chose τ = {tau:.4g}{'' if ef else ' without error feedback'} for "
                 f"{_scale_words(c)} — {message} ({case})")
    acc, sent = results[0]
    scales = ", ×".join(f"{c.params['scale']:g}" for c in trial)
    trial.passed(f"{len(trial)} gradient scales (×{scales}); the lesson's run on 4 workers with "
                 f"your τ: {100 * acc:.1f}% test accuracy (fp32 {100 * fp32_acc:.1f}%) with "
                 f"{sent:,.0f}-byte updates, {100 * (1 - sent / fp32_bytes):.2f}% less than "
                 f"fp32's {fp32_bytes:,}")


def _plan_fault(ef: bool, acc: float, sent: float, fp32_acc: float, fp32_bytes: int,
                plans: list, cases: list) -> str | None:
    """What is wrong with one trained plan, or None."""
    share = sent / fp32_bytes
    ran = (f"the run sent {sent:,.0f} bytes per update ({100 * share:.2f}% of fp32's "
           f"{fp32_bytes:,}) and reached {100 * acc:.1f}% test accuracy (fp32: "
           f"{100 * fp32_acc:.1f}%)")
    relative = [t / k.params["scale"] for (t, _), k in zip(plans, cases)]
    scaled = ("" if max(relative) <= 1.01 * min(relative) else
              " Your τ did not grow with the gradients: divided by each case's scale it is "
              + ", ".join(f"{r:.3g}" for r in relative)
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
