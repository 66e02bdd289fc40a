"""Compressed updates: gradients encoded to real bytes and decoded back (lesson 08).

Every compressor has one interface::

    data = comp.encode(g)            # bytes: what would cross the network
    g_hat = comp.decode(data, g.numel())

- ``FP32``: the raw 32-bit floats (the "None" row of Do's lecture's table); ``FP16``: 16-bit floats.
- ``OneBit``: the sign of each entry, one bit, and one scale (mean |g|) per bucket
  (Seide et al., 1-bit SGD, 2014).
- ``QSGD``: levels 0..s of each sign per bucket (variance ≤ min(d/s², √d/s)·‖v‖², Alistarh et al. Lemma 3.1), unbiased stochastic rounding, entropy-coded
  (Alistarh et al., 2017).
- ``Threshold``: Strom's scheme (2015) — entries beyond ±τ are sent as a sign bit and
  an index and decode to ±τ; with ``ErrorFeedback`` the rest stays in a residual.
- ``TopK``: the k largest entries, index and float32 value (Deep Gradient Compression).
- ``ErrorFeedback(c)``: wraps any compressor; what the encoding lost is kept in a
  residual and added to the next gradient, so nothing is lost, only delayed.

Index lists are coded compactly: deltas between sorted indices, LEB128 varints, then
an entropy coder (raw deflate or lzma from the standard library) when it helps.
"""
from __future__ import annotations

import lzma
import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["Compressor", "FP32", "FP16", "OneBit", "QSGD", "Threshold", "TopK",
           "ErrorFeedback", "Scheme", "SCHEMES", "varint_encode", "varint_decode",
           "encode_indices", "decode_indices", "index_coding_sizes", "qsgd_levels",
           "compare_on"]

CODERS = ("none", "deflate", "lzma")


# ------------------------------------------------------------------ index coding

