"""Checks for lesson 12 (transformers across ranks): one rank's ring attention forward and the
vocabulary-parallel cross-entropy, both on real workers, every rank's answer compared with one
process in float64 and every message a rank hands its group watched by the wiretap (a message
off the ring, or a collective that gathers what no rank may hold, is refused as it is made); then tasks 3 and 4: the bytes a rank sends in one step and the
activations it keeps for a drawn TP × SP × CP configuration (reasoning), and a choice of the
three degrees under a per-rank memory budget (design).

The accounting of tasks 3–4 (``_costs``, private: it answers task 3 as it stands) is the
lesson's formulas put together: tensor parallelism of t ranks in its sequence-parallel form
of the paper's shape (``tensor.tp_bytes``, ``sequence.activation_bytes`` with ``regather``),
on the s/c tokens a rank of a context-parallel group of c holds; the ring's K/V blocks of the
rank's a/t heads, forward and backward (``ring.ring_bytes``); and the allreduce of the rank's
gradients over the c ranks of a ring, which hold the same weights. One configuration of each
task runs on real workers (``tensor.tp_step``); those have c = 1, since context parallelism
runs here as ring attention alone, not inside a whole model: c > 1 is judged by the
accounting."""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np
import torch

from ddl_lab.runtime.costs import sent_bytes

from . import _answers as answers
from ._core import CheckFailed, fail, judge, on_workers, passed, task
from ._diagnose import Case, apart, describe_value, differs, explain, returned_none, same
from ._trial import Trial

__all__ = ["ring_attention", "vocab_cross_entropy", "transformer_bytes", "parallel_plan"]

_PKG = "ddl_lab.transformers"
GUARD = "[wiretap]"
SMALL = 64                  # bytes a collective may carry: the slices' lengths, not K or V


def _refused(kind: str, rank: int, said: str) -> ValueError:
    return ValueError(f"{GUARD}{kind}|{rank}|{said}")


def _guard_text(text: str) -> tuple[str, int, str] | None:
    """(kind, rank, sentence) of a message the wiretap refused on a worker, if it did."""
    if GUARD not in text:
        return None
    kind, rank, said = text[text.index(GUARD) + len(GUARD):].split("|", 2)
    return kind, int(rank), said.splitlines()[0]


def _result(value: Any) -> Any:
    """A worker's returned value, as plain data the parent can judge."""
    import torch
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.double() if value.dtype == torch.bfloat16 else value).numpy().copy()
    return value if isinstance(value, (int, float, np.ndarray, np.generic)) else \
        describe_value(value)


# ------------------------------------------------------------- task 1: ring attention

def _draw_ring(rng: np.random.Generator) -> dict[str, Any]:
    n = int(rng.integers(2, 5))
    return {"n": n, "s": int(rng.integers(n, 4 * n + 3)), "b": int(rng.integers(1, 3)),
            "a": int(rng.integers(1, 4)), "d": int(rng.integers(2, 6)),
            "causal": bool(rng.random() < 0.6), "dtype": str(rng.choice(["float32", "float64"]))}


RING_FIXED = [
    {"n": 2, "s": 6, "b": 1, "a": 2, "d": 4, "causal": False, "dtype": "float64"},
    {"n": 3, "s": 9, "b": 2, "a": 1, "d": 3, "causal": True, "dtype": "float64"},
    {"n": 4, "s": 10, "b": 1, "a": 3, "d": 2, "causal": True, "dtype": "float32"},  # uneven
    {"n": 3, "s": 7, "b": 1, "a": 2, "d": 5, "causal": False, "dtype": "float32"},
]


def _ring_spec(case: Case) -> dict[str, Any]:
    p, rng = case.params, case.rng
    shape = (p["b"], p["a"], p["s"], p["d"])
    q, k, v = ((rng.normal(size=shape) * 1.5).astype(p["dtype"]) for _ in range(3))
    return dict(p, p=p["n"], q=q, k=k, v=v)


def _slices(x: np.ndarray, n: int) -> list[np.ndarray]:
    return np.array_split(x, n, axis=2)          # torch.tensor_split's slices


def _ring_body(fn: Callable, spec: dict) -> dict:
    """Worker: the learner's ring attention on this rank's slices, its group wiretapped: a
    message to or from anyone but the ring's neighbours, or a collective that moves more
    than the slices' lengths, raises at once."""
    import torch
    import torch.distributed as dist

    from ddl_lab.runtime.wiretap import Wiretap
    rank, n = dist.get_rank(), dist.get_world_size()
    nxt, prev = (rank + 1) % n, (rank - 1) % n

    def watch(op: Any, args: tuple) -> None:
        if op.op == "send" and op.dst != nxt:
            raise _refused("send", rank, f"rank {rank} sent {op.nbytes} bytes to rank {op.dst}, "
                           f"not to the next rank (r + 1) mod n = {nxt}")
        if op.op == "recv" and op.src != prev:
            who = "any rank" if op.src is None else f"rank {op.src}"
            raise _refused("recv", rank, f"rank {rank} received from {who}, not from the "
                           f"previous rank (r − 1) mod n = {prev}")
        if op.op not in ("send", "recv", "barrier") and op.nbytes > SMALL:
            raise _refused("gather", rank, f"rank {rank} called dist.{op.call or op.op} on "
                           f"{op.nbytes} bytes")

    q, k, v = (torch.from_numpy(_slices(spec[x], n)[rank].copy()) for x in "qkv")
    with Wiretap(on_op=watch) as tap:
        out = fn(q, k, v, spec["causal"])
    return {"out": _result(out), "sent": sum(op.nbytes for op in tap.ops
                                             if op.op == "send" and not op.refused)}


