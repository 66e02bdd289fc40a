"""Checks for lesson 08 (compressed updates): Strom's threshold with its residual, 1-bit SGD
with error feedback (also trained on real workers), QSGD's unbiased rounding, index coding.

Each draws seeded cases (lengths 0, 1 and larger, float32 and float64, random τ and s,
values far from ±1, the edge values of each encoding) and accepts answers in torch or numpy,
in any float dtype, compared with a tolerance of the learner's dtype. The references are
written here, independently of the package's compressors. The reasoning task (a Strom
message's size) and the design task (choosing τ) live in ``_compression_plans.py``; thin
entry points here keep their records named. The gossip step (D-PSGD on a ring, run on real
workers) lives in ``_compression_gossip.py``."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from ddl_lab.compression.compressors import ErrorFeedback, OneBit, Threshold
from ddl_lab.runtime.worlds import WorldFailed

from ._compression_codes import _changed, _inputs, _parts, index_coding, qsgd_rounding
from ._compression_gossip import gossip_step
from ._compression_plans import strom_bytes, strom_plan
from ._core import call_local, fail, passed, run_in_world, task
from ._diagnose import Case, Cases, Snapshot, differs, explain, same, tolerance

__all__ = ["strom_threshold", "error_feedback_onebit", "qsgd_rounding", "index_coding",
           "strom_bytes", "strom_plan", "gossip_step"]

_PACKAGE = "ddl_lab.compression"
# ----------------------------------------------------------------- task 1: Strom

_STROM_FIXED = [{"d": 1000, "tau": 0.5, "dtype": "float32", "scale": 0.3},
                {"d": 300, "tau": 0.125, "dtype": "float64", "scale": 0.1},
                {"d": 1, "tau": 0.25, "dtype": "float32", "scale": 0.3},
                {"d": 0, "tau": 0.5, "dtype": "float32"}]


def _strom_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"d": int(rng.choice([2, 17, 100, 1000, 4099])), "tau": int(rng.integers(3, 64)) / 64,
            "dtype": str(rng.choice(["float32", "float64"])),
            "scale": round(float(rng.uniform(0.05, 2.0)), 3)}


def _strom_inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor, float]:
    """grad and residual; their first four entries sum exactly to ±τ (sent: |v| ≥ τ)."""
    tau = case.params["tau"]
    grad, residual = _inputs(case, 2)
    k = min(4, grad.numel())
    grad[:k] = torch.tensor([tau / 2, -tau / 2, tau, -tau][:k], dtype=grad.dtype)
    residual[:k] = torch.tensor([tau / 2, -tau / 2, 0.0, 0.0][:k], dtype=grad.dtype)
    return grad, residual, tau


def _strom_ref(grad: torch.Tensor, residual: torch.Tensor, tau: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    v = (residual + grad).numpy()
    idx = np.flatnonzero(np.abs(v) >= tau)
    signs = np.where(v[idx] >= 0, 1, -1)
    new = v.copy()
    new[idx] -= tau * signs
    return idx, signs, new


@task("compression", refuses=(_PACKAGE, "strom_step", "_strom_step"))
def strom_threshold(my_strom_threshold: Callable, seed: int = 0) -> None:
    """Lesson 08, task 1: ``my_strom_threshold(grad, residual, tau)`` returns (indices, signs,
    new_residual): v = residual + grad; the indices where |v| ≥ τ (sorted, from 0), their
    signs ±1, and v with τ·sign taken off the sent entries. ``grad`` stays unchanged."""
    fn, name = my_strom_threshold, getattr(my_strom_threshold, "__name__", "your function")
    cases = list(Cases("strom_threshold", seed, _STROM_FIXED, draws=3, draw=_strom_draw))
    for case in cases:
        grad, residual, tau = _strom_inputs(case)
        want_idx, want_signs, want_new = _strom_ref(grad, residual, tau)
        snap = Snapshot(grad=grad)
        out = call_local(fn, grad, residual.clone(), tau)
        _changed(snap, name, case)
        idx, signs, new = _parts(out, ("indices", "signs", "new_residual"), fn)
        message = (_strom_indices_fault(idx, want_idx, grad, residual, tau)
                   or _strom_signs_fault(signs, want_signs, grad, want_idx)
                   or _strom_residual_fault(new, want_new, grad, residual, want_idx, tau))
        if message:
            fail(f"{message} ({case})")
    sent, err = _conservation(fn, 0.5)
    size = len(Threshold(0.5).encode(torch.ones(4)))
    passed("strom_threshold", f"right on {len(cases)} cases (0 to 4,099 entries, float32 and "
           f"float64, τ = 1/64 … 1, entries exactly at ±τ); over 40 steps you sent {sent} entries "
           f"and Σ decoded + residual = Σ gradients (max error {err:.1e}): nothing is lost, only "
           f"delayed. Each sent entry costs one sign bit and a coded index ({size} bytes for "
           "4 entries).")


def _strom_indices_fault(idx: np.ndarray, want: np.ndarray, grad: torch.Tensor,
                         residual: torch.Tensor, tau: float) -> str | None:
    if idx.dtype == bool:
        return ("the indices came back as a boolean mask; return the positions of the sent "
                "entries, e.g. `torch.nonzero(mask).flatten()`")
    if idx.dtype.kind not in "iu":
        return (f"the indices are {idx.dtype} numbers; return integers (positions), e.g. "
                "`torch.nonzero(mask).flatten()`")
    idx = idx.ravel()
    if np.array_equal(idx, want):
        return None
    v, g = (residual + grad).numpy(), grad.numpy()
    hints = {"the indices are off by one: count from 0, as torch.nonzero does": want + 1,
             "you thresholded the gradient alone: add the residual first, v = residual + grad, "
             "and compare |v| with τ — that is how small gradients add up until sent":
                 np.flatnonzero(np.abs(g) >= tau),
             "entries with |v| exactly τ are missing: send every entry with |v| ≥ τ":
                 np.flatnonzero(np.abs(v) > tau),
             "the indices are right but not in increasing order; sort them (delta coding "
             "needs sorted indices)": lambda got: sorted(got.tolist()) == want.tolist()}
    for c in (0.5, 1.0, 0.1, 0.01, 0.25):
        if c != tau:
            hints[f"you used τ = {c:g}, not the tau given ({tau:g})"] = \
                np.flatnonzero(np.abs(v) >= c)
    hint = next((h for h, w in hints.items()
                 if (w(idx) if callable(w) else np.array_equal(idx, w))), None)
    return hint or (f"expected {want.size} indices (the entries with |residual + grad| ≥ τ = "
                    f"{tau:g}), got {idx.size}; the first expected are {want[:5].tolist()}, "
                    f"yours {idx[:5].tolist()}")


def _strom_signs_fault(signs: np.ndarray, want: np.ndarray, grad: torch.Tensor,
                       idx: np.ndarray) -> str | None:
    signs = signs.ravel()
    if np.array_equal(signs, want):
        return None
    return explain(signs, {
        "the signs are 0/1; send them as +1/−1 (each sent entry decodes to sign·τ)":
            (want > 0).astype(int),
        "the signs are those of grad; use the sign of v = residual + grad, the value being "
        "sent": np.where(grad.numpy()[idx] >= 0, 1, -1)}, rtol=0.0) or (
        f"the signs differ: {differs(want, signs, rtol=0.0)}. The sign of entry i is that of "
        "v = residual + grad (+1 for v ≥ τ, −1 for v ≤ −τ)")


def _strom_residual_fault(new: np.ndarray, want: np.ndarray, grad: torch.Tensor,
                          residual: torch.Tensor, idx: np.ndarray, tau: float) -> str | None:
    new = new.ravel() if new.size == want.size else new
    if same(want, new, scale=max(tau, 1e-3)):
        return None
    v = (residual + grad).numpy()
    zeroed, flipped = v.copy(), v.copy()
    zeroed[idx] = 0
    flipped[idx] += tau * np.sign(v[idx])
    hint = explain(new, {
        "the new residual is all zeros: the residual was not kept. Entries that were not sent, "
        "and what ±τ did not carry of the sent ones, must wait in the residual for the next "
        "step": np.zeros_like(v),
        "the new residual is v = residual + grad unchanged: take τ·sign off the sent entries, "
        "since that part has now been sent": v,
        "the sent entries' residual was set to 0, but a sent entry only carries ±τ: keep "
        "v − τ·sign there (the part of v beyond τ is still owed)": zeroed,
        "the residual grew at the sent entries: subtract τ·sign (what was sent), do not add "
        "it": flipped})
    return hint or (f"the new residual differs: {differs(want, new, scale=max(tau, 1e-3))}. It "
                    "should be v = residual + grad, minus τ·sign at the sent entries")


def _conservation(fn: Callable, tau: float) -> tuple[int, float]:
    """40 steps feeding the learner's residual back: Σ decoded + residual = Σ grads."""
    g = torch.Generator().manual_seed(3)
    residual = torch.zeros(300)
    total = torch.zeros(300, dtype=torch.float64)
    count = 0
    for _ in range(40):
        grad = torch.randn(300, generator=g) * 0.2 + 0.05
        idx, signs, new = _parts(call_local(fn, grad, residual, tau),
                                 ("indices", "signs", "new_residual"), fn)
        residual = torch.from_numpy(np.array(new, dtype=np.float32).ravel())
        total += grad.double()
        np.subtract.at(total.numpy(), idx.ravel().astype(int), tau * signs.ravel())
        count += idx.size
    err = float((total - residual.double()).abs().max())
    if err > 1e-3:
        fail(f"over 40 steps, Σ decoded + residual differs from Σ gradients by {err:.3g}: "
             "something is lost between steps (is the residual carried over?).")
    return count, err


