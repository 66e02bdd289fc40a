"""Lesson 08's reasoning and design checks: the bytes of a Strom message (the lesson's encoder
agrees) and a threshold τ chosen from a sample gradient, trained on 4 real workers at several
gradient scales. Right answers in several styles pass; the usual slips are named."""
import math

import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.check.compression import sample_gradient
from tests.learner_types import STYLES, in_learner_types

STEM = "08_compression"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------------ the size of a message

def bytes_by_encoding(d, k):
    """Another right style: encode the count and every delta, and count the bytes."""
    def varint(v):
        out = bytearray()
        while v >= 0x80:
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        out.append(v)
        return bytes(out)
    positions = [i * (d // k) for i in range(k)]
    deltas = [b - a for a, b in zip([0] + positions, positions)]
    return np.int64(len(varint(k)) + math.ceil(k / 8) + sum(len(varint(g)) for g in deltas))


def varint_len(v):
    return max(1, math.ceil(v.bit_length() / 7))


def message(d, k, length=varint_len, signs=lambda k: math.ceil(k / 8), first=True):
    return (length(k) + signs(k) + (length(0) if first else length(d // k))
            + (k - 1) * length(d // k))


def test_right_strom_bytes_pass(solution, capsys):
    check.strom_bytes(bytes_by_encoding)
    check.strom_bytes(lambda d, k: float(message(d, k)))
    out = capsys.readouterr().out
    assert out.count("✔ strom_bytes: passed") == 2
    assert "sends 96 bytes for 45" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda d, k: varint_len(k) + math.ceil(k / 8) + sum(varint_len(i * (d // k))
                                                         for i in range(k)), "the GAPS"),
    (lambda d, k: varint_len(k) + math.ceil(k / 8) + 4 * k, "4 bytes per index"),
    (lambda d, k: message(d, k, signs=lambda k: k), "one byte per sign"),
    (lambda d, k: message(d, k) - varint_len(k), "the count is missing"),
    (lambda d, k: message(d, k, first=False), "the first index is sent as itself"),
    (lambda d, k: message(d, k, length=lambda v: v.bit_length() // 7 + 1),
     "values up to 127 take one byte"),
    (lambda d, k: message(d, k, signs=lambda k: k / 8), "round the sign bits up"),
    (lambda d, k: str(message(d, k)), "return a number of bytes"),
])
def test_strom_bytes_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.strom_bytes(wrong)


# ------------------------------------------------------------------ choosing τ

def plan_from_the_largest_entry(sample_grad):
    """Another right style: τ as a share of the largest entry, numpy in, a numpy float out."""
    g = sample_grad.numpy()
    return {"tau": np.float32(0.65 * np.abs(g).max()), "error_feedback": True}


def test_right_strom_plans_pass(solution, capsys):
    check.strom_plan(plan_from_the_largest_entry)
    out = capsys.readouterr().out
    assert out.count("✔ strom_plan: passed") == 1
    assert "less than fp32's 35,880" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda g: {"tau": 0.1, "error_feedback": True}, "did not grow with the gradients"),
    (lambda g: {"tau": 25 * float(g.pow(2).mean().sqrt()), "error_feedback": False},
     "Without error feedback"),
    (lambda g: {"tau": float(g.abs().quantile(0.99)), "error_feedback": True},
     "less than 99 % saved, so τ is too small"),
    (lambda g: {"tau": -1.0, "error_feedback": True}, "τ is a positive number"),
    (lambda g: 0.1, "return a dict with the keys tau and error_feedback"),
])
def test_strom_plan_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.strom_plan(wrong)


def test_a_table_of_the_prompts_scales_is_named():
    """Issue 26: a plan looked up by the prompt's scales (1 and 16) fails at a scale the
    check draws, saying τ must be a function of the sample gradient."""
    base = float(sample_gradient().abs().max())

    def plan_by_scale(g):
        scale = {1: 1.0, 16: 16.0}[round(float(g.abs().max()) / base)]
        return {"tau": 0.1 * scale, "error_feedback": True}
    with pytest.raises(CheckFailed, match=r"a scale the prompt does not name\) plan_by_scale "
                                          r"raised KeyError.* τ must be a function of the sample"):
        check.strom_plan(plan_by_scale)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task", ["strom_bytes", "strom_plan"])
def test_solutions_in_learner_number_types_pass(task, style, solution, capsys):
    """Issue 26's rule for numbers: float32 (a byte count as 96.0, τ as np.float32) and numpy
    results pass."""
    getattr(check, task)(in_learner_types(solution(STEM, f"my_{task}"), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