def _attend(q: np.ndarray, qpos: np.ndarray, blocks: list[tuple], causal: bool,
            how: str = "exact") -> np.ndarray:
    """Float64 attention of queries at ``qpos`` against K/V ``blocks`` [(k, v, kpos)] taken in
    order: ``exact`` the softmax over all of them; the named mistakes ``stale`` (the running
    max raised without rescaling what was kept), ``summed`` / ``averaged`` (each block's own
    softmax, the outputs added or averaged)."""
    q = q.astype(np.float64)
    d = q.shape[-1]
    scores = []
    for k, v, kpos in blocks:
        sc = q @ np.swapaxes(k.astype(np.float64), -1, -2) / np.sqrt(d)
        if causal:
            sc = np.where(kpos[None, :] > qpos[:, None], -np.inf, sc)
        scores.append((sc, v.astype(np.float64)))
    with np.errstate(all="ignore"):
        if how == "exact":
            sc = np.concatenate([s for s, _ in scores], -1)
            w = np.exp(sc - sc.max(-1, keepdims=True))
            return (w / w.sum(-1, keepdims=True)) @ np.concatenate([v for _, v in scores], -2)
        if how == "stale":
            m = np.full(q.shape[:-1], -np.inf)
            z, o = np.zeros(q.shape[:-1]), np.zeros(q.shape)
            for sc, v in scores:
                m = np.maximum(m, sc.max(-1))
                w = np.exp(sc - m[..., None])
                z, o = z + w.sum(-1), o + w @ v
            return o / z[..., None]
        total = np.zeros(q.shape)
        for sc, v in scores:
            w = np.exp(sc - sc.max(-1, keepdims=True))
            total += np.nan_to_num((w / w.sum(-1, keepdims=True)) @ v)
        return total / (len(scores) if how == "averaged" else 1)


def _ring_mistakes(spec: dict, r: int) -> dict[str, np.ndarray]:
    """What rank ``r`` returns under each named mistake."""
    n, causal, s = spec["n"], spec["causal"], spec["s"]
    ks, vs, qr = _slices(spec["k"], n), _slices(spec["v"], n), _slices(spec["q"], n)[r]
    sizes = [x.shape[2] for x in ks]
    first = np.cumsum([0] + sizes)
    pos = [np.arange(first[j], first[j + 1]) for j in range(n)]
    owners = [(r - t) % n for t in range(n)]

    def blocks(order: list[int], where: Callable[[int, int], np.ndarray] = lambda t, j: pos[j]):
        return [(ks[j], vs[j], where(t, j)) for t, j in enumerate(order)]
    right = blocks(owners)
    named = {
        "a per-block softmax without rescaling: when the running max rises from m to m′, the "
        "sum and the output kept so far must be multiplied by exp(m − m′) before the new "
        "block's terms are added": _attend(qr, pos[r], right, causal, "stale"),
        "a per-block softmax: each block's softmax(q kᵀ/√d) v was added up, but the blocks' "
        "softmaxes have different denominators — keep a running max and sum and rescale "
        "(online softmax), dividing by the total sum once at the end":
            _attend(qr, pos[r], right, causal, "summed"),
        "a per-block softmax, the blocks' outputs averaged: the blocks' softmaxes have "
        "different denominators — keep a running max and sum and rescale (online softmax)":
            _attend(qr, pos[r], right, causal, "averaged"),
    }
    if causal:
        named["the causal mask on local positions: each block's keys were compared with the "
              "queries by their index within the slice, but a query at global position i sees "
              "the keys at global positions ≤ i — add each slice's first position (the sum of "
              "the lengths before it)"] = _attend(
            qr, np.arange(sizes[r]), blocks(owners, lambda t, j: np.arange(sizes[j])), causal)
        named["the blocks' owners counted the wrong way round: after t hops a rank holds the "
              "block of rank (r − t) mod n (it came from the previous rank), not (r + t) mod n"
              ] = _attend(qr, pos[r], blocks(owners, lambda t, j: pos[(r + t) % n]), causal)
        if len(set(sizes)) > 1:
            named[f"every slice assumed {sizes[r]} long: with s = {s} on {n} ranks the first "
                  f"{s % n} slices are one position longer, so a block's first position is the "
                  "sum of the lengths before it"] = _attend(
                qr, sizes[r] * r + np.arange(sizes[r]),
                blocks(owners, lambda t, j: sizes[r] * j + np.arange(sizes[j])), causal)
        named["no causal mask: with causal=True a query at position i sees only the keys at "
              "positions ≤ i"] = _attend(qr, pos[r], right, False)
    stuck = [r] + [(r - 1) % n] * (n - 1)           # what a rank holds if none is passed on
    named["K/V not forwarded: every rank passed on its own block at every hop, so it kept "
          "receiving the previous rank's block — pass on the block you just received"] = \
        lambda got: any(same(_attend(qr, pos[r], blocks(stuck, where), causal), got) for where
                        in (lambda t, j: pos[j], lambda t, j: pos[owners[t]]))
    named["only this rank's own block was attended: the K/V blocks must travel round the ring, "
          "n − 1 hops, each merged as it arrives"] = _attend(qr, pos[r], blocks([r]), causal)
    for j in owners:
        named[f"a block kept twice: rank {j}'s K/V block was merged two times (a block merged "
              "again after the last hop, or both before and after it was passed on) — merge "
              "each of the n blocks exactly once"] = _attend(qr, pos[r], blocks(owners + [j]),
                                                            causal)
    return named


