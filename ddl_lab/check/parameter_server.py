"""Checks for lesson 07 (the parameter server): the SSP gate, a shard's Adagrad push
handler, and the staleness-aware learning rate. Each is first called here on seeded cases
that tell the usual mistakes apart (random clocks and bounds, learning rates, eps values,
slice sizes and staleness), then plugged into real shard processes. The reasoning task (the
worst staleness SSP admits) and the design task (a Downpour plan within a message budget)
live in ``_parameter_server_plans.py``; thin entry points here keep their records named."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._core import call_local, fail, passed, task
from ._diagnose import (AdagradWords, Case, Cases, Snapshot, adagrad, adagrad_diagnosis,
                        differs, returned_none)
from ._parameter_server_plans import REAL_TIMEOUT, real
from ._parameter_server_plans import downpour_plan
from ._parameter_server_plans import worst_staleness

__all__ = ["ssp_gate", "adagrad_push", "staleness_lr", "worst_staleness", "downpour_plan"]

_PACKAGE = "ddl_lab.parameter_server"


# ------------------------------------------------------------------ task 1: SSP gate

_GATE_FIXED = [
    {"clock": 3, "clocks": [3, 3, 3], "s": 0},         # BSP, everyone at the same clock
    {"clock": 4, "clocks": [4, 3, 4], "s": 0},         # BSP, one replica a clock behind
    {"clock": 5, "clocks": [5, 2, 4], "s": 3},         # exactly s ahead of the slowest
    {"clock": 6, "clocks": [6, 2, 4], "s": 3},         # s + 1 ahead
    {"clock": 2, "clocks": [7, 2, 5], "s": 3},         # the slowest replica itself
    {"clock": 9, "clocks": [9], "s": 1},               # the only replica
    {"clock": 10, "clocks": [10, 8, 3, 9], "s": 6},    # 7 ahead, the slowest not first
    {"clock": 10, "clocks": [9, 10, 4, 8], "s": 6},    # 6 ahead, s = 6
]


def _gate_draw(rng: np.random.Generator) -> dict[str, Any]:
    """A random replica set; the lead over the slowest is often exactly s or s + 1."""
    s = int(rng.integers(0, 6))
    others = [int(c) for c in rng.integers(0, 30, int(rng.integers(1, 6)))]
    lead = int(rng.choice([s, s + 1, int(rng.integers(0, s + 3))]))
    clock = min(others) + lead
    clocks = list(others)
    clocks.insert(int(rng.integers(0, len(others) + 1)), clock)
    return {"clock": clock, "clocks": clocks, "s": s}


def _gate_mistakes() -> dict[str, Callable[[int, list, int], bool]]:
    named = {
        "a replica exactly s clocks ahead may still go: it waits only when it is MORE than s "
        "ahead (clock − slowest > s, not ≥ s)": lambda c, cs, s: c - min(cs) >= s,
        "compare with the SLOWEST replica, min(clocks): the bound is on the lead over the one "
        "furthest behind": lambda c, cs, s: max(cs) - c > s,
        "you ignore s: with s > 0 a replica may run up to s clocks ahead (s = 0 is BSP)":
            lambda c, cs, s: c - min(cs) > 0,
        "compare with the slowest replica, not the average": lambda c, cs, s: c - np.mean(cs) > s,
        "compare with the slowest replica, min(clocks), not the first one listed":
            lambda c, cs, s: c - cs[0] > s,
        "compare THIS replica's clock (the first argument) with the slowest, not the fastest "
        "one's": lambda c, cs, s: max(cs) - min(cs) > s,
        "the verdict is the wrong way round: return True when the replica must WAIT":
            lambda c, cs, s: not c - min(cs) > s,
    }
    for k in range(6):
        named[f"you use the bound s = {k} whatever s is given: compare with the argument s"] = \
            (lambda k: lambda c, cs, s: c - min(cs) > k)(k)
    return named


def _ssp_max_lead(must_wait: Callable, s: int) -> int:
    from ddl_lab.parameter_server.downpour import digits_problem, run
    r = run(digits_problem(), replicas=3, shards=2, mode="ssp", s=s, slow=4.0, steps=40,
            batch=16, gate=must_wait, eval_every=0.2, timeout=REAL_TIMEOUT)
    return r.report.max_gap


@task("parameter_server", refuses=(_PACKAGE, "ssp_must_wait", "_ssp_must_wait"))
def ssp_gate(my_ssp_gate: Callable[[int, list, int], bool], seed: int = 0) -> None:
    """Lesson 07, task 1: ``my_ssp_gate(clock, clocks, s)`` is True exactly when a replica at
    ``clock`` is more than ``s`` clocks ahead of the slowest live replica."""
    __tracebackhide__ = True
    name = getattr(my_ssp_gate, "__name__", "your function")
    cases = list(Cases("ssp_gate", seed, _GATE_FIXED, draws=10, draw=_gate_draw))
    for case in cases:
        clock, clocks, s = case.params["clock"], case.params["clocks"], case.params["s"]
        given = list(clocks)
        snap = Snapshot(clocks=given)
        got = call_local(my_ssp_gate, clock, given, s)
        call = f"{name}({clock}, {clocks}, s={s})"
        if not isinstance(got, (bool, np.bool_)):
            fail(returned_none(got, name, "True (wait) or False (go)") or
                 f"{call} returned {got!r} ({type(got).__name__}); return True (wait) or "
                 "False (go).")
        changed = snap.changed(name)
        if changed:
            fail(f"{changed} ({case}) The shard keeps using its list of clocks: use min(clocks) "
                 "or sorted(clocks), which leave it alone.")
        want = clock - min(clocks) > s
        if bool(got) == want:
            continue
        hint = next((h for h, wrong in _gate_mistakes().items()
                     if all(bool(wrong(c["clock"], list(c["clocks"]), c["s"])) ==
                            bool(call_local(my_ssp_gate, c["clock"], list(c["clocks"]), c["s"]))
                            for c in (k.params for k in cases))), "")
        fail(f"{call} returned {bool(got)}, expected {want}: this replica is "
             f"{clock - min(clocks)} clock(s) ahead of the slowest ({case})."
             + (f" Hint: {hint}." if hint else ""))
    lead = real(_ssp_max_lead, my_ssp_gate, 2)
    if lead != 2:
        fail(f"in a real SSP run with s = 2 and a replica 4× slower, the fastest replica was "
             f"at most {lead} clocks ahead of the slowest when its pull went through; SSP "
             "lets it get exactly s = 2 ahead.")
    passed("ssp_gate", f"the gate is right on {len(cases)} cases (1–6 replicas, s = 0 to 5, "
           "leads of exactly s and s + 1); in a real SSP(s=2) run with a 4× straggler, the "
           "shards let the fast replicas lead by exactly 2 clocks, never 3")


# ------------------------------------------------------------------ task 2: Adagrad on a shard

def _adagrad_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"size": int(rng.choice([1, 2, 5, 7, 12])),
            "lr": round(float(10 ** rng.uniform(-2, 0)), 4),
            "eps": float(10 ** rng.uniform(-6, -1)), "dtype": "float64"}


def _adagrad_inputs(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """θ, g and G for a case: g has zeros (coordinates not pushed this time), G has zeros
    (coordinates never pushed), and nothing is 1."""
    p, rng = case.params, case.rng
    if "g" in p:
        theta, g, G = rng.normal(size=len(p["g"])), np.array(p["g"]), np.array(p["G"])
    else:
        k = p["size"]
        theta = rng.normal(size=k) * 2
        g = rng.normal(size=k) * 3 * (rng.random(k) > 0.2)
        G = np.abs(rng.normal(size=k)) * 5 * (rng.random(k) > 0.3)
    dtype = np.dtype(p["dtype"])
    return theta.astype(dtype), g.astype(dtype), G.astype(dtype)


class _Pair:
    """The learner's handler with a list answer [θ, G] handed to the shard as a tuple (the
    spec asks for a pair; the shard insists on a tuple)."""

    def __init__(self, fn: Callable):
        self.fn, self.__name__ = fn, getattr(fn, "__name__", "push")

    def __call__(self, *args: Any) -> Any:
        out = self.fn(*args)
        return tuple(out) if isinstance(out, list) else out


def _adagrad_on_shards(adagrad_push: Callable, lr: float, eps: float
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Two replicas (this process) push 6 gradients each to 2 real shards running the
    learner's handler; returns (θ got, θ expected, G got, G expected)."""
    from ddl_lab.parameter_server.server import ParameterServer
    rng = np.random.default_rng(7)
    theta0 = rng.normal(size=11)
    grads = [rng.normal(size=11) * rng.integers(0, 2, size=11) for _ in range(12)]
    want, G = theta0.copy(), np.zeros(11)
    for g in grads:
        want, G = adagrad(want, g, G, lr, eps)
    with ParameterServer(theta0, shards=2, rule="adagrad", lr=lr, eps=eps,
                         push=_Pair(adagrad_push), timeout=REAL_TIMEOUT) as ps:
        a, b = ps.connect("replica 0"), ps.connect("replica 1")
        for k, g in enumerate(grads):
            client = a if k % 2 == 0 else b
            client.push(g, client.snapshot()[1])
            client.snapshot()           # same connection: the push has been applied
        got, _ = a.snapshot()
        report = ps.finish()
    return got, want, np.concatenate([s["G"] for s in report.shards]), G


