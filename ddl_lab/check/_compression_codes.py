"""Lesson 08's checks of the encodings — QSGD's levels and delta + varint index coding —
and the helpers all of lesson 08's checks share; ``check/compression.py`` exports them."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from ddl_lab.compression.compressors import QSGD, encode_indices, varint_encode
from ._core import call_local, fail, passed, task
from ._diagnose import (Case, Cases, Snapshot, as_array, describe_value, differs, returned_arrays, returned_none)

_PACKAGE = "ddl_lab.compression"


def _parts(out: Any, names: tuple[str, ...], fn: Callable) -> list[np.ndarray]:
    """The learner's tuple of arrays, or a CheckFailed saying what came back instead."""
    arrays = returned_arrays(out, names, getattr(fn, "__name__", "your function"))
    if isinstance(arrays, str):
        fail(arrays)
    return arrays


def _inputs(case: Case, count: int, scale: float = 1.0) -> list[torch.Tensor]:
    """``count`` random vectors of the case's length and dtype, values far from ±1."""
    d, dtype = case.params["d"], case.params["dtype"]
    return [torch.from_numpy(case.rng.normal(size=d) * scale * case.params.get("scale", 1.0))
            .to(getattr(torch, dtype)) for _ in range(count)]


def _changed(snap: Snapshot, name: str, case: Case, allowed: tuple[str, ...] = ()) -> None:
    """Fail if the learner changed an input it was not allowed to."""
    message = snap.changed(name, allowed)
    if message:
        fail(f"{message} ({case})")


# ------------------------------------------------------------------ task 3: QSGD

DRAWS = 3000
BIAS_LIMIT = 5.0        # standard errors


def _qsgd_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"d": int(rng.choice([1, 2, 3, 50, 256, 1000])), "s": int(rng.integers(1, 17)),
            "dtype": str(rng.choice(["float32", "float64"])),
            "scale": round(float(10 ** rng.uniform(-3, 2)), 5)}


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
    """Lesson 08, task 3: ``my_qsgd_rounding(v, s, u)`` returns QSGD's signed integer levels:
    with r = |v|/‖v‖₂·s, level = ⌊r⌋ + 1 if u < r − ⌊r⌋ else ⌊r⌋, times sign(v)."""
    fn = my_qsgd_rounding
    cases = list(Cases("qsgd_rounding", seed, [
        {"d": 256, "s": 4, "dtype": "float32", "scale": 1.0},
        {"d": 16, "s": 4, "dtype": "float32", "scale": 0.0},
        {"d": 9, "s": 7, "dtype": "float64", "onehot": True},
        {"d": 1, "s": 1, "dtype": "float32", "scale": 0.3}], draws=3, draw=_qsgd_draw))
    for case in cases:
        v, u = _qsgd_inputs(case)
        s = case.params["s"]
        got = _levels(fn, v, s, u, case)
        v_np, u_np = v.numpy(), u.numpy()
        exact = _qsgd_ref(v_np.astype(np.float64), s, u_np.astype(np.float64))
        if not (np.array_equal(got, exact) or np.array_equal(got, _qsgd_ref(v_np, s, u_np))):
            fail(f"{_levels_fault(fn, got, exact, v_np, s, u_np)} ({case})")
    v, _ = _qsgd_inputs(cases[0])
    worst = _bias(fn, v, 4, cases[0])
    nbytes = len(QSGD(4, bucket=v.numel()).encode(v))
    passed("qsgd_rounding", f"levels match on {len(cases)} cases (1 to 1,000 entries, s = 1 to "
           f"16, a zero vector, an entry exactly at the top level); averaged over {DRAWS} draws "
           f"of u, ‖v‖/s·level is within {worst:.1f} standard errors of v everywhere "
           f"(unbiased); with s = 4, {v.numel()} entries take {nbytes} bytes (levels "
           f"entropy-coded, plus the norm) instead of {4 * v.numel()}.")


def _levels(fn: Callable, v: torch.Tensor, s: int, u: torch.Tensor, case: Case) -> np.ndarray:
    name = getattr(fn, "__name__", "your function")
    raw = call_local(fn, v.clone(), s, u.clone())
    out = as_array(raw)
    if out is None:
        fail(returned_none(raw, name, "the integer levels") or
             f"{name} returned {describe_value(raw)}; return the levels as a tensor ({case}).")
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


