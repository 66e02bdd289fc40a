"""Checks for lesson 07 (the parameter server): the SSP gate, a shard's Adagrad push
handler, and the staleness-aware learning rate. Each is first called here on cases that
tell the usual mistakes apart, then plugged into real shard processes."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._core import call_local, fail, first_difference, passed

__all__ = ["ps_ssp_gate", "ps_adagrad_push", "ps_staleness_lr"]


def _real(what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run a real experiment; its failures become CheckFailed naming ``what``."""
    __tracebackhide__ = True
    from ddl_lab.parameter_server.server import ParameterServerError
    try:
        return fn(*args, **kwargs)
    except (ParameterServerError, TimeoutError) as e:
        text = str(e)
        if "NotImplementedError" in text:
            fail(f"{what} is not implemented yet: replace the `raise NotImplementedError` "
                 "line with your code, run that cell, then run this check again.")
        head = text.strip().splitlines()[0]
        last = text.strip().splitlines()[-1]
        fail(f"{what} failed inside a shard process: {head}"
             + (f"\n  {last}" if last != head else ""))


# ------------------------------------------------------------------ task 1: SSP gate

_GATE_CASES = [  # (clock, clocks of the live replicas, s, must wait?, what the case is)
    (3, [3, 3, 3], 0, False, "BSP (s = 0), everyone at the same clock"),
    (4, [4, 3, 4], 0, True, "BSP (s = 0), one replica still one clock behind"),
    (5, [5, 2, 4], 3, False, "exactly s = 3 clocks ahead of the slowest"),
    (6, [6, 2, 4], 3, True, "s + 1 = 4 clocks ahead of the slowest"),
    (2, [7, 2, 5], 3, False, "the slowest replica itself"),
    (9, [9], 1, False, "the only replica"),
    (10, [10, 8, 3, 9], 6, True, "7 ahead of the slowest, which is not listed first"),
    (10, [9, 10, 4, 8], 6, False, "6 ahead of the slowest, with s = 6"),
]

_GATE_MISTAKES = {
    "a replica exactly s clocks ahead may still go: it waits only when it is MORE than s "
    "ahead (clock − slowest > s, not ≥ s)": lambda c, cs, s: c - min(cs) >= s,
    "compare with the SLOWEST replica, min(clocks): the bound is on the lead over the one "
    "furthest behind": lambda c, cs, s: max(cs) - c > s,
    "you ignore s: with s > 0 a replica may run up to s clocks ahead (s = 0 is BSP)":
        lambda c, cs, s: c - min(cs) > 0,
    "compare with the slowest replica, not the average": lambda c, cs, s: c - np.mean(cs) > s,
    "the verdict is the wrong way round: return True when the replica must WAIT":
        lambda c, cs, s: not c - min(cs) > s,
}


def _ssp_max_lead(must_wait: Callable, s: int) -> tuple[int, Any]:
    from ddl_lab.parameter_server.downpour import digits_problem, run
    r = run(digits_problem(), replicas=3, shards=2, mode="ssp", s=s, slow=4.0, steps=40,
            batch=16, gate=must_wait, eval_every=0.2, timeout=15.0)
    return r.report.max_gap, r


def ps_ssp_gate(must_wait: Callable[[int, list, int], bool]) -> None:
    """Lesson 07, task 1: ``must_wait(clock, clocks, s)`` is True exactly when a replica at
    ``clock`` is more than ``s`` clocks ahead of the slowest live replica."""
    __tracebackhide__ = True
    for clock, clocks, s, want, case in _GATE_CASES:
        got = call_local(must_wait, clock, list(clocks), s)
        if not isinstance(got, (bool, np.bool_)):
            fail(f"must_wait({clock}, {clocks}, s={s}) returned {got!r} "
                 f"({type(got).__name__}); return True (wait) or False (go).")
        if bool(got) == want:
            continue
        hint = next((h for h, wrong in _GATE_MISTAKES.items()
                     if all(bool(wrong(c, cs, ss)) == bool(call_local(must_wait, c, list(cs), ss))
                            for c, cs, ss, _, _ in _GATE_CASES)), "")
        fail(f"must_wait({clock}, {clocks}, s={s}) returned {got}, expected {want} "
             f"({case})." + (f" Hint: {hint}." if hint else ""))
    lead, _ = _real("must_wait", _ssp_max_lead, must_wait, 2)
    if lead != 2:
        fail(f"in a real SSP run with s = 2 and a replica 4× slower, the fastest replica was "
             f"at most {lead} clocks ahead of the slowest when its pull went through; SSP "
             "lets it get exactly s = 2 ahead.")
    passed("ps_ssp_gate", "the gate is right on 8 cases; in a real SSP(s=2) run with a 4× "
           "straggler, the shards let the fast replicas lead by exactly 2 clocks, never 3")


