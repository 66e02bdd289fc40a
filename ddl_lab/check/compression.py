"""Checks for lesson 08 (compressed updates): Strom's threshold with its residual, 1-bit SGD
with error feedback (also trained on real workers), QSGD's unbiased rounding, index coding."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from ddl_lab.compression.compressors import (QSGD, ErrorFeedback, OneBit, Threshold,
                                             encode_indices, qsgd_levels)
from ddl_lab.compression.compressors import _ef_onebit_step as ef_onebit_step
from ddl_lab.compression.compressors import _strom_step as _strom_ref
from ddl_lab.compression.compressors import varint_decode, varint_encode
from ._core import call_local, fail, first_difference, passed, run_on_workers

__all__ = ["strom_threshold", "error_feedback_onebit", "qsgd_rounding", "index_coding"]


def _tensor(x: Any, what: str, fn: Callable) -> torch.Tensor:
    try:
        return torch.as_tensor(np.asarray(x) if isinstance(x, (list, tuple)) else x)
    except Exception:
        fail(f"{fn.__name__} returned {type(x).__name__} for {what}; return a torch tensor.")


def _unpack(out: Any, n: int, names: str, fn: Callable) -> tuple:
    if not isinstance(out, (tuple, list)) or len(out) != n:
        got = f"a {type(out).__name__}" + (f" of {len(out)}" if isinstance(out, (tuple, list))
                                          else "")
        fail(f"{fn.__name__} must return a tuple ({names}), got {got}.")
    return tuple(out)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a.to(torch.float64), b.to(torch.float64)))


# ----------------------------------------------------------------- task 1: Strom

def _strom_inputs(seed: int, d: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    grad = torch.randn(d, generator=g) * 0.3
    residual = torch.randn(d, generator=g) * 0.3
    # four entries land exactly on ±τ (τ = 0.5): they are sent (|v| ≥ τ)
    grad[:4] = torch.tensor([0.25, -0.25, 0.5, -0.5])
    residual[:4] = torch.tensor([0.25, -0.25, 0.0, 0.0])
    return grad, residual


def strom_threshold(strom_step: Callable, tau: float = 0.5) -> None:
    """Lesson 08, task 1: ``strom_step(grad, residual, tau)`` returns (indices, signs,
    new_residual): v = residual + grad; the indices where |v| ≥ τ (sorted, from 0), their
    signs ±1, and v with τ·sign taken off the sent entries."""
    __tracebackhide__ = True
    grad, residual = _strom_inputs(seed=8)
    out = call_local(strom_step, grad.clone(), residual.clone(), tau)
    idx, signs, new = _unpack(out, 3, "indices, signs, new_residual", strom_step)
    idx, signs, new = (_tensor(idx, "the indices", strom_step),
                       _tensor(signs, "the signs", strom_step),
                       _tensor(new, "the new residual", strom_step))
    want_idx, want_signs, want_new = _strom_ref(grad, residual, tau)
    v = residual + grad
    if idx.dtype == torch.bool:
        fail("the indices came back as a boolean mask; return the positions of the sent "
             "entries, e.g. `torch.nonzero(mask).flatten()`.")
    idx = idx.flatten()
    if not _same(idx, want_idx):
        _explain_indices(idx, want_idx, grad, tau, v)
    signs = signs.flatten()
    if _same(signs, (want_signs > 0).to(signs.dtype)):
        fail("the signs are 0/1; send them as +1/−1 (each sent entry decodes to sign·τ).")
    if not _same(signs, want_signs):
        diff = first_difference(want_signs, signs)
        fail(f"the signs differ: {diff}. The sign of entry i is that of v = residual + grad "
             "(+1 for v ≥ τ, −1 for v ≤ −τ).")
    _explain_residual(new.flatten(), want_new, v, idx, signs, tau)
    sent, total = _conservation(strom_step, tau)
    size = len(Threshold(tau).encode(v))
    passed("strom_threshold", f"{len(want_idx)} of {len(grad)} entries sent ({size} bytes "
           f"as sign bits + coded indices, vs {4 * len(grad)} bytes of fp32); over 40 steps "
           f"you sent {sent} entries and Σ decoded + residual = Σ gradients (max error "
           f"{total:.1e}): nothing is lost, only delayed.")


def _explain_indices(idx: torch.Tensor, want: torch.Tensor, grad: torch.Tensor,
                     tau: float, v: torch.Tensor) -> None:
    __tracebackhide__ = True
    if _same(idx, want + 1):
        fail("the indices are off by one: count from 0, as torch.nonzero does.")
    alone = torch.nonzero(grad.abs() >= tau).flatten()
    if _same(idx, alone) or _same(idx, torch.nonzero(grad.abs() > tau).flatten()):
        fail("you thresholded the gradient alone: add the residual first, v = residual + "
             "grad, and compare |v| with τ — that is how small gradients add up until sent.")
    strict = torch.nonzero(v.abs() > tau).flatten()
    if _same(idx, strict):
        fail("entries with |v| exactly τ are missing: send every entry with |v| ≥ τ.")
    if idx.numel() == want.numel() and set(idx.tolist()) == set(want.tolist()):
        fail("the indices are right but not in increasing order; sort them (delta coding "
             "needs sorted indices).")
    fail(f"expected {want.numel()} indices (the entries with |residual + grad| ≥ τ = {tau}), "
         f"got {idx.numel()}; the first expected are {want[:5].tolist()}, yours "
         f"{idx[:5].tolist()}.")


def _explain_residual(new: torch.Tensor, want: torch.Tensor, v: torch.Tensor,
                      idx: torch.Tensor, signs: torch.Tensor, tau: float) -> None:
    __tracebackhide__ = True
    if new.shape != want.shape:
        fail(f"the new residual has shape {tuple(new.shape)}, expected {tuple(want.shape)} "
             "(one entry per gradient entry).")
    if torch.allclose(new, want, atol=1e-6):
        return
    if not new.abs().any():
        fail("the new residual is all zeros: the residual was not kept. Entries that were "
             "not sent, and what ±τ did not carry of the sent ones, must wait in the "
             "residual for the next step.")
    if torch.allclose(new, v, atol=1e-6):
        fail("the new residual is v = residual + grad unchanged: take τ·sign off the sent "
             "entries, since that part has now been sent.")
    zeroed = v.clone()
    zeroed[idx] = 0
    if torch.allclose(new, zeroed, atol=1e-6):
        fail("the sent entries' residual was set to 0, but a sent entry only carries ±τ: "
             "keep v − τ·sign there (the part of v beyond τ is still owed).")
    flipped = v.clone()
    flipped[idx] += tau * signs.to(v.dtype)
    if torch.allclose(new, flipped, atol=1e-6):
        fail("the residual grew at the sent entries: subtract τ·sign (what was sent), "
             "do not add it.")
    fail(f"the new residual differs: {first_difference(want, new)}. It should be "
         "v = residual + grad, minus τ·sign at the sent entries.")


def _conservation(strom_step: Callable, tau: float) -> tuple[int, float]:
    """Run 40 steps; Σ decoded + residual must equal Σ grads."""
    __tracebackhide__ = True
    g = torch.Generator().manual_seed(3)
    d = 300
    residual = torch.zeros(d)
    total_grad = torch.zeros(d, dtype=torch.float64)
    total_sent = torch.zeros(d, dtype=torch.float64)
    count = 0
    for _ in range(40):
        grad = torch.randn(d, generator=g) * 0.2 + 0.05
        idx, signs, residual = (torch.as_tensor(x) for x in
                                call_local(strom_step, grad, residual.clone(), tau))
        total_grad += grad.double()
        total_sent[idx.long()] += tau * signs.double()
        count += idx.numel()
    err = float((total_sent + residual.double() - total_grad).abs().max())
    if err > 1e-3:
        fail(f"over 40 steps, Σ decoded + residual differs from Σ gradients by {err:.3g}: "
             "something is lost between steps (is the residual carried over?).")
    return count, err


# ------------------------------------------------------- task 2: 1-bit with error feedback

class LearnerOneBitEF(ErrorFeedback):
    """The learner's ``ef_onebit(grad, residual) -> (q, residual)`` as a compressor: q is
    ±scale, so it travels losslessly as one bit per entry and one float."""

    def __init__(self, fn: Callable):
        super().__init__(OneBit())
        self.fn = fn
        self.name = "your 1-bit + EF"

    def encode(self, x: torch.Tensor) -> bytes:
        g = torch.as_tensor(x).detach().float().reshape(-1)
        if self.residual is None:
            self.residual = torch.zeros_like(g)
        q, self.residual = self.fn(g, self.residual)
        return OneBit(bucket=g.numel()).encode(torch.as_tensor(q))

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        return OneBit(bucket=numel).decode(data, numel)


def error_feedback_onebit(ef_onebit: Callable, world_size: int = 4, epochs: int = 4,
                          min_accuracy: float = 0.85) -> None:
    """Lesson 08, task 2: ``ef_onebit(grad, residual)`` returns (q, new_residual) with
    v = grad + residual, q = mean|v|·sign(v) (sign(0) = +1), new_residual = v − q; then
    it trains the digits MLP on ``world_size`` real workers."""
    __tracebackhide__ = True
    from ddl_lab.compression.training import merge_logs, train_worker
    g = torch.Generator().manual_seed(11)
    grad = torch.randn(500, generator=g)
    residual = torch.randn(500, generator=g) * 0.5
    grad[:3], residual[:3] = torch.tensor([0.5, -0.25, 1.0]), torch.tensor([-0.5, 0.25, -1.0])
    out = call_local(ef_onebit, grad.clone(), residual.clone())
    q, new = (_tensor(x, w, ef_onebit) for x, w in
              zip(_unpack(out, 2, "q, new_residual", ef_onebit), ("q", "the new residual")))
    want_q, want_new = ef_onebit_step(grad, residual)
    v = grad + residual
    if q.shape != want_q.shape:
        fail(f"q has shape {tuple(q.shape)}, expected {tuple(want_q.shape)}.")
    if not torch.allclose(q, want_q, atol=1e-6):
        _explain_q(q, want_q, grad, v)
    if not torch.allclose(new, want_new, atol=1e-5):
        if not new.abs().any():
            fail("the new residual is all zeros: without it this is plain 1-bit SGD; keep "
                 "v − q, what the signs failed to carry, for the next step.")
        if torch.allclose(new, residual, atol=1e-6):
            fail("the residual came back unchanged: it must become v − q.")
        if torch.allclose(new, -want_new, atol=1e-5):
            fail("the new residual has the wrong sign: it is v − q (what is still owed), "
                 "not q − v.")
        fail(f"the new residual differs: {first_difference(want_new, new)}; expected v − q.")
    logs = run_on_workers(train_worker, world_size, LearnerOneBitEF(ef_onebit),
                          epochs=epochs, timeout=120, learner_fn=ef_onebit)
    result = merge_logs(logs)
    if result.final_accuracy < min_accuracy:
        fail(f"on {world_size} workers your 1-bit + EF reached {100 * result.final_accuracy:.1f}% "
             f"test accuracy after {epochs} epochs; the reference reaches over "
             f"{100 * min_accuracy:.0f}%.")
    passed("error_feedback_onebit", f"q and the residual match; trained on {world_size} "
           f"workers for {len(result.loss)} steps: {100 * result.final_accuracy:.1f}% test "
           f"accuracy with {result.update_bytes:,.0f}-byte updates, {result.reduction:.0f}× "
           "less than fp32.")


def _explain_q(q: torch.Tensor, want: torch.Tensor, grad: torch.Tensor, v: torch.Tensor) -> None:
    __tracebackhide__ = True
    plain, _ = ef_onebit_step(grad, torch.zeros_like(grad))
    if torch.allclose(q, plain, atol=1e-6):
        fail("q ignores the residual: quantize v = grad + residual, not the gradient alone.")
    sgn = torch.where(v >= 0, 1.0, -1.0)
    if torch.allclose(q, sgn) or torch.allclose(q, torch.sign(v)):
        fail("q is ±1: scale the signs by mean|v| so that q keeps the size of the update.")
    if torch.allclose(q, v.abs().max() * sgn, atol=1e-6):
        fail("the scale is max|v|; use mean|v| (it minimises ‖v − scale·sign(v)‖).")
    if torch.allclose(q, v.abs().mean() * torch.sign(v)):
        fail("entries with v = 0 got q = 0 (torch.sign(0) is 0): every entry sends one bit, "
             "so treat 0 as +: `torch.where(v >= 0, 1.0, -1.0)`.")
    fail(f"q differs: {first_difference(want, q)}; expected mean|v|·sign(v), v = grad + "
         "residual.")


# ------------------------------------------------------------------ task 3: QSGD

def qsgd_rounding(qsgd: Callable, s: int = 4) -> None:
    """Lesson 08, task 3: ``qsgd(v, s, u)`` returns QSGD's signed integer levels: with
    r = |v|/‖v‖₂·s, level = ⌊r⌋ + 1 if u < r − ⌊r⌋ else ⌊r⌋, times sign(v)."""
    __tracebackhide__ = True
    g = torch.Generator().manual_seed(5)
    v = torch.randn(256, generator=g) * torch.linspace(0.1, 2.0, 256)
    u = torch.rand(256, generator=g)
    got = _levels(qsgd, v, s, u)
    want = torch.from_numpy(qsgd_levels(v.numpy(), float(v.norm()), s, u.numpy())).long()
    if not torch.equal(got, want):
        _explain_levels(qsgd, got, want, v, s, u)
    zero = call_local(qsgd, torch.zeros(16), s, torch.rand(16, generator=g))
    if not torch.equal(torch.as_tensor(zero).double(), torch.zeros(16, dtype=torch.float64)):
        fail("a zero vector must give zero levels, not NaN or garbage: ‖v‖ = 0, so divide "
             "by it only when it is > 0.")
    worst = _bias(qsgd, v, s)
    nbytes = len(QSGD(s, bucket=v.numel()).encode(v))
    passed("qsgd_rounding", f"levels match; averaged over {DRAWS} draws of u, ‖v‖/s·level "
           f"is within {worst:.1f} standard errors of v everywhere (unbiased); with s={s} "
           f"these {v.numel()} entries take {nbytes} bytes (levels entropy-coded, plus the "
           f"norm) instead of {4 * v.numel()}.")


def _levels(qsgd: Callable, v: torch.Tensor, s: int, u: torch.Tensor) -> torch.Tensor:
    __tracebackhide__ = True
    out = _tensor(call_local(qsgd, v.clone(), s, u.clone()), "the levels", qsgd)
    if out.shape != v.shape:
        fail(f"{qsgd.__name__} returned shape {tuple(out.shape)}, expected {tuple(v.shape)} "
             "(one level per entry).")
    if torch.isnan(out.double()).any():
        fail("the levels contain NaN: divide by ‖v‖ only when it is > 0.")
    if not torch.equal(out.double(), out.double().round()):
        fail("the levels must be integers (−s … s), not the decoded values ‖v‖/s·level.")
    if out.abs().max() > s:
        fail(f"a level is {int(out.abs().max())}, beyond s = {s}: r = |v|/‖v‖₂·s is at "
             "most s, so levels lie in −s … s (normalise by the Euclidean norm).")
    return out.long()


def _explain_levels(qsgd: Callable, got: torch.Tensor, want: torch.Tensor, v: torch.Tensor,
                    s: int, u: torch.Tensor) -> None:
    __tracebackhide__ = True
    sign = torch.sign(v).long()
    r = v.abs() / v.norm() * s
    low = torch.floor(r)
    guesses = {
        "rounds to the nearest level: that is biased (E[Q(v)] ≠ v); round up with "
        "probability r − ⌊r⌋ instead, using u": torch.round(r),
        "always rounds down (⌊r⌋): biased towards 0; round up when u < r − ⌊r⌋": low,
        "always rounds up: biased away from 0; round up only when u < r − ⌊r⌋": torch.ceil(r),
        "rounds up when u > r − ⌊r⌋, i.e. with probability 1 − (r − ⌊r⌋): biased; round "
        "up when u < r − ⌊r⌋": low + (u > r - low),
    }
    for why, lev in guesses.items():
        if torch.equal(got, sign * lev.long()):
            fail(f"your qsgd {why}.")
    for name, norm in (("max|v|", v.abs().max()), ("the L1 norm", v.abs().sum())):
        rr = v.abs() / norm * s
        if torch.equal(got, sign * (torch.floor(rr) + (u < rr - torch.floor(rr))).long()):
            fail(f"you normalised by {name}; QSGD uses the Euclidean norm ‖v‖₂.")
    if torch.equal(got, want.abs()):
        fail("the levels have no sign: multiply by sign(v).")
    worst = _bias(qsgd, v, s, strict=False)
    if worst <= BIAS_LIMIT:
        fail("your rounding looks unbiased but does not follow the u it is given: round up "
             "exactly when u < r − ⌊r⌋ (so the check can reproduce your draws).")
    fail(f"the levels differ: {first_difference(want, got)}; averaged over {DRAWS} draws "
         f"they are off by up to {worst:.1f} standard errors, so the rounding is biased.")


DRAWS = 3000
BIAS_LIMIT = 5.0        # standard errors


def _bias(qsgd: Callable, v: torch.Tensor, s: int, strict: bool = True) -> float:
    """Largest |mean of ‖v‖/s·level over DRAWS draws − v|, in standard errors of the
    exact QSGD rounding (p(1−p) per entry); with ``strict`` a biased one fails."""
    __tracebackhide__ = True
    g = torch.Generator().manual_seed(17)
    v = v.double()
    norm = float(v.norm())
    total = torch.zeros_like(v)
    for _ in range(DRAWS):
        total += _levels(qsgd, v.float(), s, torch.rand(v.shape, generator=g)).double()
    mean = total / DRAWS * norm / s
    r = v.abs() / norm * s
    p = r - torch.floor(r)
    se = (p * (1 - p) / DRAWS).sqrt() * norm / s + norm / s / DRAWS
    worst = float(((mean - v).abs() / se).max())
    if strict and worst > BIAS_LIMIT:
        fail(f"averaged over {DRAWS} draws of u the decoded vector is off by up to "
             f"{worst:.1f} standard errors: the rounding is biased.")
    return worst


# ------------------------------------------------------------ task 4: index coding

def _index_inputs() -> np.ndarray:
    rng = np.random.default_rng(4)
    idx = np.sort(rng.choice(np.arange(200, 60_000), size=400, replace=False))
    return np.concatenate([[137], idx])          # first index > 127: two bytes


def index_coding(delta_varint: Callable) -> None:
    """Lesson 08, task 4: ``delta_varint(indices)`` codes sorted indices as gaps (the first
    index itself, then i_k − i_{k−1}) in LEB128 varints: low 7 bits first, high bit set
    on every byte but a number's last."""
    __tracebackhide__ = True
    idx = _index_inputs()
    data = call_local(delta_varint, idx.copy())
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        fail(f"{delta_varint.__name__} returned {type(data).__name__}; return bytes "
             "(e.g. `bytes(out)` of a bytearray).")
    want = varint_encode(np.diff(idx, prepend=0))
    if data != want:
        _explain_coding(data, want, idx)
    passed("index_coding", f"{len(idx)} indices in {len(data)} bytes "
           f"({8 * len(data) / len(idx):.1f} bits each) instead of {4 * len(idx)} as int32; "
           f"an entropy coder (deflate) on top: {len(encode_indices(idx, 'deflate'))} bytes.")


