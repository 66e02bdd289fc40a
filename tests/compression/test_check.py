"""Lesson 08's checks accept the solutions and reject the stub and plausible mistakes."""
import numpy as np
import pytest
import torch

from ddl_lab import check
from ddl_lab.check import CheckFailed, _core
from ddl_lab.compression.compressors import _ef_onebit_step as ef_onebit_step
from ddl_lab.compression.compressors import _strom_step as strom_step
from ddl_lab.compression.compressors import varint_encode


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    monkeypatch.setattr(_core, "DEFAULT_TIMEOUT", 20.0)


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------ task 1: Strom's threshold

def strom_solution(grad, residual, tau):
    v = residual + grad
    idx = torch.nonzero(v.abs() >= tau).flatten()
    signs = torch.where(v[idx] >= 0, 1, -1)
    new = v.clone()
    new[idx] -= tau * signs
    return idx, signs, new


def strom_residual_dropped(grad, residual, tau):
    idx, signs, _ = strom_solution(grad, residual, tau)
    return idx, signs, torch.zeros_like(grad)


def strom_sent_entries_zeroed(grad, residual, tau):
    v = residual + grad
    idx, signs, _ = strom_solution(grad, residual, tau)
    new = v.clone()
    new[idx] = 0
    return idx, signs, new


def strom_off_by_one(grad, residual, tau):
    idx, signs, new = strom_solution(grad, residual, tau)
    return idx + 1, signs, new


def strom_ignores_residual(grad, residual, tau):
    return strom_solution(grad, torch.zeros_like(residual), tau)


def strom_strict(grad, residual, tau):
    v = residual + grad
    idx = torch.nonzero(v.abs() > tau).flatten()
    signs = torch.where(v[idx] >= 0, 1, -1)
    new = v.clone()
    new[idx] -= tau * signs
    return idx, signs, new


def strom_zero_one_signs(grad, residual, tau):
    idx, signs, new = strom_solution(grad, residual, tau)
    return idx, (signs > 0).long(), new


def strom_mask(grad, residual, tau):
    idx, signs, new = strom_solution(grad, residual, tau)
    return (residual + grad).abs() >= tau, signs, new


def test_strom_solution_and_reference_pass(capsys):
    check.strom_threshold(strom_solution)
    check.strom_threshold(strom_step)
    out = capsys.readouterr().out
    assert out.count("✔ strom_threshold: passed") == 2 and "only delayed" in out


def test_strom_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.strom_threshold(stub)


@pytest.mark.parametrize("wrong, hint", [
    (strom_residual_dropped, "residual was not kept"),
    (strom_sent_entries_zeroed, "only carries ±τ"),
    (strom_off_by_one, "off by one"),
    (strom_ignores_residual, "add the residual first"),
    (strom_strict, r"\|v\| ≥ τ"),
    (strom_zero_one_signs, "signs are 0/1"),
    (strom_mask, "boolean mask"),
    (lambda g, r, t: strom_solution(g, r, t)[:2], "must return a tuple"),
])
def test_strom_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.strom_threshold(wrong)


# ---------------------------------------------------- task 2: 1-bit with error feedback

def ef_solution(grad, residual):
    v = grad + residual
    q = v.abs().mean() * torch.where(v >= 0, 1.0, -1.0)
    return q, v - q


def ef_no_feedback(grad, residual):
    q = grad.abs().mean() * torch.where(grad >= 0, 1.0, -1.0)
    return q, torch.zeros_like(grad)


def ef_residual_not_kept(grad, residual):
    q, _ = ef_solution(grad, residual)
    return q, torch.zeros_like(grad)


def ef_flipped_residual(grad, residual):
    q, new = ef_solution(grad, residual)
    return q, -new


def ef_torch_sign(grad, residual):
    v = grad + residual
    q = v.abs().mean() * torch.sign(v)
    return q, v - q


def ef_unscaled(grad, residual):
    v = grad + residual
    q = torch.where(v >= 0, 1.0, -1.0)
    return q, v - q


def test_ef_solution_passes_and_trains_on_workers(capsys):
    check.error_feedback_onebit(ef_solution)
    out = capsys.readouterr().out
    assert "✔ error_feedback_onebit: passed" in out and "trained on 4 workers" in out


def test_ef_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.error_feedback_onebit(stub)


