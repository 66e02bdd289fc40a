"""The mixture-of-experts layer in one process (lesson 14, experts): routing top-1 and top-2
with the capacity cut in GShard's order, Switch's load-balancing loss, the router's gradient
through the gates, and the MoE GPT — it trains, and a dropped token rides the residual."""
import math

import pytest
import torch

from ddl_lab.experts.moe import (MoE, MoEConfig, load_balancing_loss, moe_forward, moe_gpt,
                                 moe_lm_loss, route)
from ddl_lab.ml.gpt import GPTConfig, lm_loss

GPT_CFG = GPTConfig(vocab=17, seq=8, hidden=16, heads=2, layers=2)


def _logits(probs: list[list[float]]) -> torch.Tensor:
    """Router logits whose softmax is ``probs`` (rows summing to 1)."""
    return torch.tensor(probs, dtype=torch.float64).log()


# ------------------------------------------------------------------------------ routing

def test_top1_routes_to_the_most_likely_expert_and_drops_past_capacity_in_token_order():
    r = route(_logits([[.6, .3, .1], [.7, .2, .1], [.1, .8, .1], [.5, .4, .1]]), 1, 2)
    assert r.expert[:, 0].tolist() == [0, 0, 1, 0]
    assert torch.allclose(r.gate[:, 0], torch.tensor([.6, .7, .8, .5], dtype=torch.float64))
    assert r.slot[:, 0].tolist() == [0, 1, 0, 2]
    assert r.kept[:, 0].tolist() == [True, True, True, False]     # token 3 came last
    assert r.counts.tolist() == [3, 1, 0] and r.dropped == 1
    assert r.unrouted.tolist() == [False, False, False, True]


def test_top2_fills_every_first_choice_before_any_second_choice():
    probs = [[.5, .3, .2]] * 4 + [[.3, .5, .2]]      # first choices: 0 0 0 0 1
    r = route(_logits(probs), 2, 3)
    assert r.expert.tolist() == [[0, 1]] * 4 + [[1, 0]]
    # expert 0: tokens 0, 1, 2 (first choices), token 3 past capacity, then token 4's second;
    # expert 1: token 4 (first choice), then tokens 0 and 1's second choices, the rest cut
    assert r.slot.tolist() == [[0, 1], [1, 2], [2, 3], [3, 4], [0, 4]]
    assert r.kept.tolist() == [[True, True], [True, True], [True, False], [False, False],
                               [True, False]]
    assert r.dropped == 4 and r.counts.tolist() == [5, 5, 0]
    assert r.unrouted.tolist() == [False, False, False, True, False]
    assert torch.allclose(r.gate.sum(-1), torch.ones(5, dtype=torch.float64))   # renormalised
    assert torch.allclose(r.gate[0], torch.tensor([.5 / .8, .3 / .8], dtype=torch.float64))


def test_capacity_is_the_ceiling_of_factor_times_tokens_times_k_over_experts():
    assert MoEConfig(8, experts=4, k=1, capacity_factor=1.25).capacity(16) == 5
    assert MoEConfig(8, experts=4, k=2, capacity_factor=1.0).capacity(6) == 3
    assert MoEConfig(8, experts=3, k=1, capacity_factor=1.1).capacity(30) == 11
    assert MoEConfig(8, experts=4, capacity_factor=None).capacity(7) == 7
    r = route(torch.zeros(6, 2), 1, None)
    assert r.dropped == 0 and r.capacity == 6
    with pytest.raises(ValueError, match="k must be 1"):
        MoEConfig(8, k=3)


# ------------------------------------------------------------------------------ aux loss

def test_the_load_balancing_loss_is_e_times_sum_of_f_times_p():
    probs = torch.tensor([[.9, .1], [.8, .2], [.3, .7], [.6, .4]], dtype=torch.float64)
    # first choices 0 0 1 0: f = (.75, .25); P = (.65, .35); aux = 2 (.4875 + .0875)
    got = load_balancing_loss(probs, probs.argmax(-1))
    assert got.item() == pytest.approx(1.15, rel=1e-12)
    assert route(probs.log(), 1, 4).aux.item() == pytest.approx(1.15, rel=1e-12)


def test_a_uniform_router_has_aux_loss_one_and_a_collapsed_one_nearly_e():
    assert route(torch.zeros(10, 4), 1, None).aux.item() == pytest.approx(1.0, abs=1e-7)
    collapsed = torch.zeros(10, 4)
    collapsed[:, 2] = 30.0
    assert route(collapsed, 1, None).aux.item() == pytest.approx(4.0, rel=1e-6)


# ------------------------------------------------------------------------------ gradients

def test_the_router_learns_through_the_gates():
    cfg = MoEConfig(hidden=8, ffn=12, experts=4, k=2, capacity_factor=1.0, aux_weight=0.0)
    layer = MoE(cfg, seed=1).double()
    layer.reset_parameters(1, std=0.5)
    x = torch.randn(2, 3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    layer(x).square().sum().backward()
    assert layer.router.weight.grad.abs().sum() > 0
    assert layer.last.capacity == 3                     # ⌈1.0 · 6 tokens · 2 / 4 experts⌉
    params = {k: v.detach().clone().requires_grad_() for k, v in layer.params().items()}
    names = list(params)

    def f(x: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:
        return moe_forward(dict(zip(names, ps)), x, cfg)[0]

    assert torch.autograd.gradcheck(f, (x.clone().requires_grad_(), *params.values()))


# ------------------------------------------------------------------------------ in the GPT

def _batch(b: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(GPT_CFG.vocab, (b, GPT_CFG.seq + 1),
                        generator=torch.Generator().manual_seed(seed))
    return ids[:, :-1], ids[:, 1:]


def test_the_moe_gpt_loss_adds_the_weighted_aux_of_every_layer_and_it_trains():
    moe = MoEConfig(hidden=16, ffn=32, experts=4, k=2, capacity_factor=1.25, aux_weight=0.1)
    model = moe_gpt(GPT_CFG, moe, seed=3)
    assert all(isinstance(b.mlp, MoE) for b in model.blocks)
    idx, targets = _batch(4)
    loss = moe_lm_loss(model, idx, targets)
    aux = sum(b.mlp.last.aux for b in model.blocks)
    assert loss.item() == pytest.approx(lm_loss(model(idx), targets).item() + 0.1 * aux.item())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(12):
        opt.zero_grad()
        loss = moe_lm_loss(model, idx, targets)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.5, losses
    assert math.isfinite(losses[-1])
    with pytest.raises(ValueError, match=r"MoE's hidden \(8\) must be the GPT's \(16\)"):
        moe_gpt(GPT_CFG, MoEConfig(hidden=8))


def test_a_token_dropped_by_every_expert_leaves_the_block_as_its_attention_residual():
    moe = MoEConfig(hidden=16, experts=4, k=1, capacity_factor=0.25)   # C = 1 of 16 tokens
    model = moe_gpt(GPT_CFG, moe, seed=5)
    block = model.blocks[0]
    idx, _ = _batch(2, seed=5)
    with torch.no_grad():
        x = model.embed(idx)
        after_attention = x + block.attn(block.ln1(x))
        out = block(x)
    stats = block.mlp.last
    dropped = stats.routing.unrouted.view(2, GPT_CFG.seq)
    assert stats.capacity == 1 and stats.dropped == int(dropped.sum()) >= 12
    assert int(stats.tokens_per_expert.sum()) == 16
    assert torch.equal(out[dropped], after_attention[dropped])
    assert not torch.allclose(out[~dropped], after_attention[~dropped])
