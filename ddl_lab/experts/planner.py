"""A planner for composed parallelism (lesson 14, experts: "the whole picture"): for a model,
a global batch and a cluster, every layout (dp, tp, pp, cp, ep, ZeRO stage, recomputation,
micro-batch) with its predicted per-rank memory, bytes per step along each mesh dimension
and step time; the fastest that fits comes first.

The accounting, each term from its source (mixed precision: bf16 weights and gradients,
fp32 master weights and Adam's two moments):

- **model states** (Rajbhandari et al. 2020, ZeRO, §3–5): 2Ψ + 2Ψ + KΨ bytes, K = 12, for
  the Ψ parameters (in fp32, e = 4: 4Ψ + 4Ψ + 8Ψ, the course's runs) the busiest rank holds
  after tensor and pipeline cuts (``rank_params``: norms and row-parallel biases stay whole
  under tp, the end stages hold the embedding or head; experts also cut by ep);
  ZeRO stage 1 divides the optimizer's KΨ by the data-parallel degree d, stage 2 the
  gradients too, stage 3 the weights too. ``zero_paper_check`` gives the paper's Figure 1
  (Ψ = 7.5 B, d = 64: 120, 31.4, 16.6 and 1.9 GB).
- **activations** of one layer for a micro-batch of b sequences of s tokens (Korthikanti et
  al. 2022, eq. 1–4; ``transformers.memory`` measures them): with e bytes an element and
  δ = 1 with dropout, sbh(4e + 2δ) kept whole and sbh·12e + as²b(e + δ(1 + e)) cut by t
  under tensor parallelism; sequence parallelism cuts the first part by t too; selective
  recomputation drops the as² part; full recomputation keeps the layer's input, sbh·e
  (/t with sequence parallelism). Context parallelism gives a rank s/c of the queries
  (its attention part counts its queries against all s keys: a ring that kept every
  block's probabilities; flash-style kernels keep less). 1F1B keeps p micro-batches in
  flight on the first stage, so it holds L/p layers × p = L layers' worth (Narayanan et
  al. 2021); the last stage's fp32 logits, b·s·V/t · 4 bytes, are added.
- **bytes per step** (the ring model, lesson 06; ``runtime.costs.sent_bytes``): data
  parallelism 2(d−1)/d of the rank's gradients (e bytes each) (ZeRO-1 and 2 the same:
  reduce-scatter plus all-gather), 3(d−1)/d with ZeRO-3 for the layers (weights gathered
  forward and backward; ZeRO §7), 2(d−1)/d for the rest (FSDP2's root — embedding,
  positions, final norm — stays gathered from forward to backward; lesson 14 measured it);
  tensor parallelism 8(t−1)/t · bsh·e per layer and micro-batch (two all-reduces forward,
  two backward, or the same bytes as all-gathers and reduce-scatters under sequence
  parallelism: lesson 12), 4 more with full recomputation, and per micro-batch the
  embedding's and the head's all-reduces of bsh·e and the vocabulary-parallel
  cross-entropy's three of b·s fp32 numbers (lesson 12's ``tp_bytes``) — none of these
  without vocabulary parallelism; pipeline, on the busiest stage, 2 · bsh·e/t per
  micro-batch in the middle (an activation forward, its gradient back), one of them at an
  end, plus there the all-reduce of a tied embedding's gradient between the first and the
  last stage (Megatron-LM's embedding group); /t only with Megatron's scatter-gather (lesson
  14: torch's ``pipelining`` sends the whole activation); context parallelism 6(c−1) K/V
  blocks per layer and micro-batch (passed forward; passed again with their gradients
  backward: lesson 12's ring attention); expert parallelism 4(ep−1)/ep · k·tokens·h·e per
  MoE layer and micro-batch (dispatch and combine, forward and backward: ``parallel.py``).
- **step time**: the model FLOPs of the step (6N per token for the active parameters, plus
  attention's 12·L·h·s: lesson 13), ×4/3 with full recomputation, +4·L·h·s per token with
  selective, over the rank's share and the measured FLOP/s; the 1F1B bubble, (p−1)/m of it;
  each dimension's bytes at its link's β, plus α per ring step; data parallelism's share
  hidden behind compute by the overlap φ (lesson 11 §6; lesson 13 measured it).

Ranks are placed tensor-parallel innermost, then context, data (with experts inside it),
pipeline outermost (Megatron-LM's order): a dimension whose ranks fit in one node uses the
node's link, otherwise the network's. Layouts that the libraries refuse are not listed:
ZeRO-2 and 3 with pipeline parallelism (DeepSpeed, Megatron-LM), tp not dividing the heads
(or the key/value heads), pp not dividing the layers, ep not dividing the experts or dp.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from ddl_lab.runtime.costs import sent_bytes

__all__ = ["Model", "Cluster", "Layout", "Prediction", "LLAMA3_8B", "predict", "plan",
           "layouts", "zero_paper_check", "on_one_node", "rank_params"]

GB = 1e9
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer: L layers of width h, a heads (``kv_heads`` for grouped
    keys and values), sequences of s tokens, vocabulary V, MLP width ``ffn`` (4h by default;
    ``gated``: SwiGLU's three matrices), ``experts`` per MoE layer (1: dense) with top-k
    routing, ``tied`` embedding and head; elements of ``e`` bytes, ``dropout`` or not;
    ``biases`` in every Linear and LayerNorm (GPT-2's, the course's ``ml.gpt``; otherwise
    Llama's: none, norms with a weight only), learned ``positions`` (s·h)."""

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    ffn: int | None = None
    kv_heads: int | None = None
    gated: bool = False
    experts: int = 1
    top_k: int = 1
    tied: bool = False
    e: int = 2
    dropout: bool = False
    biases: bool = False
    positions: bool = False

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    def _attention(self) -> int:
        h = self.hidden
        return 2 * h * h + 2 * h * (h * self.kv // self.heads)      # q, o; k, v

    def _expert(self) -> int:
        return (3 if self.gated else 2) * self.hidden * (self.ffn or 4 * self.hidden)

    def expert_params(self) -> int:
        """Ψ of all the experts of all layers (0 for a dense model: its MLP is not cut by ep)."""
        return self.layers * self.experts * self._expert() if self.experts > 1 else 0

    def layer_params(self) -> tuple[int, int]:
        """Ψ of one layer's dense part: (cut by tensor parallelism — the attention's and a
        dense MLP's matrices and column-parallel biases —, kept whole on every tp rank — the
        norms, the row-parallel biases, a router)."""
        h, ffn = self.hidden, self.ffn or 4 * self.hidden
        dense = self.experts == 1
        cut = self._attention() + dense * self._expert()
        whole = (4 if self.biases else 2) * h + (h * self.experts if not dense else 0)
        if self.biases:
            cut += h + 2 * h * self.kv // self.heads + dense * ffn * (2 if self.gated else 1)
            whole += (1 + dense) * h
        return cut, whole

    def end_params(self) -> tuple[int, int, int]:
        """Ψ outside the layers: (the embedding — and as many again for an untied head —,
        the positions, the final norm)."""
        emb = self.vocab * self.hidden
        return (emb, self.seq * self.hidden * self.positions,
                self.hidden * (2 if self.biases else 1))

    def dense_params(self) -> int:
        """Ψ of everything else: attention, dense MLPs, routers, norms, embedding and head."""
        emb, pos, norm = self.end_params()
        return self.layers * sum(self.layer_params()) + emb * (1 if self.tied else 2) \
            + pos + norm

    def params(self) -> int:
        return self.dense_params() + self.expert_params()

    def active_params(self) -> int:
        """N of 6N: the parameters one token's matmuls use (top-k of the experts)."""
        k = min(self.top_k, self.experts)
        return self.dense_params() + self.layers * k * self._expert() * (self.experts > 1)


# Llama 3 8B's shape (Meta's model card and configuration: 8.03 B parameters).
LLAMA3_8B = Model(layers=32, hidden=4096, heads=32, seq=8192, vocab=128256, ffn=14336,
                  kv_heads=8, gated=True)


@dataclass(frozen=True)
class Cluster:
    """``devices`` of ``memory`` bytes each, ``flop_s`` each (measured: lesson 13's roofline),
    ``per_node`` of them on one node's link (α, β), the rest over the network's."""

    devices: int
    memory: float
    flop_s: float
    per_node: int = 8
    alpha_node: float = 5e-6
    beta_node: float = 1 / 200e9
    alpha_net: float = 2e-5
    beta_net: float = 1 / 25e9
    overlap: float = 0.0


@dataclass(frozen=True)
class Layout:
    """One way to use the devices: dp · tp · pp · cp of them (ep inside dp), a ZeRO stage,
    recomputation, micro-batches of ``micro`` sequences, sequence parallelism with tp;
    ``vocab_parallel``: the embedding and head cut by tp (Megatron-LM; torch's
    ``parallelize_module`` plan of lesson 14 keeps them whole); ``scatter_gather``: a
    pipeline sends 1/t of an activation from each tp rank (Megatron-LM; torch's
    ``pipelining`` sends it whole)."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    recompute: str = "none"
    micro: int = 1
    sp: bool = True
    vocab_parallel: bool = True
    scatter_gather: bool = True

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def __str__(self) -> str:
        dims = "×".join(f"{k}{v}" for k, v in (("dp", self.dp), ("tp", self.tp), ("pp", self.pp),
                                                ("cp", self.cp), ("ep", self.ep)) if v > 1)
        return (f"{dims or 'one device'}, ZeRO-{self.zero}, recompute {self.recompute}, "
                f"micro-batch {self.micro}")


@dataclass(frozen=True)
class Prediction:
    """A layout's predicted per-rank ``memory`` and ``bytes`` per step (by part and by mesh
    dimension), ``seconds`` (by part; ``total``), and whether it ``fits``."""

    layout: Layout
    memory: dict[str, float] = field(default_factory=dict)
    bytes: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    fits: bool = True

    @property
    def peak(self) -> float:
        return sum(self.memory.values())


def _states(psi: float, d: int, zero: int, e: int = 2) -> dict[str, float]:
    """ZeRO's model states of ``psi`` parameters over a data-parallel group of ``d``: mixed
    precision (e = 2) keeps 2 + 2 + 12 bytes a parameter, fp32 (e = 4) 4 + 4 + 8 (no
    master copy: Adam's two moments)."""
    def cut(stage: int) -> int:
        return d if zero >= stage else 1
    weights, optimizer = (4, 8) if e >= 4 else (2, 12)
    return {"weights": weights * psi / cut(3), "gradients": weights * psi / cut(2),
            "optimizer": optimizer * psi / cut(1)}


def zero_paper_check(psi: float = 7.5e9, d: int = 64) -> list[float]:
    """Model-state GB per device at ZeRO stages 0–3 (the ZeRO paper's Figure 1 example)."""
    return [sum(_states(psi, d, z).values()) / GB for z in range(4)]


def _layer_activations(m: Model, lay: Layout) -> float:
    """Bytes one layer keeps for backward, for one micro-batch on one rank."""
    s, b, h, a, t, e = m.seq / lay.cp, lay.micro, m.hidden, m.heads, lay.tp, m.e
    d = 1 if m.dropout else 0
    whole, cut = s * b * h * (4 * e + 2 * d), s * b * h * 12 * e
    scores = a * s * m.seq * b * (e + d * (1 + e))
    if lay.recompute == "full":
        return s * b * h * e / (t if lay.sp else 1)
    if lay.recompute == "selective":
        scores = 0.0
    return whole / (t if lay.sp else 1) + (cut + scores) / t


def rank_params(m: Model, lay: Layout) -> float:
    """Ψ of the dense part the busiest rank holds (before ZeRO): its L/p layers (their
    matrices cut by t, norms and row-parallel biases whole), and on the first stage the
    embedding and positions, on the last the final norm and the head — a tied head's copy of
    the embedding when p > 1 (Megatron-LM keeps one there); the embedding cut by t only
    ``vocab_parallel``."""
    cut, whole = m.layer_params()
    layers = m.layers / lay.pp * (cut / lay.tp + whole)
    emb, pos, norm = m.end_params()
    emb = emb / lay.tp if lay.vocab_parallel else emb
    if lay.pp == 1:
        return layers + emb * (1 if m.tied else 2) + pos + norm
    return layers + emb + max(pos, norm)


def _link(m_before: int, size: int, c: Cluster) -> tuple[float, float]:
    """(α, β) of a mesh dimension of ``size`` ranks, ``m_before`` ranks apart."""
    inside = m_before * size <= c.per_node
    return (c.alpha_node, c.beta_node) if inside else (c.alpha_net, c.beta_net)


def predict(m: Model, batch: int, c: Cluster, lay: Layout) -> Prediction:
    """Memory, bytes and time of one step of ``batch`` sequences under ``lay`` on ``c``."""
    microbatches = batch // (lay.dp * lay.micro)
    t, p, cp, dp, ep = lay.tp, lay.pp, lay.cp, lay.dp, lay.ep
    dense = rank_params(m, lay)
    experts = m.expert_params() / (t * p * ep)
    mem = {k: v + w for (k, v), w in zip(_states(dense, dp * cp, lay.zero, m.e).items(),
                                          _states(experts, dp * cp // ep, lay.zero, m.e).values())}
    inflight = min(p, microbatches) if p > 1 else 1
    mem["activations"] = m.layers / p * inflight * _layer_activations(m, lay)
    mem["logits"] = lay.micro * m.seq / cp * m.vocab / t * 4
    bsh = lay.micro * m.seq / cp * m.hidden * m.e
    per_layer_micro = m.layers / p * microbatches
    ar = sent_bytes("all_reduce", t, 1.0)                    # 2(t−1)/t
    loss = lay.micro * m.seq / cp * max(m.e, 4)             # the loss's b·s numbers, ≥ fp32
    ends = 2 * bsh + 3 * loss if p == 1 else bsh + 3 * loss  # embedding, head, cross-entropy
    ends *= lay.vocab_parallel
    cut, whole = m.layer_params()
    regather = sent_bytes("all_reduce", dp * cp, m.e * m.layers / p * (cut / t + whole)) / 2
    pipe = bsh / (t if lay.scatter_gather else 1) * microbatches
    tied = m.vocab * m.hidden / (t if lay.vocab_parallel else 1) * m.e if m.tied else 0.0
    traffic = {
        "dp": (3 / 2 if lay.zero == 3 else 1) * sent_bytes("all_reduce", dp * cp // ep,
                                                           m.e * experts)
        + sent_bytes("all_reduce", dp * cp, m.e * dense) + (lay.zero == 3) * regather,
        "tp": ar * ((6 if lay.recompute == "full" else 4) * bsh * per_layer_micro
                    + ends * microbatches),
        "pp": max(2 * pipe if p > 2 else 0.0, pipe + tied) if p > 1 else 0.0,
        "cp": 6 * (cp - 1) * bsh * m.kv / m.heads / t * per_layer_micro,
        "ep": (4 * (ep - 1) / ep * bsh * m.top_k / t * per_layer_micro) if m.experts > 1
        else 0.0}
    steps = {"dp": 2 * (dp * cp - 1), "tp": 2 * (t - 1) * 4 * per_layer_micro,
             "pp": 2 * microbatches if p > 1 else 0, "cp": 2 * (cp - 1) * per_layer_micro,
             "ep": 4 * (ep - 1) * per_layer_micro}
    stride = {"tp": 1, "cp": t, "ep": t * cp, "dp": t * cp, "pp": t * cp * dp}
    size = {"tp": t, "cp": cp, "ep": ep, "dp": dp * cp, "pp": p}
    tokens = batch * m.seq / (dp * cp)
    per_token = 6 * m.active_params() + 12 * m.layers * m.hidden * m.seq
    extra = {"none": 0.0, "selective": 4 * m.layers * m.hidden * m.seq,
             "full": 2 * m.active_params() + 4 * m.layers * m.hidden * m.seq}[lay.recompute]
    compute = tokens * (per_token + extra) / (t * p) / c.flop_s
    secs = {"compute": compute, "bubble": compute * (p - 1) / max(microbatches, 1)}
    for dim, nbytes in traffic.items():
        alpha, beta = _link(stride[dim], size[dim], c)
        secs[dim] = (nbytes * beta + steps[dim] * alpha) if nbytes else 0.0
    secs["dp"] *= 1 - c.overlap
    secs["total"] = sum(secs.values())
    return Prediction(lay, mem, traffic, secs, fits=sum(mem.values()) <= c.memory)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(m: Model, batch: int, devices: int, max_micro: int = 8) -> list[Layout]:
    """Every layout of ``devices`` ranks the libraries accept for this model and batch."""
    out = []
    for tp, pp, cp in itertools.product(_divisors(devices), repeat=3):
        if devices % (tp * pp * cp):
            continue
        dp = devices // (tp * pp * cp)
        if m.heads % tp or m.kv % tp or m.layers % pp or m.seq % cp or batch % dp:
            continue
        for ep in (_divisors(dp) if m.experts > 1 else [1]):
            if m.experts % ep:
                continue
            for zero, rec in itertools.product(range(4) if pp == 1 else range(2), RECOMPUTE):
                for micro in _divisors(batch // dp):
                    if micro <= max_micro:
                        out.append(Layout(dp, tp, pp, cp, ep, zero, rec, micro))
    return out


def plan(m: Model, batch: int, c: Cluster, max_micro: int = 8) -> list[Prediction]:
    """Every layout's prediction, those that fit first, each group fastest first (then the
    least memory)."""
    preds = [predict(m, batch, c, lay) for lay in layouts(m, batch, c.devices, max_micro)]
    return sorted(preds, key=lambda q: (not q.fits, q.seconds["total"], q.peak))


def on_one_node(c: Cluster) -> Cluster:
    """``c`` with every link the node's (a laptop's ranks share one machine)."""
    return replace(c, per_node=c.devices, alpha_net=c.alpha_node, beta_net=c.beta_node)
