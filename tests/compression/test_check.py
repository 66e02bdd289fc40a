"""Lesson 08's checks pass right answers written in several styles (torch and numpy, float32
and float64) and name the mistakes learners make."""
import numpy as np
import pytest
import torch

from ddl_lab import check
from ddl_lab.check import CheckFailed
from tests.learner_types import STYLES, in_learner_types


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------ task 1: Strom's threshold

def strom_numpy(grad, residual, tau):
    """Another right style: numpy in float64, int8 signs, residual updated in place."""
    v = residual.numpy().astype(np.float64) + grad.numpy()
    idx = np.flatnonzero(np.abs(v) >= tau)
    signs = np.sign(v[idx]).astype(np.int8)
    v[idx] -= tau * signs
    return idx, signs, v


def strom_loop(grad, residual, tau):
    """Another right style: a Python loop, lists of indices and float signs."""
    new = residual + grad
    idx, signs = [], []
    for i in range(len(new)):
        if abs(float(new[i])) >= tau:
            s = 1.0 if new[i] >= 0 else -1.0
            idx.append(i)
            signs.append(s)
            new[i] -= tau * s
    return torch.tensor(idx, dtype=torch.long), torch.tensor(signs), new


def _strom(grad, residual, tau, v=None, strict=False, signs_of=None, residual_rule="keep"):
    v = residual + grad if v is None else v
    mask = v.abs() > tau if strict else v.abs() >= tau
    idx = torch.nonzero(mask).flatten()
    signs = torch.where((v if signs_of is None else signs_of)[idx] >= 0, 1, -1)
    new = v.clone()
    if residual_rule == "keep":
        new[idx] -= tau * signs
    elif residual_rule == "zero-sent":
        new[idx] = 0
    elif residual_rule == "zeros":
        new = torch.zeros_like(v)
    return idx, signs, new


def strom_mutates_grad(grad, residual, tau):
    grad += residual                                 # "v" computed in the caller's tensor
    return _strom(grad, torch.zeros_like(grad), tau)


@pytest.mark.parametrize("right", [strom_numpy, strom_loop])
def test_right_strom_steps_pass(right, solution, capsys):
    check.strom_threshold(right)
    out = capsys.readouterr().out
    assert out.count("✔ strom_threshold: passed") == 1 and "only delayed" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda g, r, t: _strom(g, r, t, residual_rule="zeros"), "residual was not kept"),
    (lambda g, r, t: _strom(g, r, t, residual_rule="zero-sent"), "only carries ±τ"),
    (lambda g, r, t: (lambda i, s, n: (i + 1, s, n))(*_strom(g, r, t)), "off by one"),
    (lambda g, r, t: _strom(g, r, t, v=g), "add the residual first"),
    (lambda g, r, t: _strom(g, r, t, strict=True), r"\|v\| ≥ τ"),
    (lambda g, r, t: _strom(g, r, t, signs_of=g), "the signs are those of grad"),
    (lambda g, r, t: (lambda i, s, n: (i, (s > 0).long(), n))(*_strom(g, r, t)), "signs are 0/1"),
    (lambda g, r, t: ((r + g).abs() >= t, *_strom(g, r, t)[1:]), "boolean mask"),
    (lambda g, r, t: _strom(g, r, 0.5), r"you used τ = 0\.5, not the tau given"),
    (lambda g, r, t: _strom(g, r, t)[:2], "must return a tuple"),
    (lambda g, r, t: None, "returned None"),
    (strom_mutates_grad, "changed its argument `grad` in place"),
])
def test_strom_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.strom_threshold(wrong)


def _package(name):
    from ddl_lab.compression import compressors
    return getattr(compressors, name, None) or getattr(compressors, "_" + name)


def pkg_levels(v, s, u):
    from ddl_lab.compression.compressors import qsgd_levels
    return qsgd_levels(v.numpy(), float(v.norm()), s, u.numpy())


def pkg_coding(indices):
    from ddl_lab.compression import compressors
    return compressors.varint_encode(np.diff(indices, prepend=0))


# ---------------------------------------------------- task 1: 1-bit with error feedback

def ef_numpy(grad, residual):
    """Another right style: numpy float64 answers to float32 inputs (crashed the old check)."""
    v = grad.numpy().astype(np.float64) + residual.numpy()
    q = np.abs(v).mean() * np.where(v >= 0, 1.0, -1.0)
    return q, v - q


