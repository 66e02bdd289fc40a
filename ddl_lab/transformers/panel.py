"""Lesson 12's panel (transformers, §6): one real step on the workers for a chosen tensor-
parallel degree t, sequence parallelism on or off, context-parallel degree c and sequence
length s, beside the formulas.

``panel_run(cluster, t, sp, c, s)`` runs, in one call on a cluster of at least max(t, c)
ranks (``runtime.worlds.in_worlds``: ranks 0…t−1 and 0…c−1 as their own groups):

- a forward and backward of the tensor-parallel GPT (``tensor.tp_step``) on t ranks: the
  activation bytes each rank keeps (saved-tensor hooks) against
  ``sequence.activation_bytes``, the bytes each puts on the wire (the wiretap) against
  ``tensor.tp_bytes``;
- ring attention (``ring.ring_case``, zig-zag, causal) of the same shape on c ranks: the
  bytes each rank sends against ``ring.ring_bytes``.

What comes back is plain numbers per rank (``PanelRun``), for ``plots.figure_panel``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.ml.text import VOCAB
from ddl_lab.runtime.worlds import in_worlds
from ddl_lab.transformers.ring import ring_bytes, ring_case
from ddl_lab.transformers.sequence import activation_bytes
from ddl_lab.transformers.tensor import tp_bytes, tp_step

__all__ = ["PanelRun", "panel_config", "panel_case", "panel_run"]


@dataclass(frozen=True)
class PanelRun:
    """One panel step: per rank of the TP group its activation bytes and bytes sent
    (measured, formula), per rank of the CP group the ring's bytes sent (measured, formula),
    and the CP ranks' attention work (scores computed)."""

    t: int
    sp: bool
    c: int
    s: int
    activations: list[tuple[int, float]]
    tp_sent: list[tuple[float, float]]
    ring_sent: list[tuple[float, float]]
    ring_work: list[int]
    loss: float


def panel_config(s: int, hidden: int = 64, heads: int = 4, layers: int = 2) -> GPTConfig:
    """The panel's model: lesson 12's GPT with sequences of ``s`` characters."""
    return GPTConfig(vocab=VOCAB, seq=s, hidden=hidden, heads=heads, layers=layers)


def panel_case(kind: str, cfg: GPTConfig, b: int, sp: bool) -> dict[str, Any]:
    """Worker function (one rank of the case's group): 'tp' — one step of the tensor-parallel
    GPT, its activation bytes, bytes sent and loss; 'cp' — ring attention of the model's
    shape (zig-zag, causal, float32), the bytes sent and scores computed."""
    if kind == "tp":
        out = tp_step(cfg, b, sequence=sp)
        sent = sum(out["forward"].values()) + sum(out["backward"].values())
        return {"activations": out["activations"], "sent": sent, "loss": out["loss"]}
    out = ring_case(b, cfg.heads, cfg.seq, cfg.head_dim, causal=True, zigzag=True,
                    dtype="float32")
    return {"sent": sum(out["sent"]), "work": out["work"]}


def panel_run(cluster: Any, t: int, sp: bool, c: int, s: int, b: int = 2) -> PanelRun:
    """Run the panel's step on ``cluster`` (at least max(t, c) ranks) and put each measure
    beside its formula."""
    if sp and t == 1:
        sp = False                                  # nothing to shard over
    cfg = panel_config(s)
    per_rank = cluster.run(in_worlds, panel_case, [(t, ("tp", cfg, b, sp)),
                                                   (c, ("cp", cfg, b, sp))])
    tp = [per_rank[r][0] for r in range(t)]
    cp = [per_rank[r][1] for r in range(c)]
    for out in tp + cp:
        if not isinstance(out, dict):               # a failed case comes back described
            raise RuntimeError(f"the panel's step failed on the workers: {out}")
    wire = tp_bytes(cfg, b, t, torch.float32, sequence=sp)
    tp_formula = sum(v for phase in wire.values() for v in phase.values())
    fwd = ring_bytes(s, c, b, cfg.heads, cfg.head_dim, 4, zigzag=True)
    bwd = ring_bytes(s, c, b, cfg.heads, cfg.head_dim, 4, zigzag=True, backward=True)
    return PanelRun(
        t, sp, c, s,
        activations=[(o["activations"], activation_bytes(cfg, b, t, torch.float32, sequence=sp,
                                                         rank=r)) for r, o in enumerate(tp)],
        tp_sent=[(o["sent"], tp_formula) for o in tp],
        ring_sent=[(o["sent"], f + g) for o, f, g in zip(cp, fwd, bwd)],
        ring_work=[o["work"] for o in cp], loss=tp[0]["loss"])