# ------------------------------------------------------- task 2: 1-bit with error feedback

class LearnerOneBitEF(ErrorFeedback):
    """The learner's ``(grad, residual) -> (q, residual)`` as a compressor: q is ±scale, so
    it travels losslessly as one bit per entry and one float."""

    def __init__(self, fn: Callable):
        super().__init__(OneBit())
        self.fn = fn
        self.name = "your 1-bit + EF"

    def encode(self, x: torch.Tensor) -> bytes:
        g = torch.as_tensor(x).detach().float().reshape(-1)
        if self.residual is None:
            self.residual = torch.zeros_like(g)
        q, new = self.fn(g, self.residual)
        self.residual = torch.as_tensor(np.asarray(new), dtype=torch.float32).reshape(-1)
        return OneBit(bucket=g.numel()).encode(torch.as_tensor(np.asarray(q)))

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        return OneBit(bucket=numel).decode(data, numel)


def _train(compressor: LearnerOneBitEF, epochs: int) -> Any:
    from ddl_lab.compression.training import train_worker
    return train_worker(compressor, epochs=epochs)


def _ef_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"d": int(rng.choice([2, 3, 64, 1000, 4099])),
            "dtype": str(rng.choice(["float32", "float64"])),
            "scale": round(float(10 ** rng.uniform(-3, 1)), 5)}