def _ring_fault(got: list[dict], spec: dict, name: str) -> str | None:
    n = spec["n"]
    qs = _slices(spec["q"], n)
    sizes = [x.shape[2] for x in qs]
    first = np.cumsum([0] + sizes)
    whole = [(spec["k"], spec["v"], np.arange(spec["s"]))]
    for r, g in enumerate(got):
        want = _attend(qs[r], np.arange(first[r], first[r + 1]), whole, spec["causal"])
        out = g["out"]
        if isinstance(out, str) or out is None:
            return (f"{name} returned {out if out else 'None'} on rank {r}; return this rank's "
                    f"slice of the output, a tensor of shape {tuple(want.shape)}.")
        if (diff := differs(want, out)) is None:
            continue
        hint = explain(out, _ring_mistakes(spec, r), right=want)
        return (f"rank {r} of {n}: {diff}" + (f" — {hint}." if hint else
                ". Expected softmax(q kᵀ/√d) v of this rank's queries against the whole "
                "sequence's keys, merged block by block by the online-softmax rule."))
    return None


def _ring_failure(text: str, spec: dict, name: str) -> str | None:
    if (seen := _guard_text(text)) is None:
        n, s = spec["n"], spec["s"]
        if s % n and any(w in text for w in ("Connection closed", "died", "size doesn't match")):
            return (f"a block arrived into a receive buffer of another length: with s = {s} on "
                    f"{n} ranks the first {s % n} slices are one position longer, so size each "
                    "receive by the length of the block it gets (after t hops, rank (r − t − 1) "
                    "mod n's) — or a block was passed on other than the one just received")
        return None
    kind, r, said = seen
    if kind == "gather":
        return (f"{said}: that collective gathers K or V (or the output) — a rank may use a "
                "collective only for the slices' lengths; the K/V blocks must travel round "
                "the ring, one hop at a time, from r to (r + 1) mod n")
    return (f"a message off the ring — {said}: each rank sends to the next rank, (r + 1) mod "
            "n, and receives from the previous one, (r − 1) mod n (the wrong neighbour, or "
            "the ring run both ways at once)")


def _bytes_fault(got: list[dict], spec: dict, name: str) -> str | None:
    """Every rank must have sent on the blocks: (n − 1) hops of K and V."""
    n, b, a, d = spec["n"], spec["b"], spec["a"], spec["d"]
    sizes = [x.shape[2] for x in _slices(spec["q"], n)]
    item = np.dtype(spec["dtype"]).itemsize
    for r, g in enumerate(got):
        need = 2 * b * a * d * item * (spec["s"] - sizes[(r + 1) % n])
        if g["sent"] < need:
            return (f"rank {r} sent {g['sent']:,} bytes, but passing the K/V blocks round "
                    f"the ring takes {need:,} (K and V of every block but the next rank's "
                    "own): the output is right, yet the blocks did not travel the ring")
    return None


def _run(trial: Trial, body: Callable, specs: list[dict], failure: Callable,
         *faults: Callable) -> None:
    """Every case of ``trial`` on its world, up to the first that goes wrong, named."""
    name = trial.name
    for spec, case in zip(specs, trial):              # one world at a time: a crash in a
        try:                                            # later case waits its turn
            o = trial.run(body, [(spec["p"], (trial.fn, spec))])[0]
        except CheckFailed as e:                        # the workers died: named if it can be
            named = failure(str(e), spec, name)
            fail(f"{named} ({e}) [{case}]" if named else f"{e} [{case}]")
        f = o.failure
        if f is not None:
            if f.kind == "stub":
                fail(f.line)
            named, head = failure(f"{f.text}\n{f.line}", spec, name), f.message(name, spec["p"])
            fail(f"{named} ({head}) [{case}]" if named else f"{head} [{case}]")
        for fault in faults:
            if message := fault(o.results, spec, name):
                fail(f"{message} [{case}]")


@task("transformers", refuses=(_PKG, "ring_attention", "_ring_attention", "_ring_forward",
                               "ulysses_attention"))
def ring_attention(my_ring_attention: Callable, seed: int = 0, timeout: float = 20.0) -> None:
    """Lesson 12, task 1: ``my_ring_attention(q, k, v, causal)`` — this rank's contiguous
    slice (b, a, s_r, d) of q, k, v, as ``torch.tensor_split`` cuts the sequence — returns
    this rank's slice of softmax(q kᵀ/√d [+ causal mask]) v over the whole sequence, the K/V
    blocks passed round the ring (to r + 1, from r − 1) and merged by the online-softmax
    rule. Judged against full attention in float64 on 2–4 ranks, lengths not divisible by n
    among them, causal and not; every message watched."""
    trial = Trial("ring_attention", my_ring_attention, seed, RING_FIXED, draws=3,
                  draw=_draw_ring, timeout=timeout)
    _run(trial, _ring_body, [_ring_spec(c) for c in trial], _ring_failure, _ring_fault,
         _bytes_fault)
    passed("ring_attention", f"{len(trial)} cases (2–4 ranks, lengths not divisible by n, "
           "1–3 heads, causal and not, float32 and float64): every rank's slice equals full "
           "attention, the K/V blocks went round the ring, each hop to the next rank")


