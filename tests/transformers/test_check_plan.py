"""Lesson 12's tasks 3 and 4 (``check/transformers.py``): the bytes and activations
of a TP × SP × CP configuration, and a layout under a budget — right answers in several
styles pass, the named wrong ones fail with their names; the accounting matches the real
model's parameter count and what the workers measure."""
import functools

import pytest

from ddl_lab.check import CheckFailed
from ddl_lab.check import transformers as P
from ddl_lab.ml.gpt import GPTConfig, build_gpt
from ddl_lab.transformers.ring import ring_bytes
from ddl_lab.transformers.sequence import activation_bytes
from ddl_lab.transformers.tensor import tp_bytes, tp_gpt


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("t", [1, 2, 4])
def test_rank_params_counts_the_real_model(t):
    cfg = GPTConfig(vocab=50, seq=16, hidden=32, heads=4, layers=3)
    model = tp_gpt(build_gpt(cfg, 0), 0, t)
    assert P.rank_params(50, 16, 32, 3, t) == sum(p.numel() for p in model.parameters())


def from_the_formulas(vocab, s, b, h, a, L, dtype, tp, sp, cp):
    """Another right style: the lesson's formulas composed, ``sent`` a tensor."""
    import torch
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    e = 2 if dtype == "bf16" else 4
    cfg = GPTConfig(vocab=vocab, seq=s, hidden=h, heads=a, layers=L)
    phases = tp_bytes(cfg, b, tp, dt, sp, regather=sp, s=s // cp)
    sent = sum(sum(p.values()) for p in phases.values())
    if cp > 1:
        sent += L * (ring_bytes(s, cp, b, a // tp, h // a, e)[0]
                     + ring_bytes(s, cp, b, a // tp, h // a, e, backward=True)[0])
        sent += 2 * (cp - 1) / cp * e * P.rank_params(vocab, s, h, L, tp)
    return {"activations": activation_bytes(cfg, b, tp, dt, sp, sp, s // cp),
            "sent": torch.tensor(float(sent))}


def test_right_transformer_bytes_pass(capsys):
    P.transformer_bytes(from_the_formulas, seed=3)
    assert capsys.readouterr().out.count("✔ transformer_bytes: passed") == 1


def _wrong(mistake):
    """The accounting with one named mistake."""
    account = functools.partial(P._costs, mistake=mistake)

    def wrong(*args):
        sent, kept = account(*args)
        return {"sent": sent, "activations": kept}
    return wrong


@pytest.mark.parametrize("mistake, fault", [
    ("forward only", "only the forward pass was counted"),
    ("no sp grads", "sequence parallelism's extra allreduce in backward is missing"),
    ("sp grads without positions", "gradient allreduce is mis-sized: the position table"),
    ("bf16 as 4", "bf16 was counted as 4 bytes"),
    ("kv once", "K/V blocks were counted once"),
    ("no cp grads", "gradient allreduce of context parallelism is missing"),
    ("sp keeps all", "activations were not divided by t under sequence parallelism"),
    ("sp norms only", "only the LayerNorm regions were cut by t"),
    ("cp keeps all", "activations were not divided by c"),
])
def test_transformer_bytes_mistakes_are_named(mistake, fault):
    with pytest.raises(CheckFailed, match=fault):
        P.transformer_bytes(_wrong(mistake))


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda *a: (1, 2), 'return a dict {"sent": bytes, "activations": bytes}'),
    (lambda *a: {"sent": "many", "activations": 1}, "sent = 'many': a number of bytes"),
])
def test_transformer_bytes_refuses_what_is_no_answer(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        P.transformer_bytes(wrong)


def test_the_real_configuration_is_measured_as_the_accounting_says():
    p = P.REAL
    sent, kept, same = P._measured(*(p[k] for k in P._ARGS[:-1]))
    assert same and (sent, kept) == P._costs(*(p[k] for k in P._ARGS))


# ------------------------------------------------------------------------- the plan

def least_activations_then_bytes(vocab, s, b, h, a, L, dtype, ranks, budget):
    """Another right style: by the formulas, the fitting layouts ranked by bytes (as ints)."""
    rows = []
    for t in range(1, ranks + 1):
        c = ranks // t
        if t * c != ranks or a % t or s % c:
            continue
        for sp in (False, True):
            if sp and (t == 1 or (s // c) % t):
                continue
            got = from_the_formulas(vocab, s, b, h, a, L, dtype, t, sp, c)
            if got["activations"] <= budget:
                rows.append((float(got["sent"]), t, sp, c))
    _, t, sp, c = min(rows)
    return {"tp": t, "sp": sp, "cp": c}


def most_tensor_parallel(vocab, s, b, h, a, L, dtype, ranks, budget):
    """Wrong: the largest TP degree, sequence parallel, whatever the sequence."""
    t = max(d for d in range(1, ranks + 1) if ranks % d == 0 and a % d == 0)
    return {"tp": t, "sp": True, "cp": ranks // t}


def cheapest_ignoring_budget(vocab, s, b, h, a, L, dtype, ranks, budget):
    """Wrong: the least bytes, the budget forgotten."""
    plans = [(float(from_the_formulas(vocab, s, b, h, a, L, dtype, *o)["sent"]), o)
             for o in P.options({"ranks": ranks, "a": a, "s": s})]
    t, sp, c = min(plans)[1]
    return {"tp": t, "sp": sp, "cp": c}


def test_right_parallel_plans_pass(capsys):
    P.parallel_plan(least_activations_then_bytes)
    out = capsys.readouterr().out
    assert out.count("✔ parallel_plan: passed") == 1 and "real workers" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (most_tensor_parallel, r"a rank (keeps .* over the budget|sends .* more than)"),
    (cheapest_ignoring_budget, r"over the budget .*Sequence parallelism cuts every activation"),
    (lambda *a: {"tp": 1, "sp": False, "cp": 3}, "tp · cp must be the"),
    (lambda *a: {"tp": 2, "sp": "yes", "cp": 1}, "say True or False"),
    (lambda *a: (2, True, 1), "the keys tp"),
])
def test_parallel_plan_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        P.parallel_plan(wrong)
