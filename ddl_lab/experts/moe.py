"""A mixture-of-experts layer, in one process (lesson 14, experts; GShard, Lepikhin et al.
2020; Switch Transformer, Fedus et al. 2021; Mixtral, Jiang et al. 2024).

``MoE`` is a drop-in for the GPT block's ``MLP`` ((b, s, h) in, (b, s, h) out):

- **routing** (``route``): a linear router without bias gives each token E logits, a softmax
  turns them into probabilities, and the token goes to its top-k experts (k = 1 or 2).
- **gates**: k = 1 multiplies the expert's output by its probability (Switch); k = 2 by the
  two probabilities renormalised to sum to 1, p_j / (p_1 + p_2) (GShard's top-2 gating; the
  same numbers as Mixtral's softmax over the top-2 logits). The gates are the router's path
  to a gradient: the top-k choice itself has none.
- **capacity**: expert e takes at most C = ⌈capacity_factor · tokens · k / E⌉ of the
  (token, choice) pairs routed to it. Its buffer fills in a fixed order — every token's first
  choice, in token order, then every token's second choice (GShard, Switch) — and a pair
  past slot C is *dropped* and counted. A dropped pair adds nothing: a token that lost every
  choice leaves the layer as zeros, and the block's residual connection (x + MoE(ln2(x)))
  carries it through unchanged.
- **experts**: E small GELU MLPs (fc, proj), their weights *stacked* — ``fc.weight`` (E, h, f),
  ``fc.bias`` (E, f), ``proj.weight`` (E, f, h), ``proj.bias`` (E, h) — rather than an
  ``nn.ModuleList``: one batched matmul runs all of them on the (E, C, h) capacity buffer
  (GShard's dispatch tensor), and the experts a rank holds under expert parallelism are one
  slice of dimension 0 (``parallel.py``), their gradients compared by concatenation. The
  names end like ``MLP``'s, so ``GPT.reset_parameters`` draws them by its own scheme.
- **load balance**: Switch Transformer's auxiliary loss (eq. 4), aux = E · Σ_i f_i · P_i, with
  f_i the fraction of tokens whose first choice is expert i and P_i the mean router
  probability of expert i: 1 when the router is uniform, up to E when one expert takes all.

``moe_forward(params, x, cfg)`` is the functional core, returning the output and the
forward's ``MoEStats`` (tokens per expert before the capacity cut, pairs dropped, aux);
``MoE`` keeps them in ``last``. ``moe_gpt`` puts an MoE in every block of the GPT;
``moe_lm_loss`` is its training loss, the LM loss + aux_weight · (sum of the layers' aux).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ddl_lab.ml.gpt import GPT, GPTConfig, build_gpt, drop, lm_loss

__all__ = ["MoEConfig", "Routing", "MoEStats", "MoE", "route", "load_balancing_loss",
           "moe_forward", "moe_gpt", "moe_lm_loss"]


@dataclass(frozen=True)
class MoEConfig:
    """The layer's shape: width ``hidden``, each expert's inner width ``ffn`` (default
    ``mult`` · hidden), ``experts`` E, top-``k`` routing (1 or 2), ``capacity_factor``
    (None: no capacity, nothing dropped) and the aux loss's weight ``aux_weight``."""

    hidden: int
    experts: int = 4
    k: int = 1
    ffn: int | None = None
    mult: int = 4
    capacity_factor: float | None = 1.25
    aux_weight: float = 0.01

    def __post_init__(self) -> None:
        for name in ("hidden", "experts", "mult"):
            if getattr(self, name) < 1:
                raise ValueError(f"MoEConfig.{name} must be ≥ 1, got {getattr(self, name)}")
        if self.ffn is not None and self.ffn < 1:
            raise ValueError(f"MoEConfig.ffn must be ≥ 1 (or None), got {self.ffn}")
        if self.k not in (1, 2):
            raise ValueError(f"k must be 1 (Switch) or 2 (GShard, Mixtral), got {self.k}")
        if self.experts < self.k:
            raise ValueError(f"top-{self.k} routing needs ≥ {self.k} experts, "
                             f"got {self.experts}")
        if self.capacity_factor is not None and not self.capacity_factor > 0:
            raise ValueError(f"capacity_factor must be > 0 (or None), "
                             f"got {self.capacity_factor}")

    @property
    def width(self) -> int:
        """An expert's inner width f: ``ffn``, or ``mult`` · hidden."""
        return self.ffn or self.mult * self.hidden

    def capacity(self, tokens: int) -> int:
        """C = ⌈capacity_factor · tokens · k / E⌉ slots per expert for a batch of ``tokens``
        (``tokens``: no capacity factor — an expert never gets a token twice)."""
        if self.capacity_factor is None:
            return tokens
        return math.ceil(round(self.capacity_factor * tokens * self.k / self.experts, 9))