# ------------------------------------------------------------- task 2: vocabulary-parallel CE

def _draw_vocab(rng: np.random.Generator) -> dict[str, Any]:
    n = int(rng.integers(2, 5))
    return {"n": n, "N": int(rng.integers(2, 13)), "V": int(rng.integers(2 * n, 8 * n + 3)),
            "scale": float(rng.choice([3.0, 50.0])), "offset": float(rng.choice([0.0, 1e3])),
            "dtype": str(rng.choice(["float32", "float64"]))}


VOCAB_FIXED = [
    {"n": 2, "N": 6, "V": 10, "scale": 3.0, "offset": 0.0, "dtype": "float64"},
    {"n": 3, "N": 5, "V": 11, "scale": 8.0, "offset": 0.0, "dtype": "float32"},     # uneven
    {"n": 4, "N": 8, "V": 17, "scale": 40.0, "offset": 1e3, "dtype": "float32"},    # overflow
]


def _vocab_spec(case: Case) -> dict[str, Any]:
    p, rng = case.params, case.rng
    logits = (p["offset"] + p["scale"] * rng.normal(size=(p["N"], p["V"]))).astype(p["dtype"])
    return dict(p, p=p["n"], logits=logits,
                targets=rng.integers(0, p["V"], size=p["N"]).astype(np.int64))


def _ranges(V: int, n: int) -> list[tuple[int, int]]:
    from ddl_lab.transformers.vocab import vocab_range
    return [vocab_range(V, r, n) for r in range(n)]


def _vocab_body(fn: Callable, spec: dict) -> dict:
    """Worker: the learner's loss from this rank's slice of the logits, its group wiretapped:
    a message or collective as large as the slice (the logits leaving their rank) raises."""
    import torch
    import torch.distributed as dist

    from ddl_lab.runtime.wiretap import Wiretap
    rank, n = dist.get_rank(), dist.get_world_size()
    lo, hi = _ranges(spec["V"], n)[rank]
    logits = torch.from_numpy(spec["logits"][:, lo:hi].copy())
    before, whole = logits.clone(), logits.numel() * logits.element_size()

    def watch(op: Any, args: tuple) -> None:
        if op.op != "barrier" and op.nbytes >= whole:
            raise _refused("gather", rank, f"rank {rank} called dist.{op.call or op.op} on "
                           f"{op.nbytes} bytes, as much as its whole slice of the logits "
                           f"({tuple(logits.shape)})")

    with Wiretap(on_op=watch):
        loss = fn(logits, torch.from_numpy(spec["targets"].copy()), lo)
    return {"loss": _result(loss), "changed": not torch.equal(before, logits)}


def _vocab_mistakes(spec: dict, r: int) -> dict[str, Any]:
    """What rank ``r`` returns under each named mistake, in float64."""
    z, t, n = spec["logits"].astype(np.float64), spec["targets"], spec["n"]
    cuts = _ranges(spec["V"], n)
    rows = np.arange(len(t))
    top = z.max(1)
    picked = z[rows, t]
    with np.errstate(all="ignore"):
        lo, hi = cuts[r]
        mine = z[:, lo:hi].max(1)
        everywhere = sum(z[:, a:b][rows, np.clip(t - a, 0, b - a - 1)] for a, b in cuts)
        lse = top + np.log(np.exp(z - top[:, None]).sum(1))
        return {
            "a local max: each rank subtracted its own slice's max, so the ranks' sums of "
            "e^(z − max) are on different scales and cannot be added — all_reduce the max "
            "(ReduceOp.MAX) first, then subtract that global max everywhere":
                lambda got: any(same(np.mean(mine + np.log(x) - picked), got) for x in (
                    sum(np.exp(z[:, a:b] - z[:, a:b].max(1)[:, None]).sum(1) for a, b in cuts),
                    np.exp(z - mine[:, None]).sum(1))),
            "a local sum: the sum of exponentials covers only this rank's slice of the "
            "vocabulary — all_reduce it (after subtracting the global max) so that the "
            "softmax's denominator spans every id":
                np.mean(top + np.log(np.exp(z[:, lo:hi] - top[:, None]).sum(1)) - picked),
            f"the target looked up on every rank: each of the {n} ranks contributed a logit "
            "for every row (its own id clamped into its slice, or the target's logit counted "
            f"{n} times) — only the rank whose slice holds the target may contribute; the "
            "others add 0": lambda got: any(same(np.mean(lse - x), got)
                                            for x in (everywhere, n * picked)),
            "the sum of the rows' losses: F.cross_entropy returns their mean — divide by the "
            "number of rows": np.sum(lse - picked),
        }


