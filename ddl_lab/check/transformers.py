"""Checks for lesson 12 (transformers across ranks): one rank's ring attention forward and the
vocabulary-parallel cross-entropy, both on real workers, every rank's answer compared with one
process in float64 and every message a rank hands its group watched by the wiretap (a message
off the ring, or a collective that gathers what no rank may hold, is refused as it is made)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._core import CheckFailed, fail, passed, task
from ._diagnose import Case, apart, describe_value, differs, explain, same
from . import _transformers_plan as _plan
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


# ------------------------------------------------ tasks 3 and 4: the accounting, and a plan
# written in _transformers_plan.py (this module holds the ring and the vocabulary)

transformer_bytes = task("transformers")(_plan.transformer_bytes)
parallel_plan = task("transformers")(_plan.parallel_plan)