# ------------------------------------------------------------------------------ routing

def load_balancing_loss(probs: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """Switch Transformer's eq. 4, E · Σ_i f_i · P_i: ``probs`` (T, E) the router's
    probabilities, ``first`` (T,) each token's first choice. f (a count) has no gradient;
    P carries it to the router."""
    t, e = probs.shape
    if t == 0:
        return probs.sum()
    f = torch.bincount(first, minlength=e).to(probs.dtype) / t
    return e * (f * probs.mean(0)).sum()


@dataclass
class Routing:
    """Where one batch of T tokens goes (``route``): per (token, choice), ``expert`` (T, k)
    the expert, ``gate`` (T, k) its weight, ``kept`` (T, k) whether it found a slot, ``slot``
    (T, k) its place in that expert's buffer (≥ ``capacity`` where dropped); ``probs``
    (T, E) the router's probabilities."""

    expert: torch.Tensor
    gate: torch.Tensor
    kept: torch.Tensor
    slot: torch.Tensor
    probs: torch.Tensor
    capacity: int

    @property
    def counts(self) -> torch.Tensor:
        """(E,) pairs routed to each expert, before the capacity cut."""
        return torch.bincount(self.expert.reshape(-1), minlength=self.probs.shape[-1])

    @property
    def dropped(self) -> int:
        """(token, choice) pairs cut by the capacity."""
        return int((~self.kept).sum())

    @property
    def unrouted(self) -> torch.Tensor:
        """(T,) tokens that lost every choice: only the residual carries them."""
        return ~self.kept.any(-1)

    @property
    def aux(self) -> torch.Tensor:
        """The load-balancing loss of this batch (``load_balancing_loss``)."""
        return load_balancing_loss(self.probs, self.expert[:, 0])


def route(logits: torch.Tensor, k: int, capacity: int | None) -> Routing:
    """Route T tokens from their router ``logits`` (T, E): softmax, top-``k``, gates (the top
    probability; for k = 2 the two renormalised), then the capacity cut — each expert's
    buffer filled by every first choice in token order, then every second choice; a pair
    past ``capacity`` slots is dropped (None: none is)."""
    t, e = logits.shape
    probs = torch.softmax(logits, dim=-1)
    top, expert = probs.topk(k, dim=-1)                    # (T, k), best first
    gate = top if k == 1 else top / top.sum(-1, keepdim=True)
    order = expert.t().reshape(-1)                         # choice-major: first choices first
    hot = F.one_hot(order, e)
    slot = ((hot.cumsum(0) - 1) * hot).sum(-1).view(k, t).t()
    kept = slot < (t if capacity is None else capacity)
    return Routing(expert, gate, kept, slot, probs, t if capacity is None else capacity)


# ------------------------------------------------------------------------------ the layer

@dataclass
class MoEStats:
    """What one forward did: ``tokens_per_expert`` (E,) pairs routed to each expert before
    the capacity cut, ``dropped`` pairs cut, ``aux`` the load-balancing loss (with its
    gradient), ``capacity`` C, and the whole ``routing``."""

    tokens_per_expert: torch.Tensor
    dropped: int
    aux: torch.Tensor
    capacity: int
    routing: Routing


def moe_forward(params: dict[str, torch.Tensor], x: torch.Tensor, cfg: MoEConfig,
                capacity: int | None = None) -> tuple[torch.Tensor, MoEStats]:
    """The layer on ``x`` (..., h) with ``params`` (``MoE``'s names: ``router.weight`` (E, h),
    ``fc.weight``, ``fc.bias``, ``proj.weight``, ``proj.bias``, stacked over experts).
    ``capacity`` defaults to ``cfg.capacity`` of the x's tokens. Returns y (x's shape) —
    zero for a token that lost every choice — and the forward's stats."""
    shape, h, e = x.shape, x.shape[-1], cfg.experts
    x = x.reshape(-1, h)
    tokens = x.shape[0]
    c = cfg.capacity(tokens) if capacity is None else capacity
    r = route(x @ params["router.weight"].t(), cfg.k, c)
    tok, choice = r.kept.nonzero(as_tuple=True)            # the kept pairs
    where = r.expert[tok, choice] * c + r.slot[tok, choice]
    buffer = x.new_zeros(e * c, h).index_copy(0, where, x[tok]).view(e, c, h)
    inner = F.gelu(torch.baddbmm(params["fc.bias"][:, None], buffer, params["fc.weight"]))
    out = torch.baddbmm(params["proj.bias"][:, None], inner, params["proj.weight"])
    picked = out.reshape(e * c, h)[where] * r.gate[tok, choice, None]
    y = x.new_zeros(tokens, h).index_add(0, tok, picked)
    return y.view(shape), MoEStats(r.counts, r.dropped, r.aux, c, r)


class _Stacked(nn.Module):
    """E linear layers stacked: ``weight`` (E, in, out) (applied as x @ W), ``bias`` (E, out)."""

    def __init__(self, experts: int, fan_in: int, fan_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(experts, fan_in, fan_out))
        self.bias = nn.Parameter(torch.empty(experts, fan_out))


class MoE(nn.Module):
    """The mixture-of-experts layer (the module docstring): ``router`` (a Linear h → E, no
    bias), ``fc`` and ``proj`` (the experts, stacked). ``forward(x (b, s, h))`` returns the
    same shape and keeps the forward's ``MoEStats`` in ``last``. Its own weights are drawn
    from ``seed`` like ``GPT``'s (N(0, 0.02), biases 0), torch's global generator untouched.
    ``dropout``: applied to the output as ``MLP`` does (``moe_gpt`` sets the GPT's)."""

    def __init__(self, cfg: MoEConfig, seed: int = 0):
        super().__init__()
        self.cfg, self.dropout = cfg, 0.0
        with torch.random.fork_rng(devices=[]):
            self.router = nn.Linear(cfg.hidden, cfg.experts, bias=False)
        self.fc = _Stacked(cfg.experts, cfg.hidden, cfg.width)
        self.proj = _Stacked(cfg.experts, cfg.width, cfg.hidden)
        self.last: MoEStats | None = None
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int, std: float = 0.02) -> None:
        """Every weight N(0, ``std``) from ``seed``, biases 0."""
        g = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)

    def params(self) -> dict[str, torch.Tensor]:
        """The parameters by name, as ``moe_forward`` takes them."""
        return dict(self.named_parameters())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, self.last = moe_forward(self.params(), x, self.cfg)
        return drop(y, self.dropout, self.training)