@task("parameter_server", refuses=(_PACKAGE, "adagrad_push", "_adagrad_push"))
def adagrad_push(my_adagrad_push: Callable, seed: int = 0) -> None:
    """Lesson 07, task 2: ``my_adagrad_push(theta, grad, G, lr, eps)`` returns (θ', G') with
    G' = G + g² and θ' = θ − lr·g/(√G' + eps), for the shard's slice (θ and G may be
    updated in place)."""
    __tracebackhide__ = True
    name = getattr(my_adagrad_push, "__name__", "your function")
    words = AdagradWords(name=name, unit="coordinate",
                         unseen="a coordinate no replica has pushed yet", steps="pushes",
                         pair="the shard keeps both for the next push")
    cases = list(Cases("adagrad_push", seed, [
        {"g": [0.5, -2.0, 0.01, 0.0, -0.3, 0.0], "G": [4.0, 1.0, 0.0, 2.0, 0.0, 0.0],
         "lr": 0.1, "eps": 1e-8, "dtype": "float64"},
        {"size": 9, "lr": 0.3, "eps": 1e-3, "dtype": "float32"}], draws=4, draw=_adagrad_draw))
    for case in cases:
        theta, g, G = _adagrad_inputs(case)
        lr, eps = case.params["lr"], case.params["eps"]
        given = (theta.copy(), g.copy(), G.copy())
        snap = Snapshot(grad=given[1])
        with np.errstate(all="ignore"):
            got = call_local(my_adagrad_push, *given, lr, eps)
        message = adagrad_diagnosis(got, theta, g, G, lr, eps, words)
        if message:
            fail(f"{message} ({case})")
        changed = snap.changed(name)
        if changed:
            fail(f"{changed} ({case}) Only θ and G belong to the shard; the gradient is the "
                 "replica's message.")
    got, want, got_G, want_G = real(_adagrad_on_shards, my_adagrad_push,
                                     cases[-1].params["lr"], 1e-8)
    diff = differs(want_G, got_G)
    if diff:
        fail(f"after 12 pushes from 2 replicas, the shards' G: {diff}. G must carry over from "
             "push to push (return the updated G).")
    diff = differs(want, got, rtol=1e-6)
    if diff:
        fail(f"after 12 pushes from 2 replicas to 2 real shards, θ: {diff}. Each shard must "
             "keep its own θ and G between pushes: return both.")
    passed("adagrad_push", f"right on {len(cases)} pushes (slices of 1 to 12 coordinates, "
           "float32 and float64, random lr and eps), and inside 2 real shard processes: after "
           "12 pushes from 2 replicas, θ and every shard's G match Adagrad's")