def _vocab_fault(got: list[dict], spec: dict, name: str) -> str | None:
    import torch
    import torch.nn.functional as F
    z = torch.from_numpy(spec["logits"].astype(np.float64))
    want = float(F.cross_entropy(z, torch.from_numpy(spec["targets"])))
    for r, g in enumerate(got):
        loss = g["loss"]
        if g["changed"]:
            return (f"{name} changed its logits in place on rank {r} (`logits -= …`, "
                    "`logits.exp_()`): the caller's logits must stay as they were")
        if isinstance(loss, str) or np.size(loss) != 1:
            shown = loss if isinstance(loss, str) else describe_value(loss)
            return (f"{name} returned {shown} on rank {r}; return the mean cross-entropy, one "
                    "number (a 0-d tensor or a float), the same on every rank.")
        value = float(np.asarray(loss, dtype=np.float64).reshape(()))
        if not np.isfinite(value):
            return (f"rank {r} returned {value}: e^z overflowed — with logits up to "
                    f"{np.abs(spec['logits']).max():.4g}, exponentials must be taken of z − "
                    "max, the max over the whole vocabulary (an all_reduce with ReduceOp.MAX), "
                    "so that every term is at most 1")
        if same(want, loss):
            continue
        hint = explain(value, _vocab_mistakes(spec, r), right=want)
        mine, expected = apart(value, want)
        return (f"rank {r} of {spec['n']} returned {mine}, expected {expected}"
                + (f" — {hint}." if hint else ": the mean over rows of log Σ_v e^(z_v) − "
                   "z_target, over the whole vocabulary."))
    return None


def _vocab_failure(text: str, spec: dict, name: str) -> str | None:
    if (seen := _guard_text(text)) is None:
        return None
    return (f"{seen[2]}: the logits left their rank — no rank may hold the full logits; "
            "only a few numbers per row may cross the wire (its max, its sum of "
            "exponentials, the target's logit)")


@task("transformers", refuses=(_PKG, "vocab_parallel_cross_entropy",
                               "_vocab_parallel_cross_entropy"))
def vocab_cross_entropy(my_vocab_ce: Callable, seed: int = 0, timeout: float = 20.0) -> None:
    """Lesson 12, task 2: ``my_vocab_ce(logits, targets, start)`` — this rank's slice (N, V_r)
    of the logits, the vocabulary ids start … start + V_r − 1, and the targets (N,) — returns
    on every rank the mean cross-entropy F.cross_entropy gives on the full logits, which no
    rank may gather. Judged in float64 on 2–4 ranks, uneven slices, logits large enough that
    e^z overflows unless the global max is subtracted."""
    trial = Trial("vocab_cross_entropy", my_vocab_ce, seed, VOCAB_FIXED, draws=3,
                  draw=_draw_vocab, timeout=timeout)
    _run(trial, _vocab_body, [_vocab_spec(c) for c in trial], _vocab_failure, _vocab_fault)
    passed("vocab_cross_entropy", f"{len(trial)} cases (2–4 ranks, uneven vocabulary slices, "
           "logits up to ~1,000 where e^z overflows, float32 and float64): every rank's loss "
           "equals F.cross_entropy on the full logits, and no rank gathered them")


# ------------------------------------------------------------------ tasks 3 and 4

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
_ARGS = ("vocab", "s", "b", "h", "a", "L", "dtype", "tp", "sp", "cp")


def rank_params(vocab: int, s: int, h: int, L: int, t: int) -> int:
    """Parameters rank 0 of a TP group of t holds: its vocabulary rows (tied head), the
    position table, per block two LayerNorms, its rows of qkv and fc and columns of both
    projections (their biases whole), and ``ln_f``."""
    from ddl_lab.transformers.vocab import vocab_range
    start, end = vocab_range(vocab, 0, t)
    block = 4 * h + (3 * h * h + 3 * h) // t + h * h // t + h + (4 * h * h + 4 * h) // t \
        + 4 * h * h // t + h
    return (end - start) * h + s * h + L * block + 2 * h