def varint_encode(values: np.ndarray) -> bytes:
    """Non-negative integers as LEB128 varints: 7 bits a byte, high bit = "more follows"."""
    v = np.asarray(values, dtype=np.int64).ravel()
    if v.size and v.min() < 0:
        raise ValueError("varints code non-negative integers; got a negative value "
                         "(are the indices sorted before taking deltas?)")
    v = v.astype(np.uint64)
    if v.size == 0:
        return b""
    groups = np.ones(v.size, dtype=np.int64)
    rest = v >> np.uint64(7)
    while rest.any():
        groups += rest > 0
        rest >>= np.uint64(7)
    g = int(groups.max())
    shifts = np.arange(g, dtype=np.uint64) * np.uint64(7)
    parts = ((v[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    more = np.arange(g)[None, :] < (groups[:, None] - 1)
    parts[more] |= 0x80
    keep = np.arange(g)[None, :] < groups[:, None]
    return parts[keep].tobytes()


def varint_decode(data: bytes) -> np.ndarray:
    """Inverse of ``varint_encode`` (int64 array)."""
    b = np.frombuffer(data, dtype=np.uint8)
    if b.size == 0:
        return np.zeros(0, dtype=np.int64)
    if b[-1] & 0x80:
        raise ValueError("truncated varint stream: the last byte says more bytes follow")
    last = (b & 0x80) == 0
    which = np.concatenate([[0], np.cumsum(last)[:-1]])          # value of each byte
    starts = np.concatenate([[0], np.flatnonzero(last)[:-1] + 1])
    shift = (np.arange(b.size) - starts[which]).astype(np.uint64) * np.uint64(7)
    out = np.zeros(int(last.sum()), dtype=np.uint64)
    np.add.at(out, which, (b & 0x7F).astype(np.uint64) << shift)
    return out.astype(np.int64)


def _entropy_code(raw: bytes, coder: str) -> bytes:
    """One flag byte, then ``raw`` as is or entropy-coded, whichever is shorter."""
    if coder not in CODERS:
        raise ValueError(f"unknown coder {coder!r}: use one of {CODERS}")
    best = b"\x00" + raw
    if coder == "deflate":                                # zlib's default level 6:
        c = zlib.compressobj(6, zlib.DEFLATED, -15)          # level 9 is ~30× slower
        packed = b"\x01" + c.compress(raw) + c.flush()
    elif coder == "lzma":
        packed = b"\x02" + lzma.compress(raw, format=lzma.FORMAT_RAW, filters=_LZMA)
    else:
        return best
    return packed if len(packed) < len(best) else best


_LZMA = [{"id": lzma.FILTER_LZMA2, "preset": 9}]


def _entropy_decode(data: bytes) -> bytes:
    flag, body = data[:1], data[1:]
    if flag == b"\x00":
        return body
    if flag == b"\x01":
        return zlib.decompress(body, -15)
    if flag == b"\x02":
        return lzma.decompress(body, format=lzma.FORMAT_RAW, filters=_LZMA)
    raise ValueError(f"not an entropy-coded block (flag byte {data[:1]!r})")


def encode_indices(idx: np.ndarray, coder: str = "deflate") -> bytes:
    """Sorted distinct indices → deltas → varints → entropy coder (lesson 08).

    The first delta is the first index itself; the others are gaps ≥ 1. With
    ``coder='none'`` only the varints are kept (plus one flag byte).
    """
    idx = np.asarray(idx, dtype=np.int64).ravel()
    if idx.size and (idx[0] < 0 or np.any(np.diff(idx) <= 0)):
        raise ValueError("encode_indices needs sorted, distinct, non-negative indices")
    deltas = np.diff(idx, prepend=0)
    return _entropy_code(varint_encode(deltas), coder)


def decode_indices(data: bytes) -> np.ndarray:
    """Inverse of ``encode_indices``."""
    return np.cumsum(varint_decode(_entropy_decode(data)))


def index_coding_sizes(idx: np.ndarray) -> dict[str, int]:
    """Measured bytes of one index list coded four ways (lesson 08's index table)."""
    idx = np.asarray(idx, dtype=np.int64)
    return {"int32 indices": 4 * idx.size,
            "delta + varint": len(encode_indices(idx, "none")),
            "delta + varint + deflate": len(encode_indices(idx, "deflate")),
            "delta + varint + lzma": len(encode_indices(idx, "lzma"))}


# ------------------------------------------------------------------ compressors

def _vector(x: torch.Tensor) -> np.ndarray:
    if not isinstance(x, (torch.Tensor, np.ndarray)):
        raise TypeError(f"compressors encode a gradient as a float tensor (or numpy array), "
                        f"got {type(x).__name__}")
    x = torch.as_tensor(x)
    if not x.is_floating_point():
        raise TypeError(f"compressors encode float gradients, got dtype {x.dtype}")
    v = x.detach().to("cpu", torch.float32).reshape(-1).numpy()
    bad = np.flatnonzero(~np.isfinite(v))
    if bad.size:
        raise ValueError(f"the vector has {bad.size} non-finite entries (NaN or ±inf as "
                         f"float32), the first at index {bad[0]}: training has diverged "
                         "(a smaller learning rate?); a compressor would hide it")
    return v


def _check_size(data: bytes, numel: int, want: int, what: str) -> None:
    if len(data) != want:
        raise ValueError(f"{what} message of {len(data)} bytes cannot hold {numel} entries "
                         f"(expected {want} bytes): was it encoded by another compressor?")


class Compressor:
    """Encode a float vector to bytes and decode it back (lesson 08)."""

    name = "compressor"

    def encode(self, x: torch.Tensor) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        raise NotImplementedError

    def roundtrip(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(decoded, bytes) of one encoding of x."""
        data = self.encode(x)
        return self.decode(data, int(np.prod(x.shape))).reshape(x.shape), len(data)

    def __repr__(self) -> str:
        return f"<{self.name}>"


class FP32(Compressor):
    """No compression: 4 bytes per entry (Do's lecture's "None (32-bit floating point)")."""

    name = "fp32"

    def encode(self, x: torch.Tensor) -> bytes:
        return _vector(x).tobytes()

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        _check_size(data, numel, 4 * numel, "an fp32")
        return torch.from_numpy(np.frombuffer(data, dtype=np.float32).copy())


class FP16(Compressor):
    """16-bit floats: 2 bytes per entry, half the size (the second row of Do's lecture's table)."""

    name = "fp16"

    def encode(self, x: torch.Tensor) -> bytes:
        top = np.finfo(np.float16).max                    # saturate, never overflow to inf
        return _vector(x).clip(-top, top).astype(np.float16).tobytes()

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        _check_size(data, numel, 2 * numel, "an fp16")
        return torch.from_numpy(np.frombuffer(data, dtype=np.float16).astype(np.float32))


def _buckets(numel: int, bucket: int) -> int:
    return max(1, math.ceil(numel / bucket))


def _positive_int(name: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


class OneBit(Compressor):
    """1-bit SGD: one sign bit per entry and one float32 scale (mean |x|) per bucket.

    Decodes entry i to ±scale of its bucket, about 32× smaller than fp32. Biased: use
    ``ErrorFeedback(OneBit())`` to keep what the signs lose.
    """

    def __init__(self, bucket: int = 1024):
        self.bucket = _positive_int("bucket", bucket)
        self.name = "1-bit"

    def encode(self, x: torch.Tensor) -> bytes:
        v = _vector(x)
        nb = _buckets(v.size, self.bucket)
        pad = np.zeros(nb * self.bucket, dtype=np.float32)
        pad[:v.size] = np.abs(v)
        counts = np.minimum(self.bucket, v.size - self.bucket * np.arange(nb)).clip(min=1)
        scales = (pad.reshape(nb, self.bucket).sum(axis=1) / counts).astype(np.float32)
        return scales.tobytes() + np.packbits(v >= 0).tobytes()

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        nb = _buckets(numel, self.bucket)
        _check_size(data, numel, 4 * nb + math.ceil(numel / 8), "a 1-bit")
        scales = np.frombuffer(data[:4 * nb], dtype=np.float32)
        bits = np.unpackbits(np.frombuffer(data[4 * nb:], dtype=np.uint8))[:numel]
        signs = bits.astype(np.float32) * 2 - 1
        return torch.from_numpy(signs * np.repeat(scales, self.bucket)[:numel])


def qsgd_levels(v: np.ndarray, norm: float | np.ndarray, s: int, u: np.ndarray) -> np.ndarray:
    """QSGD's unbiased stochastic rounding to signed levels in −s..s (buckets broadcast).

    r = |v|/‖v‖₂·s lies between the levels ⌊r⌋ and ⌊r⌋+1; round up with probability
    r − ⌊r⌋ (up when u < r − ⌊r⌋, u uniform in [0, 1)), so E[level]·‖v‖/s = v exactly.
    A zero norm gives zero levels.
    """
    norm = np.asarray(norm, dtype=np.float64)
    r = np.divide(np.abs(v), norm, out=np.zeros(np.broadcast(v, norm).shape),
                  where=norm > 0) * s
    low = np.floor(r)
    level = low + (u < (r - low))
    return (np.sign(v) * np.minimum(level, s)).astype(np.int8)


class QSGD(Compressor):
    """QSGD with ``s`` levels: per bucket one float32 norm and a level in −s..s per entry,
    the levels entropy-coded. Unbiased: E[decode(encode(x))] = x.
    """

    def __init__(self, s: int = 4, bucket: int = 512, seed: int = 0, coder: str = "deflate"):
        self.s = _positive_int("s (the number of levels)", s)
        if self.s > 127:
            raise ValueError(f"s must be at most 127 (levels travel as int8), got {s}")
        self.bucket = _positive_int("bucket", bucket)
        if coder not in CODERS:
            raise ValueError(f"unknown coder {coder!r}: use one of {CODERS}")
        self.coder = coder
        self.rng = np.random.default_rng(seed)
        self.name = f"QSGD s={self.s}"

    def encode(self, x: torch.Tensor) -> bytes:
        v = _vector(x)
        nb = _buckets(v.size, self.bucket)
        pad = np.zeros(nb * self.bucket, dtype=np.float32)
        pad[:v.size] = v
        pad = pad.reshape(nb, self.bucket)
        norms = np.linalg.norm(pad.astype(np.float64), axis=1).astype(np.float32)  # x² > 3e38
        u = self.rng.random(pad.shape)
        levels = qsgd_levels(pad, norms[:, None], self.s, u).ravel()[:v.size]
        return norms.tobytes() + _entropy_code(levels.tobytes(), self.coder)

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        nb = _buckets(numel, self.bucket)
        norms = np.frombuffer(data[:4 * nb], dtype=np.float32)
        levels = np.frombuffer(_entropy_decode(data[4 * nb:]), dtype=np.int8)
        if levels.size != numel:
            raise ValueError(f"QSGD message holds {levels.size} levels, expected {numel}")
        scale = np.repeat(norms / self.s, self.bucket)[:numel]
        return torch.from_numpy((levels * scale).astype(np.float32))


class Threshold(Compressor):
    """Strom's threshold: entries with |x| ≥ τ travel as one sign bit and an index and
    decode to ±τ; all others decode to 0. Wrap it in ``ErrorFeedback`` to keep the rest
    as a residual, as Strom does.

    Message: varint(count) · packed sign bits · coded indices.
    """

    def __init__(self, tau: float, coder: str = "deflate"):
        if not isinstance(tau, (int, float)) or not tau > 0 or not math.isfinite(tau):
            raise ValueError(f"τ must be a positive number, got {tau!r}: entries beyond ±τ "
                             "are sent, so τ ≤ 0 would send everything")
        if coder not in CODERS:
            raise ValueError(f"unknown coder {coder!r}: use one of {CODERS}")
        self.tau, self.coder = float(tau), coder
        self.name = f"threshold τ={self.tau:.3g}"

    def encode(self, x: torch.Tensor) -> bytes:
        v = _vector(x)
        idx = np.flatnonzero(np.abs(v) >= self.tau)
        return (varint_encode([idx.size]) + np.packbits(v[idx] >= 0).tobytes()
                + encode_indices(idx, self.coder))

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        count, head = _read_count(data)
        nsign = math.ceil(count / 8)
        bits = np.unpackbits(np.frombuffer(data[head:head + nsign], dtype=np.uint8))[:count]
        idx = decode_indices(data[head + nsign:])
        if idx.size != count or (count and idx[-1] >= numel):
            raise ValueError("corrupt threshold message: the indices do not match the count")
        out = np.zeros(numel, dtype=np.float32)
        out[idx] = (bits.astype(np.float32) * 2 - 1) * self.tau
        return torch.from_numpy(out)


def _read_count(data: bytes) -> tuple[int, int]:
    """The leading varint of a message and the number of bytes it took."""
    end = next((i for i, b in enumerate(data[:10]) if b < 0x80), None)
    if end is None:
        raise ValueError("message does not start with a count")
    return int(varint_decode(data[:end + 1])[0]), end + 1


class TopK(Compressor):
    """The ``ratio``·d entries largest in magnitude, sent as coded indices and float32
    values (Deep Gradient Compression sends 0.1 % and keeps the rest in a residual)."""

    def __init__(self, ratio: float = 0.01, coder: str = "deflate"):
        if not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1] (the fraction of entries sent), "
                             f"got {ratio!r}")
        if coder not in CODERS:
            raise ValueError(f"unknown coder {coder!r}: use one of {CODERS}")
        self.ratio, self.coder = float(ratio), coder
        self.name = f"top-k {100 * self.ratio:.2g}%"

    def k(self, numel: int) -> int:
        return min(numel, max(1, math.ceil(self.ratio * numel)))

    def encode(self, x: torch.Tensor) -> bytes:
        v = _vector(x)
        k = self.k(v.size)
        idx = np.sort(np.argpartition(-np.abs(v), k - 1)[:k])
        return v[idx].astype(np.float32).tobytes() + encode_indices(idx, self.coder)

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        k = self.k(numel)
        vals = np.frombuffer(data[:4 * k], dtype=np.float32)
        idx = decode_indices(data[4 * k:])
        if idx.size != k:
            raise ValueError(f"top-k message holds {idx.size} indices, expected {k}")
        out = np.zeros(numel, dtype=np.float32)
        out[idx] = vals
        return torch.from_numpy(out)


class ErrorFeedback(Compressor):
    """Error feedback around any compressor: encode g + residual, keep what was lost.

        v = g + r;  data = C(v);  r ← v − decode(data)

    The sum of everything decoded plus the residual equals the sum of all gradients:
    the compression delays information instead of dropping it.
    """

    def __init__(self, inner: Compressor):
        if not isinstance(inner, Compressor):
            raise TypeError(f"ErrorFeedback wraps a Compressor, got {type(inner).__name__}")
        self.inner = inner
        self.residual: torch.Tensor | None = None
        self.name = inner.name + " + EF"

    def encode(self, x: torch.Tensor) -> bytes:
        g = torch.as_tensor(x).detach().to("cpu", torch.float32).reshape(-1)
        if self.residual is None:
            self.residual = torch.zeros_like(g)
        elif self.residual.numel() != g.numel():
            raise ValueError(f"this ErrorFeedback holds a residual of {self.residual.numel()} "
                             f"entries, got a vector of {g.numel()}: use one per vector")
        v = g + self.residual
        data = self.inner.encode(v)
        self.residual = v - self.inner.decode(data, v.numel())
        return data

    def decode(self, data: bytes, numel: int) -> torch.Tensor:
        return self.inner.decode(data, numel)

    @property
    def residual_norm(self) -> float:
        return 0.0 if self.residual is None else float(self.residual.norm())


# ---------------------------------------------------------------- schemes by name

SCHEMES: dict[str, tuple[type, str | None, float | None]] = {
    # name: (class, its parameter's name, default value)
    "fp32": (FP32, None, None),
    "fp16": (FP16, None, None),
    "1-bit": (OneBit, None, None),
    "qsgd": (QSGD, "s", 4),
    "threshold": (Threshold, "tau", 0.1),
    "top-k": (TopK, "ratio", 0.003),
}


@dataclass(frozen=True)
class Scheme:
    """A compressor by name, its parameter (τ, k ratio or s) and error feedback on/off;
    picklable, so it travels to the workers, which ``build()`` their own compressor."""

    name: str
    param: float | None = None
    ef: bool = False

    def __post_init__(self) -> None:
        if self.name not in SCHEMES:
            raise ValueError(f"unknown compressor {self.name!r}: use one of {list(SCHEMES)}")
        if self.param is not None and SCHEMES[self.name][1] is None:
            raise ValueError(f"{self.name} takes no parameter, got {self.param!r}")

    def build(self, seed: int = 0) -> Compressor:
        cls, pname, default = SCHEMES[self.name]
        kwargs: dict[str, Any] = {}
        if pname is not None:
            value = default if self.param is None else self.param
            kwargs[pname] = int(value) if pname == "s" else float(value)
        if cls is QSGD:
            kwargs["seed"] = seed
        comp = cls(**kwargs)
        return ErrorFeedback(comp) if self.ef else comp

    @property
    def label(self) -> str:
        return self.build().name


# ------------------------------------------------------------ the exercises' math
# Exercise 08's first two tasks, hence the private names; lesson 08 prints the first.

def _strom_step(grad: torch.Tensor, residual: torch.Tensor, tau: float
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One step of Strom's encoder with its residual (lesson 08, exercise 1).

    v = residual + grad; send the indices where |v| ≥ τ with their signs (+1/−1);
    each sent entry decodes to ±τ, so the new residual is v − τ·sign there, v elsewhere.
    Returns (indices int64 sorted, signs int8, new residual).
    """
    v = residual + grad
    idx = torch.nonzero(v.abs() >= tau).flatten()
    signs = torch.where(v[idx] >= 0, 1, -1).to(torch.int8)
    new = v.clone()
    new[idx] -= tau * signs.to(v.dtype)
    return idx, signs, new


def _ef_onebit_step(grad: torch.Tensor, residual: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """1-bit SGD with error feedback on one vector (lesson 08, exercise 2).

    v = grad + residual; q = mean|v| · sign(v) (sign(0) = +1); returns (q, v − q).
    """
    v = grad + residual
    q = v.abs().mean() * torch.where(v >= 0, 1.0, -1.0).to(v.dtype)
    return q, v - q


# ---------------------------------------------------------------- one gradient

def compare_on(grad: torch.Tensor, compressors: list[Compressor]) -> list[dict[str, Any]]:
    """Encode one gradient with each compressor: measured bytes, ratio, relative error."""
    g = torch.as_tensor(grad).reshape(-1).float()
    base = 4 * g.numel()
    rows = []
    for c in compressors:
        out, size = c.roundtrip(g)
        rows.append({"compressor": c.name, "bytes": size, "ratio": base / size,
                     "rel. error": float((out - g).norm() / g.norm().clamp_min(1e-30)),
                     "decoded": out})
    return rows