@task("compression", refuses=(_PACKAGE, "ef_onebit_step", "_ef_onebit_step"))
def error_feedback_onebit(my_error_feedback_onebit: Callable, seed: int = 0,
                          world_size: int = 4, epochs: int = 4,
                          min_accuracy: float = 0.85) -> None:
    """Lesson 08, task 2: ``my_error_feedback_onebit(grad, residual)`` returns (q, new_residual)
    with v = grad + residual, q = mean|v|·sign(v) (sign(0) = +1), new_residual = v − q; then
    it trains the digits MLP on ``world_size`` real workers."""
    fn, name = my_error_feedback_onebit, getattr(my_error_feedback_onebit, "__name__", "yours")
    cases = list(Cases("error_feedback_onebit", seed, [
        {"d": 500, "dtype": "float32", "scale": 0.7}, {"d": 1, "dtype": "float32", "scale": 3.0},
        {"d": 2, "dtype": "float64", "scale": 0.0}], draws=3, draw=_ef_draw))
    for case in cases:
        grad, residual = _inputs(case, 2)
        k = min(3, grad.numel())
        residual[:k] = -grad[:k]                  # v = 0 exactly: sign(0) counts as +
        snap = Snapshot(grad=grad)
        out = call_local(fn, grad, residual.clone())
        _changed(snap, name, case)
        q, new = _parts(out, ("q", "new_residual"), fn)
        v = (grad + residual).numpy()
        want_q = (np.abs(v).mean() * np.where(v >= 0, 1.0, -1.0)).astype(v.dtype)
        q, new = (a.ravel() if a.size == v.size else a for a in (q, new))
        message = _ef_fault(q, want_q, v, grad.numpy()) or _ef_residual_fault(new, q, v,
                                                                              residual.numpy())
        if message:
            fail(f"{message} ({case})")
    try:
        logs = run_in_world(_train, world_size, LearnerOneBitEF(fn), epochs, fn=fn,
                            timeout=120)
    except WorldFailed as e:
        fail(e.failure.message(name, world_size))
    from ddl_lab.compression.training import merge_logs
    result = merge_logs(logs)
    if result.final_accuracy < min_accuracy:
        fail(f"on {world_size} workers your 1-bit + EF reached {100 * result.final_accuracy:.1f}% "
             f"test accuracy after {epochs} epochs; the reference reaches over "
             f"{100 * min_accuracy:.0f}%.")
    passed("error_feedback_onebit", f"q and the residual match on {len(cases)} cases (1 to "
           f"4,099 entries, float32 and float64, zeros in v); trained on {world_size} workers "
           f"for {len(result.loss)} steps: {100 * result.final_accuracy:.1f}% test accuracy "
           f"with {result.update_bytes:,.0f}-byte updates, {result.reduction:.0f}× less than "
           "fp32.")


