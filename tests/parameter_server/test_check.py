"""Lesson 07's checks pass right answers written in several styles and name the mistakes
learners make, inside real shard processes too."""
import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.check import parameter_server as C


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------------ task 1: the SSP gate

def gate_loop(clock, clocks, s):
    """Another right style: a loop for the slowest, a numpy bool back."""
    slowest = clocks[0]
    for c in clocks:
        slowest = min(slowest, c)
    return np.bool_(clock > slowest + s)


def test_right_gates_pass(solution, capsys):
    check.ssp_gate(solution("07_parameter_server", "my_ssp_gate"))
    check.ssp_gate(gate_loop)
    assert capsys.readouterr().out.count("✔ ssp_gate: passed") == 2


def sorts_in_place(clock, clocks, s):
    clocks.sort()
    return clock - clocks[0] > s


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda c, cs, s: c - min(cs) >= s, r"MORE than s ahead \(clock − slowest > s, not ≥ s\)"),
    (lambda c, cs, s: max(cs) - c > s, "compare with the SLOWEST replica, min"),
    (lambda c, cs, s: c - min(cs) > 0, "you ignore s"),
    (lambda c, cs, s: c - cs[0] > s, "not the first one listed"),
    (lambda c, cs, s: c - min(cs) > 2, "you use the bound s = 2 whatever s is given"),
    (lambda c, cs, s: max(cs) - min(cs) > s, "compare THIS replica's clock"),
    (lambda c, cs, s: c - min(cs) <= s, "the wrong way round"),
    (lambda c, cs, s: int(c - min(cs) > s), r"return True \(wait\) or False"),
    (lambda c, cs, s: None, "returned None"),
    (sorts_in_place, "changed its argument `clocks` in place"),
])
def test_gate_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.ssp_gate(wrong)


def test_gate_refuses_the_package_gate():
    from ddl_lab.parameter_server import rules

    def my_ssp_gate(clock, clocks, s):
        return rules._ssp_must_wait(clock, clocks, s)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.ssp_gate(my_ssp_gate)


def test_an_off_by_one_gate_is_also_caught_by_the_real_run(monkeypatch):
    monkeypatch.setattr(C, "_GATE_FIXED", [])
    monkeypatch.setattr(C, "_gate_draw", lambda rng: {"clock": 3, "clocks": [3, 1], "s": 0})
    with pytest.raises(CheckFailed, match="at most 1 clocks ahead .* exactly s = 2 ahead"):
        check.ssp_gate(lambda c, cs, s: c - min(cs) >= s)


# ------------------------------------------------------------------ task 2: Adagrad on a shard

def adagrad_in_place_eps_inside(theta, grad, G, lr, eps):
    """Another right style: in place, eps inside the root, a list back."""
    G += grad ** 2
    theta -= lr * grad / np.sqrt(G + eps)
    return [theta, G]


def adagrad_loop(theta, grad, G, lr, eps):
    """Another right style: element by element, new float lists turned into arrays."""
    new_t, new_G = [], []
    for t, g, acc in zip(theta, grad, G):
        acc = acc + g * g
        new_G.append(acc)
        new_t.append(t - lr * g / (acc ** 0.5 + eps))
    return np.array(new_t, dtype=theta.dtype), np.array(new_G, dtype=G.dtype)


def test_right_adagrad_handlers_pass(solution, capsys):
    check.adagrad_push(solution("07_parameter_server", "my_adagrad_push"))
    check.adagrad_push(adagrad_in_place_eps_inside)
    check.adagrad_push(adagrad_loop)
    assert capsys.readouterr().out.count("✔ adagrad_push: passed") == 3


def adagrad_fixed_eps(theta, grad, G, lr, eps):
    G = G + grad * grad
    return theta - lr * grad / (np.sqrt(G) + 1e-8), G


def adagrad_fixed_lr(theta, grad, G, lr, eps):
    G = G + grad * grad
    return theta - 0.1 * grad / (np.sqrt(G) + eps), G