def _explain_coding(data: bytes, want: bytes, idx: np.ndarray) -> None:
    __tracebackhide__ = True
    if len(data) >= 4 * len(idx):
        fail(f"{len(data)} bytes for {len(idx)} indices is not smaller than int32 "
             f"({4 * len(idx)} bytes): a varint takes one byte per 7 bits of the gap.")
    gaps = np.diff(idx, prepend=0)
    try:
        flipped = varint_decode(bytes(b ^ 0x80 for b in data))
    except ValueError:
        flipped = None
    if flipped is not None and np.array_equal(flipped, gaps):
        fail("the continuation bit is inverted: set 0x80 on every byte except the last "
             "of each number.")
    try:
        values = varint_decode(data)
    except ValueError:
        fail("the bytes do not decode as LEB128: the last byte of each number must have its "
             "high bit clear, the others set (low 7 bits first).")
    if np.array_equal(values, idx):
        fail("you coded the indices themselves; code the gaps: the first index, then "
             "i_k − i_{k−1} (small numbers, so mostly one byte).")
    if values.size == gaps.size and np.array_equal(values[1:], gaps[1:] - 1):
        fail("the gaps are one too small (i_k − i_{k−1} − 1): the decoder adds the gaps up, "
             "so the indices come back off by one. Use i_k − i_{k−1}.")
    if values.size == gaps.size - 1 and np.array_equal(values, gaps[1:]):
        fail("the first index is missing: the first value is the first index itself.")
    fail(f"decoded with LEB128 your bytes give {values[:5].tolist()}…, expected the gaps "
         f"{gaps[:5].tolist()}… ({len(data)} bytes, expected {len(want)}).")
