"""Training the MoE GPT in one process and watching its router (lesson 14, experts, §1).

``train_moe`` trains ``moe.moe_gpt`` on the standard library's source (``ml.text``, lesson
12's corpus and schedule) with the load-balancing loss at a given weight, and records at
every step what each MoE layer's router did: the (token, choice) pairs routed to each
expert before the capacity cut, the pairs dropped, the aux loss. Run with ``aux_weight=0``
beside the default 0.01 it shows what the Switch/GShard loss is for: without it the router
may let a few experts take most tokens, and those over capacity are dropped.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from ddl_lab.experts.moe import MoE, MoEConfig, moe_gpt, moe_lm_loss
from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.ml.text import VOCAB, batches, unigram_loss
from ddl_lab.transformers.train import TrainConfig, evaluate, lr_at

__all__ = ["MOE_MODEL", "MoERun", "train_moe", "imbalance"]

MOE_MODEL = GPTConfig(vocab=VOCAB, seq=64, hidden=64, heads=4, layers=2)


@dataclass
class MoERun:
    """One training run: per step the LM loss, the aux loss (summed over layers), the
    fraction of pairs dropped, and ``load[step][layer]`` — pairs routed to each expert;
    ``evals`` (step, validation loss); ``unigram``; wall ``seconds`` of the steps."""

    label: str
    experts: int
    losses: list[float] = field(default_factory=list)
    aux: list[float] = field(default_factory=list)
    dropped: list[float] = field(default_factory=list)
    load: list[list[list[int]]] = field(default_factory=list)
    evals: list[tuple[int, float]] = field(default_factory=list)
    unigram: float = 0.0
    seconds: float = 0.0

    @property
    def val_loss(self) -> float:
        return self.evals[-1][1] if self.evals else float("nan")


def train_moe(moe: MoEConfig, tc: TrainConfig, cfg: GPTConfig = MOE_MODEL,
              label: str = "") -> MoERun:
    """``tc.steps`` AdamW steps of the MoE GPT (every block's MLP an MoE of ``moe``, whose
    ``hidden`` is set to the GPT's) in this process, on the corpus; the router watched."""
    moe = replace(moe, hidden=cfg.hidden)
    model = moe_gpt(cfg, moe, tc.seed)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=tc.lr, betas=(0.9, 0.99), weight_decay=0.0)
    layers = [b.mlp for b in model.blocks if isinstance(b.mlp, MoE)]
    run = MoERun(label or f"top-{moe.k}, aux weight {moe.aux_weight:g}", moe.experts,
                 unigram=unigram_loss())
    data = batches(tc.seed, tc.batch, cfg.seq)
    for step in range(tc.steps):
        x, y = next(data)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = moe_lm_loss(model, x, y)
        loss.backward()
        nn.utils.clip_grad_norm_(params, tc.clip)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tc)
        opt.step()
        run.seconds += time.perf_counter() - t0
        stats = [m.last for m in layers]
        aux = sum(float(s.aux.detach()) for s in stats)
        run.aux.append(aux)
        run.losses.append(float(loss.detach()) - moe.aux_weight * aux)
        pairs = x.numel() * moe.k * len(stats)
        run.dropped.append(sum(s.dropped for s in stats) / pairs)
        run.load.append([s.tokens_per_expert.tolist() for s in stats])
        if (step + 1) % tc.eval_every == 0 or step + 1 == tc.steps:
            run.evals.append((step + 1, evaluate(model, tc.eval_windows)))
    return run


def imbalance(run: MoERun, last: int = 10) -> float:
    """The busiest expert's share of the pairs over the last ``last`` steps, all layers,
    × E: 1.0 when every expert gets the same, E when one takes everything."""
    loads = torch.tensor(run.load[-last:], dtype=torch.float64)       # steps, layers, E
    share = loads / loads.sum(-1, keepdim=True)
    return float(share.amax(-1).mean() * run.experts)