def ef_in_place(grad, residual):
    """Another right style: the residual updated in place, copysign for the signs."""
    residual += grad
    q = torch.copysign(residual.abs().mean().expand_as(residual), residual + 0.0)
    q = torch.where(residual == 0, residual.abs().mean(), q)
    residual -= q
    return q, residual


def _ef(grad, residual, v=None, scale="mean", sign="where", rule="v-q"):
    v = grad + residual if v is None else v
    s = {"mean": v.abs().mean(), "max": v.abs().max(), "one": torch.tensor(1.0)}[scale]
    q = s * (torch.where(v >= 0, 1.0, -1.0) if sign == "where" else torch.sign(v))
    new = {"v-q": v - q, "zeros": torch.zeros_like(v), "q-v": q - v, "same": residual}[rule]
    return q, new


def ef_no_feedback(grad, residual):
    return _ef(grad, residual, v=grad, rule="zeros")


def test_ef_right_answers_pass_and_train_on_workers(solution, capsys):
    check.error_feedback_onebit(ef_numpy)
    check.error_feedback_onebit(ef_in_place)
    out = capsys.readouterr().out
    assert out.count("✔ error_feedback_onebit: passed") == 2 and "trained on 4 workers" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (ef_no_feedback, "q ignores the residual"),
    (lambda g, r: _ef(g, r, rule="zeros"), "without it this is plain 1-bit SGD"),
    (lambda g, r: _ef(g, r, rule="q-v"), "wrong sign"),
    (lambda g, r: _ef(g, r, rule="same"), "came back unchanged"),
    (lambda g, r: _ef(g, r, sign="sign"), r"torch.sign\(0\) is 0"),
    (lambda g, r: _ef(g, r, scale="one"), "scale the signs by mean"),
    (lambda g, r: _ef(g, r, scale="max"), r"the scale is max\|v\|"),
    (lambda g, r: _ef(g, r)[0], "must return a tuple"),
])
def test_ef_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.error_feedback_onebit(wrong)


def test_ef_that_fails_only_on_the_workers_names_the_rank(solution):
    right = solution("08_compression", "my_error_feedback_onebit")

    def breaks_on_workers(grad, residual):
        if grad.numel() > 5000:          # the model's gradient, not the check's vectors
            raise RuntimeError("out of bits")
        return right(grad, residual)
    with pytest.raises(CheckFailed, match=r"failed on rank \d of 4: RuntimeError: out of bits"):
        check.error_feedback_onebit(breaks_on_workers)


# ------------------------------------------------------------------ task 2: QSGD

def qsgd_numpy(v, s, u):
    """Another right style: numpy float64, int8 levels."""
    x = v.numpy().astype(np.float64)
    norm = np.sqrt((x * x).sum())
    if norm == 0:
        return np.zeros(x.shape, dtype=np.int8)
    r = np.abs(x) / norm * s
    low = np.floor(r)
    return (np.sign(x) * (low + (u.numpy() < r - low))).astype(np.int8)


def qsgd_float_levels(v, s, u):
    """Another right style: float levels with integral values, a masked norm."""
    norm = torch.linalg.vector_norm(v)
    r = v.abs() / torch.clamp(norm, min=torch.finfo(v.dtype).tiny) * s
    return torch.sign(v) * (torch.floor(r) + (u < r - torch.floor(r)).to(v.dtype))


def _q(v, s, u, rounding="u", norm="l2", signed=True, scale=False):
    n = {"l2": v.norm(), "max": v.abs().max(), "l1": v.abs().sum()}[norm]
    if n == 0:
        return torch.zeros_like(v, dtype=torch.long)
    r = v.abs() / n * s
    low = torch.floor(r)
    lev = {"u": low + (u < r - low), "nearest": torch.round(r), "floor": low,
           "ceil": torch.ceil(r), "inverted": low + (u > r - low),
           "own": low + (torch.rand(v.shape, dtype=v.dtype) < r - low)}[rounding]
    out = torch.sign(v) * lev if signed else lev
    return out * n / s if scale else out.long()


def qsgd_divides_by_zero(v, s, u):
    r = v.abs() / v.norm() * s
    return torch.sign(v) * (torch.floor(r) + (u < r - torch.floor(r)))