# ------------------------------------------------------------------ task 3: staleness-aware rate

def _rate_mistakes(cases: list[dict]) -> dict[str, Callable[[float, int], float]]:
    fixed = sorted({c["lr"] for c in cases})
    named = {
        "the lesson divides by τ itself, not by τ + 1: a gradient 1 update old keeps lr, one 4 "
        "updates old gets lr/4": lambda lr, t: lr / (t + 1),
        "divide the rate by the staleness (lr/τ): a stale gradient must count LESS":
            lambda lr, t: lr * max(t, 1),
        "divide by τ, not τ²": lambda lr, t: lr / max(t, 1) ** 2,
        "divide by τ, not √τ": lambda lr, t: lr / max(t, 1) ** 0.5,
        "the rate must shrink with the staleness: lr/τ for τ ≥ 1": lambda lr, t: lr,
    }
    for c in (0.1, 0.01, 0.05, 0.5, 1.0, *fixed):
        named[f"you use the rate {c:g} whatever lr is given: divide the lr argument by τ"] = \
            (lambda c: lambda lr, t: c / t if t else c)(c)
    return named


_RATE_FIXED = [{"lr": 0.5, "tau": t} for t in (0, 1, 2, 4, 32)]


def _rate_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"lr": round(float(10 ** rng.uniform(-2.5, 0.3)), 4),
            "tau": int(rng.choice([0, 1, 2, 3, 5, 7, 16, 32, int(rng.integers(2, 1000))]))}