# ------------------------------------------------------------------ task 2: Adagrad on a shard

def _adagrad_ref(theta: np.ndarray, grad: np.ndarray, G: np.ndarray, lr: float,
                 eps: float, inside: bool = False) -> tuple[np.ndarray, np.ndarray]:
    G = G + grad * grad
    denom = np.sqrt(G + eps) if inside else np.sqrt(G) + eps
    return theta - lr * grad / denom, G


def _as_pair(res: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(res, tuple) or len(res) != 2:
        fail(f"{name} returned {type(res).__name__}; return the pair (theta, G): the shard "
             "keeps both for the next push.")
    try:
        return np.asarray(res[0], dtype=float), np.asarray(res[1], dtype=float)
    except (TypeError, ValueError):
        fail(f"{name} returned ({type(res[0]).__name__}, {type(res[1]).__name__}); return "
             "two numpy arrays.")


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
        want, G = _adagrad_ref(want, g, G, lr, eps)
    with ParameterServer(theta0, shards=2, rule="adagrad", lr=lr, eps=eps,
                         push=adagrad_push, timeout=10.0) as ps:
        a, b = ps.connect("replica 0"), ps.connect("replica 1")
        for k, g in enumerate(grads):
            client = a if k % 2 == 0 else b
            client.push(g, client.snapshot()[1])
            client.snapshot()           # same connection: the push has been applied
        got, _ = a.snapshot()
        report = ps.finish()
    return got, want, np.concatenate([s["G"] for s in report.shards]), G


def ps_adagrad_push(adagrad_push: Callable, lr: float = 0.1, eps: float = 1e-8) -> None:
    """Lesson 07, task 2: ``adagrad_push(theta, grad, G, lr, eps)`` returns (θ', G') with
    G' = G + g² and θ' = θ − lr·g/(√G' + eps), for the shard's slice."""
    __tracebackhide__ = True
    rng = np.random.default_rng(3)
    theta = rng.normal(size=6)
    g = np.array([0.5, -2.0, 0.01, 0.0, -0.3, 0.0])      # coordinate 3: no gradient this time
    G = np.array([4.0, 1.0, 0.0, 2.0, 0.0, 0.0])        # coordinates 2, 4, 5: never seen
    with np.errstate(all="ignore"):
        got_t, got_G = _as_pair(call_local(adagrad_push, theta.copy(), g.copy(), G.copy(),
                                           lr, eps), "adagrad_push")
    want_t, want_G = _adagrad_ref(theta, g, G, lr, eps)
    if got_t.shape != theta.shape or got_G.shape != G.shape:
        fail(f"adagrad_push returned θ of shape {got_t.shape} and G of shape {got_G.shape}; "
             f"both keep the slice's shape {theta.shape}.")
    if first_difference(want_G, got_G) is not None:
        hint = ("accumulate the SQUARED gradient: G + g², not G + g (a negative g would "
                "make √G undefined)" if first_difference(G + g, got_G) is None else
                "G accumulates over all pushes: G + g², not just this push's g²"
                if first_difference(g * g, got_G) is None else
                "that is the old G: add g² to it" if first_difference(G, got_G) is None
                else "G' = G + g², element by element")
        fail(f"the new G: {first_difference(want_G, got_G)} — {hint}.")
    if not np.all(np.isfinite(got_t)):
        bad = int(np.flatnonzero(~np.isfinite(got_t))[0])
        fail(f"θ[{bad}] became {got_t[bad]} where G = {G[bad]} and g = {g[bad]}: a coordinate "
             "no replica has pushed yet has √G = 0 and 0/0 is nan — add eps to the "
             "denominator (√G + eps).")
    inside = _adagrad_ref(theta, g, G, lr, eps, inside=True)[0]
    if first_difference(want_t, got_t) is not None and first_difference(inside, got_t) is not None:
        wrongs = {"divide by √G' + eps, not by G' + eps": theta - lr * g / (want_G + eps),
                  "use the NEW G (add g² first, then divide by √G')":
                      theta - lr * g / (np.sqrt(G) + eps),
                  "subtract the step: θ − lr·g/(√G' + eps)": theta + lr * g / (np.sqrt(want_G) + eps),
                  "multiply by lr": theta - g / (np.sqrt(want_G) + eps)}
        hint = next((h for h, w in wrongs.items()
                     if first_difference(w, got_t, rtol=1e-6, atol=1e-9) is None),
                    "θ' = θ − lr·g/(√G' + eps)")
        fail(f"the new θ: {first_difference(want_t, got_t)} — {hint}.")
    got, want, got_G, want_G = _real("adagrad_push", _adagrad_on_shards, adagrad_push, lr, eps)
    if first_difference(want_G, got_G) is not None:
        fail(f"after 12 pushes from 2 replicas, the shards' G: {first_difference(want_G, got_G)}."
             " G must carry over from push to push (return the updated G).")
    if first_difference(want, got, rtol=1e-6, atol=1e-9) is not None:
        fail(f"after 12 pushes from 2 replicas to 2 real shards, θ: "
             f"{first_difference(want, got)}. Each shard must keep its own θ and G between "
             "pushes: return both.")
    passed("ps_adagrad_push", "right on one push, and inside 2 real shard processes: after "
           "12 pushes from 2 replicas, θ and every shard's G match Adagrad's")


# ------------------------------------------------------------------ task 3: staleness-aware rate

_RATE_CASES = (0, 1, 2, 4, 32)                 # staleness values tried in this process
_RATE_MISTAKES = {
    "the lesson divides by τ itself, not by τ + 1: a gradient 1 update old keeps lr, one 4 "
    "updates old gets lr/4": lambda lr, t: lr / (t + 1),
    "divide the rate by the staleness (lr/τ): a stale gradient must count LESS":
        lambda lr, t: lr * max(t, 1),
    "divide by τ, not τ²": lambda lr, t: lr / max(t, 1) ** 2,
    "the rate must shrink with the staleness: lr/τ for τ ≥ 1": lambda lr, t: lr,
}


def _rates_on_a_shard(staleness_lr: Callable, lr: float) -> tuple[np.ndarray, np.ndarray,
                                                                    np.ndarray, np.ndarray]:
    """One replica (this process) reads θ once and pushes 6 gradients against that version
    (staleness 0..5) to a real shard using the learner's rate."""
    from ddl_lab.parameter_server.rules import _staleness_lr as reference
    from ddl_lab.parameter_server.server import ParameterServer
    rng = np.random.default_rng(5)
    theta0, grads = rng.normal(size=5), rng.normal(size=(6, 5))
    with ParameterServer(theta0, shards=1, rule="sgd", lr=lr, staleness_aware=True,
                         rate=staleness_lr, timeout=10.0) as ps:
        client = ps.connect("replica 0")
        versions = client.snapshot()[1]
        for g in grads:
            client.push(g, versions)
        got, _ = client.snapshot()
        report = ps.finish()
    rates = np.array([reference(lr, t) for t in range(6)])
    return got, theta0 - rates @ grads, report.shards[0]["lr"], rates


def ps_staleness_lr(staleness_lr: Callable[[float, int], float], lr: float = 0.5) -> None:
    """Lesson 07, task 3: ``staleness_lr(lr, tau)`` is lr/τ for a gradient τ ≥ 1 updates
    stale and lr for a fresh one (τ = 0)."""
    __tracebackhide__ = True
    for tau in _RATE_CASES:
        want = lr / tau if tau else lr
        try:
            got = staleness_lr(lr, tau)
        except ZeroDivisionError:
            fail(f"staleness_lr({lr}, {tau}) divided by zero: a fresh gradient has τ = 0 "
                 "and keeps the full rate lr.")
        except NotImplementedError:
            call_local(staleness_lr, lr, tau)
        except Exception as e:
            fail(f"staleness_lr({lr}, {tau}) raised {type(e).__name__}: {e}")
        if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, float, np.number)):
            fail(f"staleness_lr({lr}, {tau}) returned {got!r} ({type(got).__name__}); return "
                 "a number.")
        if np.isclose(float(got), want, rtol=1e-9, atol=0):
            continue
        hint = next((h for h, wrong in _RATE_MISTAKES.items()
                     if all(np.isclose(float(call_local(staleness_lr, lr, t)), wrong(lr, t))
                            for t in (1, 2, 4, 32))), "")
        fail(f"staleness_lr({lr}, {tau}) returned {float(got):.6g}, expected {want:.6g}"
             + (f". Hint: {hint}." if hint else "."))
    got, want, used, rates = _real("staleness_lr", _rates_on_a_shard, staleness_lr, lr)
    if first_difference(rates, used) is not None or first_difference(want, got) is not None:
        fail(f"on a real shard, the rates applied to gradients of staleness 0..5 were "
             f"{np.round(used, 4).tolist()}, expected {np.round(rates, 4).tolist()}.")
    passed("ps_staleness_lr", "lr/τ (lr when fresh); a real shard applied "
           f"{np.round(used, 3).tolist()} to gradients 0, 1, …, 5 updates stale")
