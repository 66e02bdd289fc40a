"""Lesson 07's checks accept the solutions and reject the stub and plausible mistakes."""
import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.check import parameter_server as C


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# task 1: the SSP gate
def must_wait(clock, clocks, s):
    return clock - min(clocks) > s


def test_gate_solution_passes(capsys):
    check.ps_ssp_gate(must_wait)
    assert "✔ ps_ssp_gate: passed" in capsys.readouterr().out


def test_gate_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.ps_ssp_gate(stub)


@pytest.mark.parametrize("wrong, hint", [
    (lambda c, cs, s: c - min(cs) >= s, r"MORE than s ahead \(clock − slowest > s, not ≥ s\)"),
    (lambda c, cs, s: max(cs) - c > s, "compare with the SLOWEST replica, min"),
    (lambda c, cs, s: c - min(cs) > 0, "you ignore s"),
    (lambda c, cs, s: c - cs[0] > s, r"must_wait\(4, \[4, 3, 4\], s=0\) returned False"),
    (lambda c, cs, s: c - min(cs) <= s, "the wrong way round"),
    (lambda c, cs, s: int(c - min(cs) > s), "return True \\(wait\\) or False"),
])
def test_gate_mistakes_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.ps_ssp_gate(wrong)


def test_an_off_by_one_gate_is_also_caught_by_the_real_run(monkeypatch):
    monkeypatch.setattr(C, "_GATE_CASES", [])
    with pytest.raises(CheckFailed, match="at most 1 clocks ahead .* exactly s = 2 ahead"):
        check.ps_ssp_gate(lambda c, cs, s: c - min(cs) >= s)


# task 2: Adagrad on a shard
def adagrad_push(theta, grad, G, lr, eps):
    G = G + grad * grad
    return theta - lr * grad / (np.sqrt(G) + eps), G


def test_adagrad_solution_passes(capsys):
    check.ps_adagrad_push(adagrad_push)
    assert "✔ ps_adagrad_push: passed" in capsys.readouterr().out


def test_adagrad_in_place_solution_with_eps_inside_the_root_passes(capsys):
    def in_place(theta, grad, G, lr, eps):
        G += grad ** 2
        theta -= lr * grad / np.sqrt(G + eps)
        return theta, G
    check.ps_adagrad_push(in_place)
    assert "passed" in capsys.readouterr().out


def test_adagrad_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.ps_adagrad_push(stub)


@pytest.mark.parametrize("wrong, hint", [
    (lambda t, g, G, lr, e: (t - lr * g / (np.sqrt(G + g) + e), G + g), "the SQUARED gradient"),
    (lambda t, g, G, lr, e: (t - lr * g / (np.abs(g) + e), g * g), "not just this push's g²"),
    (lambda t, g, G, lr, e: (t - lr * g / (G + g * g + e), G + g * g), "not by G' \\+ eps"),
    (lambda t, g, G, lr, e: (t - lr * g / (np.sqrt(G) + e), G + g * g), "use the NEW G"),
    (lambda t, g, G, lr, e: (t - lr * g / np.sqrt(G + g * g), G + g * g), "add eps"),
    (lambda t, g, G, lr, e: t - lr * g / (np.sqrt(G + g * g) + e), "return the pair"),
    (lambda t, g, G, lr, e: (t + lr * g / (np.sqrt(G + g * g) + e), G + g * g), "subtract"),
])
def test_adagrad_mistakes_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.ps_adagrad_push(wrong)


# task 3: the staleness-aware rate
def staleness_lr(lr, tau):
    return lr / tau if tau > 0 else lr


def test_rate_solution_passes(capsys):
    check.ps_staleness_lr(staleness_lr)
    assert "✔ ps_staleness_lr: passed" in capsys.readouterr().out


def test_rate_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.ps_staleness_lr(stub)


@pytest.mark.parametrize("wrong, hint", [
    (lambda lr, t: lr / (t + 1), "divides by τ itself, not by τ \\+ 1"),
    (lambda lr, t: lr / t, "divided by zero: a fresh gradient has τ = 0"),
    (lambda lr, t: lr * max(t, 1), "must count LESS"),
    (lambda lr, t: lr / max(t, 1) ** 2, "not τ²"),
    (lambda lr, t: lr, "must shrink with the staleness"),
    (lambda lr, t: str(lr), "return a number"),
])
def test_rate_mistakes_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.ps_staleness_lr(wrong)


def test_a_wrong_rate_is_also_caught_on_a_real_shard(monkeypatch):
    monkeypatch.setattr(C, "_RATE_CASES", ())
    with pytest.raises(CheckFailed, match=r"on a real shard, the rates applied .* were "
                                          r"\[0.5, 0.25, 0.1667"):
        check.ps_staleness_lr(lambda lr, t: lr / (t + 1))