def _costs(vocab: int, s: int, b: int, h: int, a: int, L: int, dtype: str, tp: int, sp: bool,
          cp: int, mistake: str = "") -> tuple[float, float]:
    """(bytes rank 0 sends in one forward and backward, activation bytes it keeps after the
    forward) by the lesson's accounting; ``mistake`` names a wrong accounting the checks
    recognise (see ``_MISTAKES``)."""
    from ddl_lab.ml.gpt import GPTConfig
    from ddl_lab.transformers.ring import ring_bytes
    from ddl_lab.transformers.sequence import activation_bytes
    from ddl_lab.transformers.tensor import tp_bytes
    dt = torch.float32 if mistake == "bf16 as 4" else DTYPES[dtype]
    e = torch.empty((), dtype=dt).element_size()
    cfg = GPTConfig(vocab=vocab, seq=s, hidden=h, heads=a, layers=L)
    local = s // cp
    tp_sent = tp_bytes(cfg, b, tp, dt, sp, regather=sp, s=local)
    if mistake == "no sp grads" and sp:
        tp_sent["backward"].pop("all_reduce")
    sent = sum(tp_sent["forward"].values())
    if mistake != "forward only":
        sent += sum(tp_sent["backward"].values())
        if sp and tp > 1 and mistake == "sp grads without positions":
            sent -= sent_bytes("all_reduce", tp, s * h * e)
    if cp > 1:
        ring = functools.partial(ring_bytes, s, cp, b, a // tp, h // a, e)
        sent += L * ring()[0]
        if mistake not in ("forward only", "kv once"):
            sent += L * ring(backward=True)[0]
        if mistake not in ("forward only", "no cp grads"):
            sent += sent_bytes("all_reduce", cp, rank_params(vocab, s, h, L, tp) * e)
    kept = activation_bytes(cfg, b, tp, dt, sp and mistake != "sp keeps all",
                            regather=sp and mistake not in ("sp keeps all", "sp norms only"),
                            s=s if mistake == "cp keeps all" else local)
    return float(sent), float(kept)


# What each named mistake's accounting says (its sent bytes, its activation bytes, or both).
_MISTAKES = {
    "forward only": "only the forward pass was counted: backward sends as much again "
                    "(the f operators' allreduces, the gathers and scatters reversed, the "
                    "ring's K/V again with their gradients)",
    "no sp grads": "sequence parallelism's extra allreduce in backward is missing: the "
                   "parameters applied to sequence shards (LayerNorms, the row-parallel "
                   "biases, the position table) see only this rank's tokens, so their "
                   "gradients are summed over the t ranks",
    "sp grads without positions": "sequence parallelism's gradient allreduce is mis-sized: "
                                  "the position table (s × h) is applied to sequence shards "
                                  "too, beside the LayerNorms and row-parallel biases",
    "bf16 as 4": "bf16 was counted as 4 bytes: it is 2 bytes an element (the cross-entropy's "
                 "numbers stay fp32)",
    "kv once": "the ring's K/V blocks were counted once: backward sends them round the ring "
               "again, with their gradients",
    "no cp grads": "the gradient allreduce of context parallelism is missing: the c ranks of "
                   "a ring hold the same weights, so their gradients are summed over them",
    "sp keeps all": "the activations were not divided by t under sequence parallelism: it "
                    "shards the LayerNorm and dropout regions along the sequence and keeps "
                    "only the shard of each column-parallel layer's input",
    "sp norms only": "only the LayerNorm regions were cut by t: sequence parallelism in the "
                     "paper's form keeps the shard of each column-parallel layer's input too "
                     "(gathered again in backward), so every activation is divided by t",
    "cp keeps all": "the activations were not divided by c: a context-parallel rank holds "
                    "s/c of the tokens",
}


def _call(name: str, p: dict) -> str:
    return f"{name}({', '.join(f'{k}={p[k]!r}' for k in _ARGS)})"


def _answer(got: Any, name: str, call: str, case: Case) -> tuple[float, float]:
    if not (isinstance(got, dict) and {"sent", "activations"} <= set(got)):
        fail(returned_none(got, name, 'a dict with "sent" and "activations"',
                           f'a dict {{"sent": bytes, "activations": bytes}} ({case}).', call))
    values = [answers.scalar(got[k]) for k in ("sent", "activations")]
    for key, v in zip(("sent", "activations"), values):
        if v is None or not math.isfinite(v):
            fail(f"{call} returned {key} = {got[key]!r:.60}: a number of bytes ({case}).")
    return values[0], values[1]


def _same(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=0.5)


def _judge_bytes(name: str, case: Case, sent: float, kept: float,
                 want: tuple[float, float], how: str) -> None:
    p, call = case.params, _call(name, case.params)
    for what, got, right, index in (("sent", sent, want[0], 0),
                                    ("activations", kept, want[1], 1)):
        if _same(got, right):
            continue
        hint = explain(got, [(msg, _costs(*(p[k] for k in _ARGS), mistake=m)[index])
                             for m, msg in _MISTAKES.items()], rtol=1e-6, right=right)
        shown, wanted = apart(got, right, ",")
        fail(f"{call} returned {what} = {shown} bytes, {how} {wanted} ({case})"
             + (f": {hint}." if hint else "."))


# ------------------------------------------------------------ task 3 (reasoning): bytes

# The configuration that runs on the workers: c = 1 (see the module's docstring).
REAL = {"vocab": 48, "s": 16, "b": 3, "h": 32, "a": 4, "L": 2, "dtype": "fp32", "tp": 2,
        "sp": True, "cp": 1}
FIXED_BYTES = [
    {"vocab": 50304, "s": 2048, "b": 1, "h": 4096, "a": 32, "L": 32, "dtype": "bf16",
     "tp": 8, "sp": True, "cp": 1},
    {"vocab": 32000, "s": 32768, "b": 1, "h": 2048, "a": 16, "L": 24, "dtype": "bf16",
     "tp": 2, "sp": False, "cp": 4}]


def _draw_bytes(rng: np.random.Generator) -> dict[str, Any]:
    t, c = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4, 8]))
    if t == c == 1:
        t = 2
    a = int(rng.choice([8, 16, 32, 64]))
    return {"vocab": 1024 * int(rng.integers(8, 64)), "s": 2 ** int(rng.integers(9, 16)),
            "b": int(rng.integers(1, 9)), "h": a * int(rng.choice([64, 128])), "a": a,
            "L": int(rng.integers(2, 49)), "dtype": str(rng.choice(["fp32", "bf16"])),
            "tp": t, "sp": bool(rng.integers(0, 2)) and t > 1, "cp": c}