def _ef_fault(q: np.ndarray, want: np.ndarray, v: np.ndarray, grad: np.ndarray) -> str | None:
    scale = float(np.abs(want).max()) if want.size else 1.0
    if same(want, q, scale=scale):
        return None
    sign = np.where(v >= 0, 1.0, -1.0)
    hint = explain(q, {
        "q ignores the residual: quantize v = grad + residual, not the gradient alone":
            np.abs(grad).mean() * np.where(grad >= 0, 1.0, -1.0),
        "q is ±1: scale the signs by mean|v| so that q keeps the size of the update": sign,
        "the scale is max|v|; use mean|v| (it minimises ‖v − scale·sign(v)‖)":
            np.abs(v).max() * sign,
        "the scale is the root mean square of v; use mean|v| (it minimises "
        "‖v − scale·sign(v)‖)": np.sqrt((v * v).mean()) * sign,
        "the scale is mean(v), which can be negative or 0; use mean|v|": v.mean() * sign,
        "entries with v = 0 got q = 0 (torch.sign(0) is 0): every entry sends one bit, so "
        "treat 0 as +: `torch.where(v >= 0, 1.0, -1.0)`": np.abs(v).mean() * np.sign(v)})
    return hint or (f"q differs: {differs(want, q, scale=scale)}; expected mean|v|·sign(v), "
                    "v = grad + residual")


def _ef_residual_fault(new: np.ndarray, q: np.ndarray, v: np.ndarray,
                       residual: np.ndarray) -> str | None:
    """``new`` must be v − q for the learner's own (right) q, in the precision of q and new."""
    scale = float(np.abs(v).max()) if v.size else 1.0
    want = v - q
    if same(want, new, rtol=tolerance(q, new, v), scale=scale):
        return None
    return explain(new, {
        "the new residual is all zeros: without it this is plain 1-bit SGD; keep v − q, what "
        "the signs failed to carry, for the next step": lambda got: not np.any(got),
        "the residual came back unchanged: it must become v − q": residual,
        "the new residual has the wrong sign: it is v − q (what is still owed), not q − v":
            -want}) or f"the new residual differs: {differs(want, new, scale=scale)}; " \
                       "expected v − q"


# ------------------------------------------------------------------ reasoning and design

