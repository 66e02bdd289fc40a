"""A small decoder-only transformer (lesson 12, transformers; the model every parallel version
of that lesson copies by parameter name).

``GPT``: token and position embeddings, ``layers`` pre-LayerNorm ``Block``s — causal
multi-head ``Attention`` then a GELU ``MLP``, each added to the residual stream — a final
LayerNorm and a head tied to the token embedding (logits = ln_f(x) · tokᵀ, no separate head
parameter). ``attention`` is the functional core on (b, a, s, d) tensors, written with an
explicit softmax so that ring attention can be compared with it op for op. The weights are
drawn from a seed (GPT-2's scheme: N(0, 0.02), the residual projections scaled by 1/√(2L))
without touching torch's global generator; ``lm_loss`` is the next-token cross-entropy and
``sample`` draws a continuation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GPTConfig", "GPT", "Block", "Attention", "MLP", "attention", "causal_bias", "drop",
           "build_gpt", "lm_loss", "sample"]


@dataclass(frozen=True)
class GPTConfig:
    """Shape of the model: vocabulary, longest sequence, width, heads, depth, dropout."""

    vocab: int
    seq: int
    hidden: int = 64
    heads: int = 4
    layers: int = 2
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab", "seq", "hidden", "heads", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"GPTConfig.{name} must be ≥ 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        """d = hidden / heads."""
        return self.hidden // self.heads


def causal_bias(sq: int, sk: int, dtype: torch.dtype = torch.float32,
                device: torch.device | str | None = None) -> torch.Tensor:
    """(sq, sk) additive mask: 0 where query i may see key j, −∞ where j is in its future.
    Queries are the last ``sq`` of the ``sk`` positions (i sees j ≤ i + sk − sq)."""
    future = torch.ones(sq, sk, dtype=torch.bool, device=device).triu(1 + sk - sq)
    return torch.zeros(sq, sk, dtype=dtype, device=device).masked_fill(future, float("-inf"))


def drop(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """Inverted dropout: each element zeroed with probability ``p``, the rest scaled by
    1/(1−p); x itself when ``p`` is 0 or not training. Backward keeps a 1-byte (bool) mask,
    as CUDA's fused dropout does and Korthikanti et al. count (``F.dropout`` on a CPU keeps
    a mask in x's dtype)."""
    if not training or not p:
        return x
    keep = torch.rand(x.shape, device=x.device) >= p
    return x * keep * (1.0 / (1.0 - p))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
              dropout: float = 0.0) -> torch.Tensor:
    """softmax(q kᵀ / √d [+ causal mask]) v for every head: q (b, a, sq, d), k and v
    (b, a, sk, d) → (b, a, sq, d). The mask is added (not ``masked_fill``), so autograd keeps
    no mask; ``dropout`` > 0 drops attention probabilities (training only: pass 0 in eval)."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        scores = scores + causal_bias(q.shape[-2], k.shape[-2], scores.dtype, scores.device)
    probs = torch.softmax(scores, dim=-1)
    if dropout:
        probs = drop(probs, dropout)
    return probs @ v


class Attention(nn.Module):
    """Causal multi-head self-attention. ``qkv``'s output rows are [q heads…, k heads…,
    v heads…] (head i: rows i·d … (i+1)·d of each third); ``proj`` mixes the heads back.

    ``core`` is the function applied to (q, k, v, causal=, dropout=) — ``attention`` unless an
    instance is given another (the same core recomputed in backward, lesson 12's selective
    recomputation; ring attention)."""

    core: Callable[..., torch.Tensor] = staticmethod(attention)

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        a, d = self.cfg.heads, self.cfg.head_dim
        q, k, v = (t.view(b, s, a, d).transpose(1, 2) for t in self.qkv(x).split(h, dim=-1))
        p = self.cfg.dropout if self.training else 0.0
        y = self.core(q, k, v, causal=True, dropout=p).transpose(1, 2).reshape(b, s, h)
        return drop(self.proj(y), p, self.training)


class MLP(nn.Module):
    """hidden → 4·hidden → GELU (exact, erf) → hidden."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(cfg.hidden, 4 * cfg.hidden)
        self.proj = nn.Linear(4 * cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(F.gelu(self.fc(x)))
        return drop(y, self.cfg.dropout, self.training)


class Block(nn.Module):
    """Pre-LayerNorm block: x + attn(ln1(x)), then + mlp(ln2(·))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = Attention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Decoder-only transformer: ``forward(idx (b, s)) → logits (b, s, vocab)``, s ≤ cfg.seq.

    Weights are drawn from ``seed`` with a generator of their own (the global one is left
    as it was): every Linear and Embedding weight N(0, 0.02), the two residual projections
    (``attn.proj``, ``mlp.proj``) N(0, 0.02/√(2L)), biases 0, LayerNorms 1 and 0."""

    def __init__(self, cfg: GPTConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        with torch.random.fork_rng(devices=[]):          # nn.Linear's own init uses the global RNG
            self.tok = nn.Embedding(cfg.vocab, cfg.hidden)
            self.pos = nn.Embedding(cfg.seq, cfg.hidden)
            self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
            self.ln_f = nn.LayerNorm(cfg.hidden)
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """Draw every weight again from ``seed`` (the scheme in the class docstring)."""
        g = torch.Generator().manual_seed(seed)
        residual = 0.02 / math.sqrt(2 * self.cfg.layers)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln" in name or name.startswith("ln_"):
                p.fill_(1.0)
            else:
                std = residual if name.endswith("proj.weight") else 0.02
                p.copy_(torch.randn(p.shape, generator=g) * std)

    def embed(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Token plus position embeddings (b, s, hidden); ``positions`` (s,) default 0…s−1
        (a rank holding a slice of the sequence passes its slice's positions)."""
        pos = self.pos.weight[: idx.shape[-1]] if positions is None else self.pos(positions)
        return drop(self.tok(idx) + pos, self.cfg.dropout, self.training)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Logits of the tied head: ln_f(x) · tokᵀ."""
        return F.linear(self.ln_f(x), self.tok.weight)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        if idx.shape[-1] > self.cfg.seq:
            raise ValueError(f"sequence of {idx.shape[-1]} tokens, the model holds {self.cfg.seq}")
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build_gpt(cfg: GPTConfig, seed: int = 0) -> GPT:
    """``GPT(cfg, seed)``: the same weights for the same seed, in any process."""
    return GPT(cfg, seed)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) over all b·s positions."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


@torch.no_grad()
def sample(model: GPT, prompt: torch.Tensor, n: int, seed: int = 0,
           temperature: float = 1.0) -> torch.Tensor:
    """``prompt`` (1-D token ids, non-empty) followed by ``n`` tokens drawn one at a time from
    the model's softmax at ``temperature`` (0: the most likely), seeded; the model sees at
    most its last ``cfg.seq`` tokens. The model's train/eval mode is restored."""
    g = torch.Generator().manual_seed(seed)
    out = prompt.reshape(-1).long().cpu()
    dev = next(model.parameters()).device
    was = model.training
    model.eval()
    try:
        for _ in range(n):
            logits = model(out[-model.cfg.seq:][None].to(dev))[0, -1].float().cpu()
            if temperature == 0:
                nxt = logits.argmax().reshape(1)
            else:
                nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=g)
            out = torch.cat([out, nxt])
    finally:
        model.train(was)
    return out
