"""Lesson 07's checks pass right answers written in several styles and name the mistakes
learners make, inside real shard processes too."""
import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.check import parameter_server as C
from tests.learner_types import STYLES, in_learner_types


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
    check.ssp_gate(gate_loop)
    assert capsys.readouterr().out.count("✔ ssp_gate: passed") == 1


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


# ------------------------------------------------------------- task 1: the staleness-aware rate

def rate_numpy(lr, tau):
    """Another right style: numpy, no branch."""
    return np.float64(lr) / np.maximum(tau, 1)


def rate_float32(lr, tau):
    """Another right style (issue 26): the rate as a numpy float32, compared at float32's
    tolerance, not 1e-9."""
    return np.float32(lr) / np.float32(max(tau, 1))


def test_right_rates_pass(solution, capsys):
    check.staleness_lr(rate_numpy)
    check.staleness_lr(rate_float32)
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


# ------------------------------------------------------------- task 2: a shard restarts

STEM = "07_parameter_server"


def restore_in_place_eps_inside(checkpoint, log, lr, eps, rate):
    """Another right style: copies updated in place, eps inside the root, a list back, and
    the version taken from the last record."""
    theta, G = np.array(checkpoint["theta"]), np.array(checkpoint["G"])
    todo = [p for p in log if p["applied"] >= checkpoint["version"]]
    for p in todo:
        G += p["grad"] ** 2
        theta -= rate(lr, p["applied"] - p["read"]) * p["grad"] / np.sqrt(G + eps)
    return [theta, G, log[-1]["applied"] + 1]


def restore_float32_torch(checkpoint, log, lr, eps, rate):
    """Another right style: the shard keeps its state in float32 torch tensors (issue 26:
    "element 0 is 3.25893, expected 3.25893" must pass)."""
    import torch
    theta = torch.tensor(checkpoint["theta"], dtype=torch.float32)
    G = torch.tensor(checkpoint["G"], dtype=torch.float32)
    version = checkpoint["version"]
    for p in sorted(log, key=lambda p: p["applied"]):
        if p["applied"] >= version:
            g = torch.tensor(p["grad"], dtype=torch.float32)
            G = G + g * g
            theta = theta - rate(lr, p["applied"] - p["read"]) * g / (G.sqrt() + eps)
            version = p["applied"] + 1
    return theta, G, version


def test_right_restores_pass(solution, capsys):
    check.restore_shard(restore_in_place_eps_inside)
    check.restore_shard(restore_float32_torch)
    out = capsys.readouterr().out
    assert out.count("✔ restore_shard: passed") == 2
    assert "restored from its checkpoint at version 14 to version 24" in out


def _replay(checkpoint, records, lr, eps, rate, G=None, tau=None, version=None):
    """What a learner's restore returns when it replays ``records`` (a copy of the checkpoint,
    or ``G`` as the accumulators); ``tau(p)`` the staleness it uses."""
    theta = checkpoint["theta"].copy()
    G = checkpoint["G"].copy() if G is None else G
    for p in records:
        G = G + p["grad"] ** 2
        t = p["applied"] - p["read"] if tau is None else tau(p)
        theta = theta - rate(lr, t) * p["grad"] / (np.sqrt(G) + eps)
    n = checkpoint["version"] + len(records) if version is None else version
    return theta, G, n


def after(checkpoint, log):
    return [p for p in log if p["applied"] >= checkpoint["version"]]


def restarts_accumulators(c, log, lr, eps, rate):
    return _replay(c, after(c, log), lr, eps, rate, G=np.zeros_like(c["G"]))


def applies_twice(c, log, lr, eps, rate):
    return _replay(c, log, lr, eps, rate)


def chooses_by_read(c, log, lr, eps, rate):
    chosen = [p for p in log if p["read"] >= c["version"]]
    return _replay(c, chosen, lr, eps, rate, version=log[-1]["applied"] + 1)


def off_by_one(c, log, lr, eps, rate):
    return _replay(c, [p for p in log if p["applied"] > c["version"]], lr, eps, rate,
                   version=log[-1]["applied"] + 1)


def ignores_staleness(c, log, lr, eps, rate):
    return _replay(c, after(c, log), lr, eps, rate, tau=lambda p: 0)


def by_position(c, log, lr, eps, rate):
    return _replay(c, log[c["version"]:], lr, eps, rate, version=log[-1]["applied"] + 1)


def keeps_the_version(c, log, lr, eps, rate):
    return _replay(c, after(c, log), lr, eps, rate)[:2] + (c["version"],)


def counts_every_record(c, log, lr, eps, rate):
    return _replay(c, after(c, log), lr, eps, rate)[:2] + (c["version"] + len(log),)


def updates_the_checkpoint(c, log, lr, eps, rate):
    theta, G = c["theta"], c["G"]                   # no copy: the checkpoint itself
    for p in after(c, log):
        G += p["grad"] ** 2
        theta -= rate(lr, p["applied"] - p["read"]) * p["grad"] / (np.sqrt(G) + eps)
    return theta, G, log[-1]["applied"] + 1


def plain_sgd(c, log, lr, eps, rate):
    theta = c["theta"].copy()
    for p in after(c, log):
        theta = theta - rate(lr, p["applied"] - p["read"]) * p["grad"]
    return theta, c["G"].copy(), log[-1]["applied"] + 1


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (restarts_accumulators, "accumulators G restarted from zero"),
    (applies_twice, "applying it twice counts it twice"),
    (chooses_by_read, "chose the pushes by the version they were computed on"),
    (off_by_one, r"the push applied at version \d+ itself is missing"),
    (ignores_staleness, "each push got the full rate lr: the shard is staleness-aware"),
    (by_position, "picked records by their position in the list"),
    (lambda c, log, lr, eps, rate: (c["theta"].copy(), c["G"].copy(), c["version"]),
     "nothing was replayed"),
    (keeps_the_version, "that is the checkpoint's version"),
    (counts_every_record, "already in it included"),
    (updates_the_checkpoint, "changed the checkpoint's theta in place"),
    (plain_sgd, "the shard's rule is Adagrad"),
    (lambda c, log, lr, eps, rate: (c["theta"], c["G"]), "return the triple"),
    (lambda c, log, lr, eps, rate: None, "returned None"),
])
def test_restore_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.restore_shard(wrong)


# ------------------------------------------------------------- every check

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task", ["ssp_gate", "staleness_lr", "restore_shard"])
def test_solutions_in_learner_number_types_pass(task, style, solution, capsys):
    """Issue 26's rule for numbers: float32 and numpy results pass (the gate returns a bool,
    left alone by either style)."""
    getattr(check, task)(in_learner_types(solution(STEM, f"my_{task}"), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out


def test_same_verdict_five_times(solution, capsys):
    """The real runs (shard processes, a straggler, a restarted shard) give the same verdict
    every time."""
    tasks = ("ssp_gate", "staleness_lr", "restore_shard")
    right = [solution(STEM, f"my_{task}") for task in tasks]
    verdicts = set()
    for _ in range(5):
        for task, fn in zip(tasks, right):
            getattr(check, task)(fn)
        with pytest.raises(CheckFailed) as e:
            check.restore_shard(chooses_by_read)
        verdicts.add(str(e.value))
    assert capsys.readouterr().out.count("passed") == 15 and len(verdicts) == 1