@pytest.mark.parametrize("wrong, hint", [
    (ef_no_feedback, "q ignores the residual"),
    (ef_residual_not_kept, "without it this is plain 1-bit SGD"),
    (ef_flipped_residual, "wrong sign"),
    (ef_torch_sign, r"torch.sign\(0\) is 0"),
    (ef_unscaled, "scale the signs by mean"),
])
def test_ef_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.error_feedback_onebit(wrong)


def test_ef_that_fails_only_on_the_workers_names_the_rank():
    def breaks_on_workers(grad, residual):
        if grad.numel() > 1000:          # the model's gradient, not the local test vector
            raise RuntimeError("out of bits")
        return ef_onebit_step(grad, residual)
    with pytest.raises(CheckFailed, match="failed on rank 0 of 4: RuntimeError: out of bits"):
        check.error_feedback_onebit(breaks_on_workers)


# ------------------------------------------------------------------ task 3: QSGD

def qsgd_solution(v, s, u):
    norm = v.norm()
    if norm == 0:
        return torch.zeros_like(v, dtype=torch.long)
    r = v.abs() / norm * s
    low = torch.floor(r)
    return (torch.sign(v) * (low + (u < r - low))).long()


def qsgd_nearest(v, s, u):
    return (torch.sign(v) * torch.round(v.abs() / v.norm() * s)).long()


def qsgd_floor(v, s, u):
    return (torch.sign(v) * torch.floor(v.abs() / v.norm() * s)).long()


def qsgd_inverted(v, s, u):
    r = v.abs() / v.norm() * s
    low = torch.floor(r)
    return (torch.sign(v) * (low + (u > r - low))).long()


def qsgd_max_norm(v, s, u):
    r = v.abs() / v.abs().max() * s
    low = torch.floor(r)
    return (torch.sign(v) * (low + (u < r - low))).long()


def qsgd_own_randomness(v, s, u):
    return qsgd_solution(v, s, torch.rand(v.shape))


def qsgd_divides_by_zero(v, s, u):
    r = v.abs() / v.norm() * s
    low = torch.floor(r)
    return torch.sign(v) * (low + (u < r - low))


def qsgd_values(v, s, u):
    return qsgd_solution(v, s, u) * v.norm() / s


def test_qsgd_solution_passes(capsys):
    check.qsgd_rounding(qsgd_solution)
    assert "✔ qsgd_rounding: passed" in capsys.readouterr().out


def test_qsgd_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.qsgd_rounding(stub)


@pytest.mark.parametrize("wrong, hint", [
    (qsgd_nearest, "nearest level: that is biased"),
    (qsgd_floor, "always rounds down"),
    (qsgd_inverted, "probability 1 − "),
    (qsgd_max_norm, "Euclidean norm"),
    (qsgd_own_randomness, "does not follow the u"),
    (qsgd_divides_by_zero, "zero vector must give zero levels"),
    (qsgd_values, "must be integers"),
    (lambda v, s, u: qsgd_solution(v, s, u).abs(), "no sign"),
])
def test_qsgd_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.qsgd_rounding(wrong)


# ------------------------------------------------------------ task 4: index coding

def varint_solution(indices):
    out = bytearray()
    prev = 0
    for i in indices:
        gap = int(i) - prev
        prev = int(i)
        while gap >= 0x80:
            out.append((gap & 0x7F) | 0x80)
            gap >>= 7
        out.append(gap)
    return bytes(out)


def varint_absolute(indices):
    return varint_encode(np.asarray(indices))


def varint_gap_minus_one(indices):
    gaps = np.diff(indices, prepend=0)
    gaps[1:] -= 1
    return varint_encode(gaps)


def varint_int32(indices):
    return np.diff(indices, prepend=0).astype(np.int32).tobytes()


def varint_inverted_bit(indices):
    return bytes(b ^ 0x80 for b in varint_solution(indices))


def varint_no_first(indices):
    return varint_encode(np.diff(indices))


def test_index_coding_solution_passes(capsys):
    check.index_coding(varint_solution)
    assert "✔ index_coding: passed" in capsys.readouterr().out


def test_index_coding_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.index_coding(stub)


@pytest.mark.parametrize("wrong, hint", [
    (varint_absolute, "coded the indices themselves"),
    (varint_gap_minus_one, "off by one"),
    (varint_int32, "not smaller than int32"),
    (varint_inverted_bit, "continuation bit is inverted"),
    (varint_no_first, "first index is missing"),
    (lambda idx: list(varint_solution(idx)), "return bytes"),
])
def test_index_coding_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.index_coding(wrong)