def _rates_on_a_shard(staleness_lr: Callable, lr: float) -> tuple[np.ndarray, np.ndarray,
                                                                    np.ndarray, np.ndarray]:
    """One replica (this process) reads θ once and pushes 6 gradients against that version
    (staleness 0..5) to a real shard using the learner's rate."""
    from ddl_lab.parameter_server.server import ParameterServer
    rng = np.random.default_rng(5)
    theta0, grads = rng.normal(size=5), rng.normal(size=(6, 5))
    with ParameterServer(theta0, shards=1, rule="sgd", lr=lr, staleness_aware=True,
                         rate=staleness_lr, timeout=REAL_TIMEOUT) as ps:
        client = ps.connect("replica 0")
        versions = client.snapshot()[1]
        for g in grads:
            client.push(g, versions)
        got, _ = client.snapshot()
        report = ps.finish()
    rates = np.array([lr / t if t else lr for t in range(6)])
    return got, theta0 - rates @ grads, report.shards[0]["lr"], rates


@task("parameter_server", refuses=(_PACKAGE, "staleness_lr", "_staleness_lr"))
def staleness_lr(my_staleness_lr: Callable[[float, int], float], seed: int = 0) -> None:
    """Lesson 07, task 3: ``my_staleness_lr(lr, tau)`` is lr/τ for a gradient τ ≥ 1 updates
    stale and lr for a fresh one (τ = 0)."""
    __tracebackhide__ = True
    name = getattr(my_staleness_lr, "__name__", "your function")
    cases = list(Cases("staleness_lr", seed, _RATE_FIXED, draws=8, draw=_rate_draw))
    params = [c.params for c in cases]
    for case in cases:
        lr, tau = case.params["lr"], case.params["tau"]
        call = f"{name}({lr:g}, {tau})"
        try:
            got = my_staleness_lr(lr, tau)
        except ZeroDivisionError:
            fail(f"{call} divided by zero: a fresh gradient has τ = 0 and keeps the full "
                 f"rate lr ({case}).")
        except Exception:
            got = call_local(my_staleness_lr, lr, tau)
        if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, float, np.number)):
            fail(returned_none(got, name, "the rate, a number") or
                 f"{call} returned {got!r} ({type(got).__name__}); return a number.")
        want = lr / tau if tau else lr
        if np.isclose(float(got), want, rtol=1e-9, atol=0):
            continue
        hint = next((h for h, wrong in _rate_mistakes(params).items()
                     if all(np.isclose(float(call_local(my_staleness_lr, p["lr"], p["tau"])),
                                       wrong(p["lr"], p["tau"]), rtol=1e-9, atol=1e-15)
                            for p in params)), "")
        fail(f"{call} returned {float(got):.6g}, expected {want:.6g} ({case})"
             + (f". Hint: {hint}." if hint else "."))
    lr = cases[-1].params["lr"]
    got, want, used, rates = real(_rates_on_a_shard, my_staleness_lr, lr)
    if differs(rates, used) is not None or differs(want, got) is not None:
        fail(f"on a real shard, the rates applied to gradients of staleness 0..5 were "
             f"{np.round(used, 4).tolist()}, expected {np.round(rates, 4).tolist()}.")
    passed("staleness_lr", f"lr/τ (lr when fresh) on {len(cases)} cases (random lr, τ = 0 to "
           f"999); a real shard applied {np.round(used, 3).tolist()} to gradients 0, 1, …, 5 "
           "updates stale")


# ------------------------------------------------------------------ reasoning and design