# ------------------------------------------------------------------------------ in the GPT

def moe_gpt(cfg: GPTConfig, moe: MoEConfig, seed: int = 0) -> GPT:
    """``build_gpt(cfg)`` with every block's ``MLP`` replaced by an ``MoE`` (``moe.hidden``
    must be ``cfg.hidden``); all weights then drawn from ``seed`` by ``GPT``'s scheme (the
    experts' ``proj.weight`` scaled as a residual projection). Train it with
    ``moe_lm_loss``."""
    if moe.hidden != cfg.hidden:
        raise ValueError(f"the MoE's hidden ({moe.hidden}) must be the GPT's ({cfg.hidden})")
    model = build_gpt(cfg, seed)
    for i, block in enumerate(model.blocks):
        block.mlp = MoE(moe, seed + i)
        block.mlp.dropout = cfg.dropout
    model.reset_parameters(seed)
    return model


def moe_lm_loss(model: GPT, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The MoE GPT's training loss: next-token cross-entropy + Σ over MoE layers of
    aux_weight · aux (each layer's load-balancing loss of this forward)."""
    loss = lm_loss(model(idx), targets)
    for block in model.blocks:
        if isinstance(block.mlp, MoE) and block.mlp.last is not None:
            loss = loss + block.mlp.cfg.aux_weight * block.mlp.last.aux
    return loss