def _levels_fault(fn: Callable, got: np.ndarray, want: np.ndarray, v: np.ndarray, s: int,
                  u: np.ndarray) -> str:
    v = v.astype(np.float64)
    sign = np.sign(v)
    norm = float(np.linalg.norm(v))
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
        "the levels have no sign: multiply by sign(v)": np.abs(want)}
    for c in range(1, 17):
        if c != s:
            guesses[f"you used s = {c}, not the s given ({s})"] = _qsgd_ref(v, c, u)
    hint = next((h for h, w in guesses.items() if np.array_equal(got, w)), None)
    if hint:
        return hint
    if v.size >= 50 and _bias(fn, torch.from_numpy(v), s, None, strict=False) <= BIAS_LIMIT:
        return ("your rounding looks unbiased but does not follow the u it is given: round up "
                "exactly when u < r − ⌊r⌋ (so the check can reproduce your draws)")
    return (f"the levels differ: {differs(want, got, rtol=0.0)}; level = ⌊r⌋ + 1 when "
            "u < r − ⌊r⌋, else ⌊r⌋, times sign(v), with r = |v|/‖v‖₂·s")


def _bias(fn: Callable, v: torch.Tensor, s: int, case: Case | None, strict: bool = True) -> float:
    """Largest |mean of ‖v‖/s·level over DRAWS draws − v|, in standard errors of the exact
    QSGD rounding (p(1−p) per entry); with ``strict`` a biased one fails."""
    g = torch.Generator().manual_seed(17)
    v = v.double()
    norm = float(v.norm())
    total = np.zeros(v.shape)
    for _ in range(DRAWS):
        u = torch.rand(v.shape, generator=g, dtype=torch.float64)
        total += _levels(fn, v.float(), s, u.float(), case)
    mean = total / DRAWS * norm / s
    r = v.abs().numpy() / norm * s
    p = r - np.floor(r)
    se = np.sqrt(p * (1 - p) / DRAWS) * norm / s + norm / s / DRAWS
    worst = float((np.abs(mean - v.numpy()) / se).max())
    if strict and worst > BIAS_LIMIT:
        fail(f"averaged over {DRAWS} draws of u the decoded vector is off by up to {worst:.1f} "
             "standard errors: the rounding is biased.")
    return worst


# ------------------------------------------------------------ task 4: index coding

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
    """Lesson 08, task 4: ``my_index_coding(indices)`` codes sorted indices as gaps (the first
    index itself, then i_k − i_{k−1}) in LEB128 varints: low 7 bits first, high bit set on
    every byte but a number's last."""
    fn, name = my_index_coding, getattr(my_index_coding, "__name__", "your function")
    fixed = [{"indices": i, "dtype": "int64"} for i in _INDEX_FIXED]
    fixed.append({"count": 400, "span": 60_000, "first": 137, "dtype": "int64"})
    cases = list(Cases("index_coding", seed, fixed, draws=3, draw=_index_draw))
    for case in cases:
        idx = _index_array(case)
        snap = Snapshot(indices=idx)
        data = call_local(fn, idx)
        _changed(snap, name, case)
        if isinstance(data, (bytearray, memoryview)):
            data = bytes(data)
        if not isinstance(data, bytes):
            fail(returned_none(data, name, "bytes") or f"{name} returned a "
                 f"{type(data).__name__}; return bytes (e.g. `bytes(out)` of a bytearray).")
        gaps = np.diff(idx.astype(np.int64), prepend=0)
        if data != varint_encode(gaps):
            fail(f"{_coding_fault(data, gaps, idx)} ({case})")
    big = _index_array(cases[len(_INDEX_FIXED)])
    passed("index_coding", f"{len(big)} indices in {len(varint_encode(np.diff(big, prepend=0)))} "
           f"bytes instead of {4 * len(big)} as int32 (deflate on top: "
           f"{len(encode_indices(big, 'deflate'))}); right on {len(cases)} cases: no index, a "
           "first index 0, gaps of 127/128, 16,383/16,384 and up to 2³¹ − 1")


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
