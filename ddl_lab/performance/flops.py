"""The model FLOPs of a training step and its MFU (lesson 13, §2).

A dense layer with a weight of N elements costs 2N FLOPs a token forward (a multiply and
an add per weight) and 4N backward (the input's gradient and the weight's, each a matmul
of the same size): **6N per token** (Kaplan et al. 2020, §2.1). Attention adds the two
products that hold no parameter, q·kᵀ and p·v: per token and layer 2·s·h each forward,
so 4·s·h forward and **12·L·h·s** forward and backward (Chowdhery et al. 2022, appendix B,
count 6N + 12·L·H·Q·T). Under a causal mask only the half of the s × s scores below the
diagonal is needed: a kernel that skips the rest (FlashAttention's causal mode) does
6·L·h·s of useful work — the **causal factor ½**. The lesson's own ``attention`` computes
the whole matrix and masks it, so ``FlopCounterMode`` counts the non-causal 12·L·h·s.

N here is the weights that enter a matmul (``matmul_params``): every Linear's weight and
the tied head's (the token embedding used as the output projection), not the biases,
LayerNorms or the position table — for lesson 12's GPT, 12·L·h² + V·h.

MFU = model FLOPs / (seconds × peak FLOP/s) (Chowdhery et al. 2022, appendix B): the share
of the machine's measured peak that did the model's arithmetic.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
from torch import nn

from ddl_lab.ml.gpt import GPT, GPTConfig, lm_loss

__all__ = ["matmul_params", "gpt_matmul_params", "attention_flops", "step_flops",
           "counted_flops", "gpt_counted_flops", "mfu", "timed_step"]


def matmul_params(model: nn.Module) -> int:
    """N: elements of every weight a matmul uses once per token (``nn.Linear`` weights, and
    a GPT's token embedding, which its tied head multiplies by)."""
    n = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    return n + (model.tok.weight.numel() if isinstance(model, GPT) else 0)


def gpt_matmul_params(cfg: GPTConfig) -> int:
    """N of lesson 12's GPT from its shape: 12·L·h² (qkv 3h², proj h², MLP 8h²) + V·h."""
    return 12 * cfg.layers * cfg.hidden ** 2 + cfg.vocab * cfg.hidden


def attention_flops(layers: int, hidden: int, seq: int, causal: bool = False) -> float:
    """FLOPs of attention's q·kᵀ and p·v per token, forward and backward: 12·L·h·s, or
    6·L·h·s when the causal half of the scores is skipped."""
    return (6.0 if causal else 12.0) * layers * hidden * seq


def step_flops(cfg: GPTConfig, batch: int, attention: bool = True, causal: bool = False) -> float:
    """Model FLOPs of one training step of lesson 12's GPT on ``batch`` sequences of
    ``cfg.seq`` tokens: (6N [+ attention]) per token."""
    per_token = 6.0 * gpt_matmul_params(cfg)
    if attention:
        per_token += attention_flops(cfg.layers, cfg.hidden, cfg.seq, causal)
    return per_token * batch * cfg.seq


def counted_flops(step: Callable[[], None]) -> int:
    """FLOPs ``torch.utils.flop_counter.FlopCounterMode`` counts while ``step()`` runs
    (matmuls and convolutions: what torch knows how to count)."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        step()
    return int(counter.get_total_flops())


def _gpt_batch(cfg: GPTConfig, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, cfg.vocab, (batch, cfg.seq), generator=g)
    return x, torch.randint(0, cfg.vocab, (batch, cfg.seq), generator=g)


def gpt_counted_flops(cfg: GPTConfig, batch: int, seed: int = 0) -> int:
    """FlopCounterMode's count of one forward and backward of ``GPT(cfg)`` on ``batch``
    random sequences of ``cfg.seq`` tokens."""
    model = GPT(cfg, seed)
    x, y = _gpt_batch(cfg, batch, seed)
    return counted_flops(lambda: lm_loss(model(x), y).backward())


def mfu(flops: float, seconds: float, peak: float) -> float:
    """Model FLOPs utilisation: ``flops`` done in ``seconds`` over the ``peak`` FLOP/s."""
    return flops / (seconds * peak)


def timed_step(cfg: GPTConfig, batch: int, repeats: int = 3, seed: int = 0) -> float:
    """Best seconds of one forward, backward and AdamW step of ``GPT(cfg)`` on ``batch``
    sequences, in this process (one warm-up step first)."""
    model = GPT(cfg, seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = _gpt_batch(cfg, batch, seed)
    best = float("inf")
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        lm_loss(model(x), y).backward()
        opt.step()
        if i:
            best = min(best, time.perf_counter() - t0)
    return best