@functools.lru_cache(maxsize=8)
def _measured(vocab: int, s: int, b: int, h: int, a: int, L: int, dtype: str, tp: int,
              sp: bool, seed: int = 0) -> tuple[float, float, bool]:
    """(most bytes a rank sent, most activation bytes a rank kept, loss and gradients equal
    to one process) of one real step of the lesson's TP(/SP) GPT on ``tp`` workers."""
    from ddl_lab.ml.gpt import GPTConfig
    from ddl_lab.transformers.tensor import differences, one_process, tp_step
    cfg, dt = GPTConfig(vocab=vocab, seq=s, hidden=h, heads=a, layers=L), DTYPES[dtype]
    runs = on_workers(tp_step, tp, cfg, b, seed, sp, dt, sp, fn=tp_step)
    sent = max(sum(r["forward"].values()) + sum(r["backward"].values()) for r in runs)
    same = not differences(runs, one_process(cfg, b, seed, dt), rtol=1e-4, atol=1e-5)
    return float(sent), float(max(r["activations"] for r in runs)), same


@task("transformers")
def transformer_bytes(my_transformer_bytes: Callable, seed: int = 0) -> None:
    """Lesson 12, task 3 (reasoning): ``my_transformer_bytes(vocab, s, b, h, a, L, dtype, tp,
    sp, cp)`` returns {"sent": bytes one rank puts on the wire in one training step (forward
    and backward, the ring model of lesson 06), "activations": bytes it keeps for backward
    after the forward} for the lesson's GPT (no dropout) over tp × cp ranks: tensor
    parallelism of degree tp (``sp``: its sequence-parallel form, the column-parallel inputs
    kept as shards), context parallelism of degree cp by ring attention. Judged against
    the accounting on drawn configurations, and on one that runs on real workers."""
    trial = Trial("transformer_bytes", my_transformer_bytes, seed, [REAL, *FIXED_BYTES],
                  draws=10, draw=_draw_bytes)
    name = trial.name
    for case in trial:
        p = case.params
        sent, kept = _answer(trial.call(case, *(p[k] for k in _ARGS)), name,
                             _call(name, p), case)
        want = _costs(*(p[k] for k in _ARGS))
        _judge_bytes(name, case, sent, kept, want, "the lesson's accounting says")
        if case.index == 0:
            m_sent, m_kept, _ = _measured(*(p[k] for k in _ARGS[:-1]))
            _judge_bytes(name, case, sent, kept, (m_sent, m_kept), "measured on the workers:")
    trial.passed(f"one configuration measured on {REAL['tp']} workers (wiretap and saved-"
                 f"tensor hooks) and {len(trial) - 1} more (TP up to 8, SP on and off, CP up "
                 "to 8, fp32 and bf16) match the lesson's accounting")


# --------------------------------------------------------------- task 4 (design): a plan

OVER = 0.10                        # a plan may send up to 10 % more than the least that fits
_PLAN_ARGS = ("vocab", "s", "b", "h", "a", "L", "dtype", "ranks", "budget")