def adagrad_scales_grad(theta, grad, G, lr, eps):
    grad *= lr                                   # "pre-scales" the replica's message
    G = G + (grad / lr) ** 2
    return theta - grad / (np.sqrt(G) + eps), G


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda t, g, G, lr, e: (t - lr * g / (np.sqrt(G + g) + e), G + g), "the SQUARED gradient"),
    (lambda t, g, G, lr, e: (t - lr * g / (np.abs(g) + e), g * g), "not just this one's g²"),
    (lambda t, g, G, lr, e: (t - lr * g / (G + g * g + e), G + g * g), "take the square root"),
    (lambda t, g, G, lr, e: (t - lr * g / (np.sqrt(G) + e), G + g * g), "the OLD G"),
    (lambda t, g, G, lr, e: (t - lr * g / np.sqrt(G + g * g), G + g * g), "add eps"),
    (lambda t, g, G, lr, e: t - lr * g / (np.sqrt(G + g * g) + e), "return a pair"),
    (lambda t, g, G, lr, e: (t + lr * g / (np.sqrt(G + g * g) + e), G + g * g), "uphill"),
    (lambda t, g, G, lr, e: (t - g / (np.sqrt(G + g * g) + e), G + g * g), "lr is missing"),
    (adagrad_fixed_eps, "another eps than the one passed in"),
    (adagrad_fixed_lr, "use the lr passed in"),
    (adagrad_scales_grad, "changed its argument `grad` in place"),
])
def test_adagrad_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.adagrad_push(wrong)


# ------------------------------------------------------------- task 3: the staleness-aware rate

def rate_numpy(lr, tau):
    """Another right style: numpy, no branch."""
    return np.float64(lr) / np.maximum(tau, 1)


def test_right_rates_pass(solution, capsys):
    check.staleness_lr(solution("07_parameter_server", "my_staleness_lr"))
    check.staleness_lr(rate_numpy)
    assert capsys.readouterr().out.count("✔ staleness_lr: passed") == 2


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda lr, t: lr / (t + 1), "divides by τ itself, not by τ \\+ 1"),
    (lambda lr, t: lr / t, "divided by zero: a fresh gradient has τ = 0"),
    (lambda lr, t: lr * max(t, 1), "must count LESS"),
    (lambda lr, t: lr / max(t, 1) ** 2, "not τ²"),
    (lambda lr, t: lr, "must shrink with the staleness"),
    (lambda lr, t: 0.5 / t if t else 0.5, "you use the rate 0.5 whatever lr is given"),
    (lambda lr, t: str(lr), "return a number"),
    (lambda lr, t: None, "returned None"),
])
def test_rate_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.staleness_lr(wrong)


def test_a_wrong_rate_is_also_caught_on_a_real_shard(monkeypatch):
    monkeypatch.setattr(C, "_RATE_FIXED", [])
    monkeypatch.setattr(C, "_rate_draw", lambda rng: {"lr": 0.5, "tau": 0})
    with pytest.raises(CheckFailed, match=r"on a real shard, the rates applied .* were "
                                          r"\[0.5, 0.25, 0.1667"):
        check.staleness_lr(lambda lr, t: lr / (t + 1))


@pytest.mark.parametrize("task, name", [("adagrad_push", "_adagrad_push"),
                                        ("staleness_lr", "_staleness_lr")])
def test_the_package_rules_are_refused(task, name):
    from ddl_lab.parameter_server import rules
    with pytest.raises(CheckFailed, match="package's own implementation"):
        getattr(check, task)(getattr(rules, name))


def test_same_verdict_twenty_times(solution, capsys):
    """The real runs (shard processes, a straggler) give the same verdict every time."""
    right = [solution("07_parameter_server", f"my_{task}")
             for task in ("ssp_gate", "adagrad_push", "staleness_lr")]
    verdicts = set()
    for _ in range(20):
        for task, fn in zip(("ssp_gate", "adagrad_push", "staleness_lr"), right):
            getattr(check, task)(fn)
        with pytest.raises(CheckFailed) as e:
            check.adagrad_push(adagrad_fixed_eps)
        verdicts.add(str(e.value))
    assert capsys.readouterr().out.count("passed") == 60 and len(verdicts) == 1