@pytest.mark.parametrize("right", [qsgd_numpy, qsgd_float_levels])
def test_right_qsgd_passes(right, solution, capsys):
    check.qsgd_rounding(right)
    assert capsys.readouterr().out.count("✔ qsgd_rounding: passed") == 1


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda v, s, u: _q(v, s, u, rounding="nearest"), "nearest level: that is biased"),
    (lambda v, s, u: _q(v, s, u, rounding="floor"), "always round down"),
    (lambda v, s, u: _q(v, s, u, rounding="ceil"), "always round up"),
    (lambda v, s, u: _q(v, s, u, rounding="inverted"), "probability 1 − "),
    (lambda v, s, u: _q(v, s, u, norm="max"), r"max\|v\|; QSGD uses the Euclidean norm"),
    (lambda v, s, u: _q(v, s, u, norm="l1"), "L1 norm"),
    (lambda v, s, u: _q(v, s, u, rounding="own"), "does not follow the u"),
    (lambda v, s, u: _q(v, s, u, signed=False), "no sign"),
    (lambda v, s, u: _q(v, s, u, scale=True), "must be integers"),
    (lambda v, s, u: _q(v, 4, u), r"you used s = 4, not the s given"),
    (qsgd_divides_by_zero, "zero vector gives zero levels"),
    (lambda v, s, u: None, "returned None"),
])
def test_qsgd_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.qsgd_rounding(wrong)


# ------------------------------------------------------------ task 3: index coding

def varint_numpy(indices):
    """Another right style: vectorised gaps, bytearray back."""
    out = bytearray()
    for gap in np.diff(np.asarray(indices, dtype=np.int64), prepend=0).tolist():
        while True:
            byte, gap = gap & 0x7F, gap >> 7
            out.append(byte | (0x80 if gap else 0))
            if not gap:
                break
    return out


def _varint(values, max_bytes=None, skip_zero=False, big_endian=False, flip=False):
    out = bytearray()
    for x in values:
        x = int(x)
        if x == 0 and skip_zero:
            continue
        chunk = []
        while True:
            chunk.append(x & 0x7F)
            x >>= 7
            if not x or (max_bytes and len(chunk) == max_bytes):
                break
        chunk = chunk[::-1] if big_endian else chunk
        out += bytes((b | 0x80) ^ (0x80 if flip else 0) if k < len(chunk) - 1
                     else b ^ (0x80 if flip else 0) for k, b in enumerate(chunk))
    return bytes(out)


def _gaps(indices):
    return np.diff(np.asarray(indices, dtype=np.int64), prepend=0)


def varint_in_place(indices):
    indices[1:] -= indices[:-1].copy()               # the caller's array becomes the gaps
    return _varint(indices)


@pytest.mark.parametrize("right", [varint_numpy])
def test_right_index_coding_passes(right, solution, capsys):
    check.index_coding(right)
    assert capsys.readouterr().out.count("✔ index_coding: passed") == 1


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda idx: _varint(idx), "coded the indices themselves"),
    (lambda idx: _varint(np.r_[_gaps(idx)[:1], _gaps(idx)[1:] - 1]), "one too small"),
    (lambda idx: _gaps(idx).astype(np.int32).tobytes(), "not smaller than int32"),
    (lambda idx: _varint(_gaps(idx), flip=True), "continuation bit is inverted"),
    (lambda idx: _varint(_gaps(idx)[1:]), "first index is missing"),
    (lambda idx: _varint(_gaps(idx), max_bytes=2), r"is 16384, .*needs 3 bytes .*wrote only 2"),
    (lambda idx: _varint(_gaps(idx), skip_zero=True), r"first index is 0 .*one byte 0x00"),
    (lambda idx: _varint(_gaps(idx), big_endian=True), "LOW 7 bits first"),
    (lambda idx: list(_varint(_gaps(idx))), "return bytes"),
    (varint_in_place, "changed its argument `indices` in place"),
])
def test_index_coding_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.index_coding(wrong)


def test_same_verdict_five_times(solution, capsys):
    """The training on workers ends the same way every time (gloo sums in a fixed order)."""
    right = solution("08_compression", "my_error_feedback_onebit")
    lines = set()
    for _ in range(5):
        check.error_feedback_onebit(right, epochs=1, min_accuracy=0.3)
        lines.add(capsys.readouterr().out)
    assert len(lines) == 1 and "passed" in lines.pop()


# index_coding is left out: its answer is bytes, which hold no number a dtype could change.
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task", ["strom_threshold", "error_feedback_onebit", "qsgd_rounding"])
def test_solutions_in_learner_number_types_pass(task, style, solution, capsys):
    """Issue 26's rule for numbers: the solution's results as float32 (and integral floats) or
    numpy numbers pass."""
    getattr(check, task)(in_learner_types(solution("08_compression", f"my_{task}"), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