def options(p: dict) -> list[tuple[int, bool, int]]:
    """Every (tp, sp, cp) with tp · cp = ranks that the model allows: whole heads per rank,
    the sequence split evenly (sequence parallelism: s/cp divisible by tp)."""
    n, out = p["ranks"], []
    for t in (d for d in range(1, n + 1) if n % d == 0 and p["a"] % d == 0):
        c = n // t
        if p["s"] % c:
            continue
        out += [(t, sp, c) for sp in ((False, True) if t > 1 and (p["s"] // c) % t == 0
                                      else (False,))]
    return out


def _plan_costs(p: dict, plan: tuple[int, bool, int]) -> tuple[float, float]:
    return _costs(*(p[k] for k in _PLAN_ARGS[:7]), *plan)


def _budget(p: dict, rng: np.random.Generator, real: bool) -> dict | None:
    """A budget that some options meet with 6 % to spare and others miss by as much, such
    that the fitting options' bytes are either within 5 % of the least or 15 % over it; for
    ``real``, one that only plans without context parallelism meet."""
    opts = options(p)
    cost = {o: _plan_costs(p, o) for o in opts}
    kept = sorted({k for _, k in cost.values()})
    if len(kept) < 2:
        return None
    budget = kept[int(rng.integers(1, len(kept)))] * float(rng.uniform(1.07, 1.3))
    if any(budget / 1.06 < k < budget * 1.06 for k in kept) or kept[0] > budget:
        return None
    fits = [o for o in opts if cost[o][1] <= budget]
    least = min(cost[o][0] for o in fits)
    good = [o for o in fits if cost[o][0] <= (1 + OVER) * least]
    if any(1.05 * least < cost[o][0] < 1.15 * least for o in fits) or len(good) == len(opts):
        return None
    if real and any(c > 1 for _, _, c in good):
        return None
    return {**p, "budget": int(budget)}


def _plan_draw(rng: np.random.Generator, real: bool) -> dict[str, Any]:
    while True:
        if real:
            n = int(rng.choice([2, 4]))
            p = {"vocab": 16 * int(rng.integers(3, 6)), "s": int(rng.choice([16, 32])),
                 "b": int(rng.integers(2, 4)), "h": 32, "a": 4, "L": 2, "dtype": "fp32",
                 "ranks": n}
        else:
            a = int(rng.choice([16, 32, 64]))
            p = {"vocab": 1024 * int(rng.integers(16, 64)), "s": 2 ** int(rng.integers(11, 18)),
                 "b": int(rng.integers(1, 5)), "h": a * 128, "a": a,
                 "L": int(rng.integers(8, 65)), "dtype": "bf16",
                 "ranks": int(rng.choice([4, 8, 16]))}
        if (case := _budget(p, rng, real)) is not None:
            return case


def _draws() -> Callable[[np.random.Generator], dict[str, Any]]:
    count = iter(range(10 ** 6))
    return lambda rng: _plan_draw(rng, real=next(count) == 0)


def _choice(out: Any, name: str, case: Case) -> tuple[int, bool, int]:
    judge(answers.plan(out, name, {"tp": "the TP degree", "sp": "True or False",
                                   "cp": "the CP degree"}, f" ({case})"))
    t, c, sp = answers.whole(out["tp"]), answers.whole(out["cp"]), out["sp"]
    if not isinstance(sp, (bool, np.bool_)):
        fail(f"{name} chose sp = {sp!r}: say True or False ({case}).")
    if t is None or c is None or t < 1 or c < 1:
        fail(f"{name} chose tp = {out['tp']!r}, cp = {out['cp']!r}: whole degrees ≥ 1 "
             f"({case}).")
    return t, bool(sp) and t > 1, c            # one rank has no sequence to shard


@task("transformers")
def parallel_plan(my_parallel_plan: Callable, seed: int = 0) -> None:
    """Lesson 12, task 4 (design): ``my_parallel_plan(vocab, s, b, h, a, L, dtype, ranks,
    budget)`` returns {"tp": t, "sp": bool, "cp": c} with t · c = ranks for the lesson's GPT
    (no dropout) such that no rank keeps more than ``budget`` bytes of activations, sending
    no more than 10 % over the least any fitting plan sends. The first case runs on real
    workers (activations, bytes, and loss and gradients equal to one process); the others,
    drawn far from the lesson's sizes, are judged by the accounting."""
    trial = Trial("parallel_plan", my_parallel_plan, seed, draws=6, draw=_draws(), plan=True)
    name = trial.name
    plans = [_choice(trial.call(c, *(c.params[k] for k in _PLAN_ARGS),
                                where=f"{name}({', '.join(f'{k}={c.params[k]!r}' for k in _PLAN_ARGS)})"),
                     name, c) for c in trial]
    for case, plan in zip(trial, plans):
        _judge_plan(name, case, plan, None, plans)
    p, plan = trial.cases[0].params, plans[0]
    sent, kept, same = _measured(*(p[k] for k in _PLAN_ARGS[:7]), plan[0], plan[1])
    _judge_plan(name, trial.cases[0], plan, (sent, kept, same), plans)
    trial.passed(f"on {p['ranks']} real workers tp={plan[0]}, sp={plan[1]} kept "
                 f"{kept / p['budget']:.0%} of the budget and equalled one process; "
                 f"{len(trial) - 1} more budgets (up to 16 ranks, sequences up to 128k) met by "
                 "the accounting")


def _judge_plan(name: str, case: Case, plan: tuple[int, bool, int],
                measured: tuple[float, float, bool] | None, plans: list) -> None:
    p = case.params
    t, sp, c = plan
    chose = f"{name}(…) chose tp={t}, sp={sp}, cp={c}"
    unseen = answers.same_for_all(plans) + f" ({case})"
    if t * c != p["ranks"]:
        fail(f"{chose}: tp · cp must be the {p['ranks']} ranks given.{unseen}")
    if plan not in options(p):
        fail(f"{chose}: not a plan this model allows — tp must divide the {p['a']} heads, cp "
             f"the sequence of {p['s']} and, with sp, tp the cp-th of it.{unseen}")
    sent, kept = _plan_costs(p, plan)
    how = "by the lesson's accounting"
    if measured is not None:
        sent, kept, same = measured
        how = "measured on the workers"
        if not same:
            fail(f"{chose}: its loss or gradients differ from one process's.{unseen}")
    if kept > p["budget"]:
        fail(f"{chose}: a rank keeps {kept:,.0f} bytes of activations ({how}), over the "
             f"budget of {p['budget']:,}. Sequence parallelism cuts every activation by t; "
             f"context parallelism cuts the tokens a rank holds by c.{unseen}")
    fits = [o for o in options(p) if _plan_costs(p, o)[1] <= p["budget"]]
    best = min(fits, key=lambda o: _plan_costs(p, o)[0])
    least = _plan_costs(p, best)[0]
    if sent > (1 + OVER) * least * (1 + 1e-9):
        fail(f"{chose}: a rank sends {sent:,.0f} bytes a step ({how}), "
             f"{sent / least - 1:.0%} more than tp={best[0]}, sp={best[1]}, cp={best[2]} "
             f"({least:,.0f}), which fits the budget too. Tensor parallelism's bytes grow "
             "with b·s·h per layer and do not shrink with more ranks; the ring's with the "
             f"rank's heads' K/V, and context parallelism sums its ranks' gradients.{unseen}")
