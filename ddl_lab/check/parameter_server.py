"""Checks for lesson 07 (the parameter server): the SSP gate, the staleness-aware rate, a restored
shard (seeded cases, then real shards); the worst staleness (reasoning); a Downpour plan."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import call_local, fail, judge, passed, run_beside, stub_message, task
from ._diagnose import (Case, Snapshot, adagrad, apart, as_array, describe_value, differs,
                        returned_none, same, table, tolerance)
from ._trial import Trial

__all__ = ["ssp_gate", "staleness_lr", "restore_shard", "worst_staleness", "downpour_plan"]

_PACKAGE = "ddl_lab.parameter_server"


# ------------------------------------------------------------------ task 1: SSP gate

_GATE_FIXED = table(
    "clock clocks s", (3, [3, 3, 3], 0),      # BSP, everyone at the same clock
    (4, [4, 3, 4], 0),                        # BSP, one replica a clock behind
    (5, [5, 2, 4], 3),                        # exactly s ahead of the slowest
    (6, [6, 2, 4], 3),                        # s + 1 ahead
    (2, [7, 2, 5], 3),                        # the slowest replica itself
    (9, [9], 1),                              # the only replica
    (10, [10, 8, 3, 9], 6),                   # 7 ahead, the slowest not first
    (10, [9, 10, 4, 8], 6))                   # 6 ahead, s = 6


def _gate_draw(rng: np.random.Generator) -> dict[str, Any]:
    """A random replica set; the lead over the slowest is often exactly s or s + 1."""
    s = int(rng.integers(0, 6))
    clocks = [int(c) for c in rng.integers(0, 30, int(rng.integers(1, 6)))]     # the others
    clock = min(clocks) + int(rng.choice([s, s + 1, int(rng.integers(0, s + 3))]))   # + the lead
    clocks.insert(int(rng.integers(0, len(clocks) + 1)), clock)
    return {"clock": clock, "clocks": clocks, "s": s}


_GATE_MISTAKES: dict[str, Callable[[int, list, int], bool]] = {
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
    **{f"you use the bound s = {k} whatever s is given: compare with the argument s":
       lambda c, cs, s, k=k: c - min(cs) > k for k in range(6)},
}


def _ssp_max_lead(must_wait: Callable, s: int) -> int:
    from ddl_lab.parameter_server.downpour import digits_problem, run
    return run(digits_problem(), replicas=3, shards=2, mode="ssp", s=s, slow=4.0, steps=40,
               batch=16, gate=must_wait, eval_every=0.2, timeout=REAL_TIMEOUT).report.max_gap


@task("parameter_server", refuses=(_PACKAGE, "ssp_must_wait", "_ssp_must_wait"))
def ssp_gate(my_ssp_gate: Callable[[int, list, int], bool], seed: int = 0) -> None:
    """Lesson 07, task 1 (its gate): ``my_ssp_gate(clock, clocks, s)`` is True exactly when a
    replica at ``clock`` is more than ``s`` clocks ahead of the slowest live replica."""
    trial = Trial("ssp_gate", my_ssp_gate, seed, _GATE_FIXED, draws=10, draw=_gate_draw)
    for case in trial:
        clock, clocks, s = case.params["clock"], case.params["clocks"], case.params["s"]
        given = list(clocks)
        snap = Snapshot(clocks=given)
        got = call_local(my_ssp_gate, clock, given, s)
        call = f"{trial.name}({clock}, {clocks}, s={s})"
        if not isinstance(got, (bool, np.bool_)):
            fail(returned_none(got, trial.name, "True (wait) or False (go)") or
                 f"{call} returned {got!r} ({type(got).__name__}); return True (wait) or "
                 "False (go).")
        if changed := snap.changed(trial.name):
            fail(f"{changed} ({case}) The shard keeps using its list of clocks: use min(clocks) "
                 "or sorted(clocks), which leave it alone.")
        want = clock - min(clocks) > s
        if bool(got) == want:
            continue
        hint = next((h for h, wrong in _GATE_MISTAKES.items()
                     if all(bool(wrong(c["clock"], list(c["clocks"]), c["s"])) ==
                            bool(call_local(my_ssp_gate, c["clock"], list(c["clocks"]), c["s"]))
                            for c in (k.params for k in trial))), "")
        fail(f"{call} returned {bool(got)}, expected {want}: this replica is "
             f"{clock - min(clocks)} clock(s) ahead of the slowest ({case})."
             + (f" Hint: {hint}." if hint else ""))
    lead = real(_ssp_max_lead, my_ssp_gate, 2)
    if lead != 2:
        fail(f"in a real SSP run with s = 2 and a replica 4× slower, the fastest replica was "
             f"at most {lead} clocks ahead of the slowest when its pull went through; SSP "
             "lets it get exactly s = 2 ahead.")
    passed("ssp_gate", f"the gate is right on {len(trial)} cases (1–6 replicas, s = 0 to 5, "
           "leads of exactly s and s + 1); in a real SSP(s=2) run with a 4× straggler, the "
           "shards let the fast replicas lead by exactly 2 clocks, never 3")


# ---------------------------------------------------- task 1, its second rule: staleness-aware rate

def _rate_mistakes(cases: list[dict]) -> dict[str, Callable[[float, int], float]]:
    return {
        "the lesson divides by τ itself, not by τ + 1: a gradient 1 update old keeps lr, one 4 "
        "updates old gets lr/4": lambda lr, t: lr / (t + 1),
        "divide the rate by the staleness (lr/τ): a stale gradient must count LESS":
            lambda lr, t: lr * max(t, 1),
        "divide by τ, not τ²": lambda lr, t: lr / max(t, 1) ** 2,
        "divide by τ, not √τ": lambda lr, t: lr / max(t, 1) ** 0.5,
        "the rate must shrink with the staleness: lr/τ for τ ≥ 1": lambda lr, t: lr,
        **{f"you use the rate {c:g} whatever lr is given: divide the lr argument by τ":
           lambda lr, t, c=c: c / t if t else c
           for c in (0.1, 0.01, 0.05, 0.5, 1.0, *sorted({p["lr"] for p in cases}))},
    }


_RATE_FIXED = [{"lr": 0.5, "tau": t} for t in (0, 1, 2, 4, 32)]


def _rate_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"lr": round(float(10 ** rng.uniform(-2.5, 0.3)), 4),
            "tau": int(rng.choice([0, 1, 2, 3, 5, 7, 16, 32, int(rng.integers(2, 1000))]))}


def _rates_on_a_shard(staleness_lr: Callable, lr: float) -> tuple[np.ndarray, ...]:
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
    rates = np.array([_rate(lr, t) for t in range(6)])
    return got, theta0 - rates @ grads, report.shards[0]["lr"], rates


@task("parameter_server", refuses=(_PACKAGE, "staleness_lr", "_staleness_lr"))
def staleness_lr(my_staleness_lr: Callable[[float, int], float], seed: int = 0) -> None:
    """Lesson 07, task 1 (its rate): ``my_staleness_lr(lr, tau)`` is lr/τ for a gradient τ ≥ 1 updates
    stale and lr for a fresh one (τ = 0)."""
    trial = Trial("staleness_lr", my_staleness_lr, seed, _RATE_FIXED, draws=8, draw=_rate_draw)
    params, returned = [c.params for c in trial], []
    for case in trial:
        lr, tau = case.params["lr"], case.params["tau"]
        call = f"{trial.name}({lr:g}, {tau})"
        got = trial.call(case, lr, tau, zero_division=f"{call} divided by zero: a fresh "
                         f"gradient has τ = 0 and keeps the full rate lr ({case}).")
        if answers.scalar(got) is None:
            fail(returned_none(got, trial.name, "the rate, a number", "a number.", call))
        returned.append(got)
        want = lr / tau if tau else lr
        if same(want, got):                       # within the tolerance of the dtype returned
            continue
        hint = next((h for h, wrong in _rate_mistakes(params).items()
                     if all(same(wrong(p["lr"], p["tau"]),
                                 call_local(my_staleness_lr, p["lr"], p["tau"]))
                            for p in params)), "")
        shown, wanted = apart(answers.scalar(got), want)
        fail(f"{call} returned {shown}, expected {wanted} ({case})"
             + (f". Hint: {hint}." if hint else "."))
    lr, rtol = trial.cases[-1].params["lr"], tolerance(*returned)
    got, want, used, rates = real(_rates_on_a_shard, my_staleness_lr, lr)
    if differs(rates, used, rtol) is not None or differs(want, got, rtol) is not None:
        fail(f"on a real shard, the rates applied to gradients of staleness 0..5 were "
             f"{np.round(used, 4).tolist()}, expected {np.round(rates, 4).tolist()}.")
    passed("staleness_lr", f"lr/τ (lr when fresh) on {len(trial)} cases (random lr, τ = 0 to "
           f"999); a real shard applied {np.round(used, 3).tolist()} to gradients 0, 1, …, 5 "
           "updates stale")


# ------------------------------------------------------------------ task 2: a shard restarts

def _rate(lr: float, tau: int) -> float:
    """The staleness-aware rate the shards apply (task 1's rate): the check's own copy."""
    return lr / tau if tau > 0 else lr


def _restore_draw(rng: np.random.Generator) -> dict[str, Any]:
    first, pushes = int(rng.integers(0, 40)), int(rng.integers(3, 13))
    return {"size": int(rng.choice([1, 2, 5, 9, 13])), "first": first, "pushes": pushes,
            "version": first + int(rng.integers(0, pushes + 1)),
            "dtype": str(rng.choice(["float32", "float64"]))}


@dataclass
class _Restart:
    """A crashed shard: its checkpoint {theta, G, version}, its push log since an older
    checkpoint (records {applied, read, grad} in the order applied), lr and eps."""
    checkpoint: dict[str, Any]
    log: list[dict[str, Any]]
    lr: float
    eps: float

    def replay(self, records: list[dict] | None = None, G: np.ndarray | None = None,
               tau: Callable[[dict], int] = lambda r: r["applied"] - r["read"],
               inside: bool = False, sgd: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """θ and G after ``records`` (default: those the checkpoint lacks) are applied with
        Adagrad (or plain ``sgd``, G left as it is) at the staleness-aware rate, from the
        checkpoint (or from ``G``)."""
        ckpt = self.checkpoint
        records = [r for r in self.log if r["applied"] >= ckpt["version"]] \
            if records is None else records
        theta = ckpt["theta"].astype(np.float64)
        G = (ckpt["G"] if G is None else G).astype(np.float64)
        for r in records:
            rate = _rate(self.lr, tau(r))
            theta, G = (theta - rate * r["grad"], G) if sgd else adagrad(
                theta, r["grad"].astype(np.float64), G, rate, self.eps, inside)
        return theta, G

    @property
    def version(self) -> int:
        return self.log[-1]["applied"] + 1


def _restart(case: Case) -> _Restart:
    """A shard's history from version ``first``: Adagrad pushes at the staleness-aware rate,
    each computed on a version up to 5 older (the push applied at the checkpoint's version
    always stale), the state at ``version`` saved as the checkpoint."""
    p, rng = case.params, case.rng
    dtype = np.dtype(p["dtype"])
    k, V = p["size"], p["version"]
    theta, G = rng.normal(size=k) * 2, np.abs(rng.normal(size=k)) * 5 * (rng.random(k) > 0.3)
    lr, eps = round(float(10 ** rng.uniform(-2, 0)), 4), float(10 ** rng.uniform(-8, -3))
    log, checkpoint = [], None
    for applied in range(p["first"], p["first"] + p["pushes"]):
        if applied == V:
            checkpoint = {"theta": theta.astype(dtype), "G": G.astype(dtype), "version": V}
        low = applied - V + 1 if V > 0 and applied in (V, V + 1) else 0   # read before V
        read = applied - int(rng.integers(low, min(applied, 5) + 1)) if applied else 0
        grad = (rng.normal(size=k) * 3 * (rng.random(k) > 0.2)).astype(dtype)
        log.append({"applied": applied, "read": read, "grad": grad})
        theta, G = adagrad(theta, grad.astype(np.float64), G, _rate(lr, applied - read), eps)
    if checkpoint is None:
        checkpoint = {"theta": theta.astype(dtype), "G": G.astype(dtype), "version": V}
    return _Restart(checkpoint, log, lr, eps)


def _restore_mistakes(r: _Restart) -> list[tuple[str, tuple[np.ndarray, np.ndarray]]]:
    """(message, the θ and G that mistake restores) for each named mistake, in a fixed order."""
    V, first = r.checkpoint["version"], r.log[0]["applied"]
    after = [x for x in r.log if x["applied"] >= V]
    return [
        ("Adagrad's accumulators G restarted from zero: G is per-parameter state like θ, saved "
         "in the checkpoint — restore both, or every parameter's next steps are too large",
         r.replay(G=np.zeros_like(r.checkpoint["G"]))),
        ("every logged push was applied again, those already in the checkpoint included: a "
         f"push applied at a version below {V} is already in the checkpoint's θ and G, and "
         "applying it twice counts it twice", r.replay(r.log)),
        (f"you picked records by their position in the list: the log starts at version "
         f"{first}, not 0 — use each record's `applied` version",
         r.replay(r.log[V:])),
        ("you chose the pushes by the version they were computed on (`read`): a stale push read "
         f"before version {V} can be applied after it, so the checkpoint does not hold it — "
         "choose by the version at which the shard applied it",
         r.replay([x for x in r.log if x["read"] >= V])),
        (f"the push applied at version {V} itself is missing: a checkpoint saved at version "
         f"{V} holds the pushes applied at versions below {V}", r.replay(after[1:])),
        ("nothing was replayed: the pushes logged after the checkpoint are lost, though the log "
         "holds them", r.replay([])),
        ("each push got the full rate lr: the shard is staleness-aware, so a replayed push must "
         "get the rate it got the first time, rate(lr, τ) with τ its staleness then (applied − "
         "read)", r.replay(tau=lambda x: 0)),
        ("the shard's rule is Adagrad (lesson 07 §1): G accumulates g², and each step is divided "
         "by √G + eps", r.replay(after, sgd=True)),
    ]


def _restores(got: Any, state: tuple[np.ndarray, np.ndarray]) -> bool:
    """Does the learner's answer hold this θ and G (within the tolerance of its dtypes)?"""
    return isinstance(got, (tuple, list)) and len(got) == 3 and \
        same(state[0], got[0]) and same(state[1], got[1])


def _restore_fault(got: Any, r: _Restart, name: str,
                   others: list[tuple[_Restart, Any]]) -> str | None:
    """What is wrong with the learner's (θ, G, version) for this restart, or None; a named
    mistake must explain its answers to every restart in ``others`` too."""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return returned_none(got, name, "the triple (theta, G, version)", "the triple (theta, "
                             "G, version) of the restored shard.")
    theta, G, version = got
    if as_array(theta) is None or as_array(G) is None:
        return (f"{name} returned θ = {describe_value(theta)} and G = {describe_value(G)}; "
                "return two arrays (numpy or torch) and the version.")
    want_t, want_G = r.replay()
    if not _restores(got, (want_t, want_G)) and not _restores(got, r.replay(inside=True)):
        hint = next((h for k, (h, _) in enumerate(_restore_mistakes(r))
                     if all(_restores(g, _restore_mistakes(c)[k][1]) for c, g in others)), None)
        if hint:
            return f"the restored state is wrong — {hint}."
        return (f"the restored state is wrong: θ {differs(want_t, theta) or 'is right'}, G "
                f"{differs(want_G, G) or 'is right'}. Start from the checkpoint and apply, in "
                "order, exactly the logged pushes it does not hold, as the shard applied them.")
    V, n = r.checkpoint["version"], answers.whole(version)
    if n != r.version:
        why = {V: "that is the checkpoint's version: each replayed push advances it, and later "
                  "pushes measure their staleness against it",
               V + len(r.log): "that counts every logged push on top of the checkpoint, those "
                               "already in it included"}.get(n, "")
        return (f"θ and G are right, but the version is {describe_value(version)}, expected "
                f"{r.version}: the number of pushes the shard had applied when it crashed"
                + (f" — {why}" if why else "") + ".")
    return None


def _shard_restart(fn: Callable, lr: float, eps: float, crash: int = 24,
                   saved: int = 14) -> tuple[dict, dict, int, float]:
    """Two of the lesson's shards (``Shard``, the state each shard process keeps) take the same
    40 pushes from 3 replicas, Adagrad at the staleness-aware rate; the second crashes after
    ``crash`` pushes and is restored by ``fn`` from its checkpoint at version ``saved`` and
    its log. Returns both shards' reports, the version ``fn`` restored and the tolerance of
    the dtypes it returned."""
    from ddl_lab.parameter_server.shard import Shard
    rng = np.random.default_rng(11)
    theta0 = rng.normal(size=9)
    events = [(int(rng.integers(0, 3)), rng.normal(size=9) * (rng.random(9) > 0.2))
              for _ in range(40)]

    def fresh() -> Shard:
        return Shard(0, theta0, rule="adagrad", lr=lr, eps=eps, staleness_aware=True)
    shards, log, checkpoint, out = [fresh(), fresh()], [], None, None
    reads = [{w: 0 for w in range(3)} for _ in shards]
    for step, (who, grad) in enumerate(events):
        if step == saved:
            b = shards[1]
            checkpoint = {"theta": b.theta.copy(), "G": b.G.copy(), "version": b.version}
        if step == crash:
            out = call_local(fn, checkpoint, list(log), lr, eps, _rate)
            b = shards[1] = fresh()
            b.vectors["theta"] = np.array(as_array(out[0]), dtype=np.float64)
            b.G, b.version = np.array(as_array(out[1]), dtype=np.float64), answers.whole(out[2])
        for shard, seen in zip(shards, reads):
            if shard is shards[1] and step < crash:
                log.append({"applied": shard.version, "read": seen[who], "grad": grad.copy()})
            shard.handle(who, ("push", grad, seen[who]))
            if step % 4 != who:                    # pull again now and then: staleness varies
                (_, reply), = shard.handle(who, ("pull",))
                seen[who] = reply[2]
    return shards[0].report(), shards[1].report(), answers.whole(out[2]), tolerance(*out[:2])


@task("parameter_server")
def restore_shard(my_restore_shard: Callable, seed: int = 0) -> None:
    """Lesson 07, task 2: ``my_restore_shard(checkpoint, log, lr, eps, rate)`` returns the
    (θ, G, version) a crashed shard had: the checkpoint's θ and Adagrad accumulators G at its
    version V, then exactly the logged pushes applied at versions ≥ V, in order, each at the
    staleness-aware rate it had (τ = applied − read). The checkpoint stays unchanged."""
    trial = Trial("restore_shard", my_restore_shard, seed, table(
        "size first pushes version dtype", (6, 5, 8, 9, "float64"),
        (1, 0, 5, 0, "float64"),                # holds none yet
        (4, 3, 6, 9, "float32"),                # holds the log
        (7, 12, 9, 15, "float32")), draws=4, draw=_restore_draw)
    name = trial.name
    given = []
    for case in trial:
        r = _restart(case)
        before = {k: np.array(r.checkpoint[k], copy=True) for k in ("theta", "G")}
        log = [dict(x, grad=x["grad"].copy()) for x in r.log]
        with np.errstate(all="ignore"):
            got = call_local(my_restore_shard, r.checkpoint, log, r.lr, r.eps, _rate)
        if key := next((k for k, was in before.items()
                        if not np.array_equal(was, as_array(r.checkpoint[k]))), None):
            fail(f"{name} changed the checkpoint's {key} in place: a checkpoint must survive the "
                 "restart (the shard may crash again before the next one is saved) — work on a "
                 f"copy, `{key} = checkpoint['{key}'].copy()`. ({case})")
        given.append((r, got))
    for case, (r, got) in zip(trial, given):
        judge(_restore_fault(got, r, name, given), case, "({})")
    kept, restored, version, rtol = _shard_restart(my_restore_shard, 0.3, 1e-8)
    diff = (differs(kept["theta"], restored["theta"], rtol)
            or differs(kept["G"], restored["G"], rtol))
    late = kept["staleness"][-len(restored["staleness"]):]
    if diff or not np.array_equal(late, restored["staleness"]):
        fail(f"a shard restored by {name} went on with 16 more pushes and ended unlike a shard "
             f"that never crashed: {diff or 'the staleness of the later pushes differs'} "
             f"(staleness {restored['staleness'].tolist()}, expected {late.tolist()}).")
    passed("restore_shard", f"right on {len(trial)} restarts (slices of 1 to 13 parameters, "
           "float32 and float64, stale pushes across the checkpoint, logs that start before "
           f"it); a shard that crashed after 24 pushes, restored from its checkpoint at version "
           f"14 to version {version}, took 16 more pushes (staleness up to "
           f"{int(restored['staleness'].max())}) and ended with the θ and G of a shard that "
           "never crashed")


# ------------------------------------------------------------------ real runs

# seconds any wait of a real run may take: starting shard processes on a busy machine is slow,
# and only answers right on every local case get that far
REAL_TIMEOUT = 60.0


def real(fn: Callable, learner: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run a real experiment with the learner's function inside shard processes (where the
    learner's code runs: ``run_beside``); their failures become CheckFailed naming it."""
    return run_beside(_real, fn, learner, *args, **kwargs)


def _real(fn: Callable, learner: Callable, *args: Any, **kwargs: Any) -> Any:
    from ddl_lab.parameter_server.errors import ParameterServerError
    name = getattr(learner, "__name__", "your function")
    try:
        return fn(learner, *args, **kwargs)
    except (ParameterServerError, TimeoutError) as e:
        text, stub = str(e), isinstance(e, ParameterServerError) and e.not_implemented
    if stub:
        fail(stub_message(learner))
    head, last = text.strip().splitlines()[0], text.strip().splitlines()[-1]
    fail(f"{name} failed inside a shard process: {head}" + (f"\n  {last}" if last != head else ""))


# ------------------------------------------------------------------ reasoning: worst staleness

def _worst(s: int, n: int) -> int:
    """The largest staleness SSP(s) admits with n replicas: each other replica may be s
    clocks behind at the pull and s + 1 ahead at the push, 2s + 1 pushes in between."""
    return (n - 1) * (2 * s + 1)


_STALENESS_MISTAKES: dict[str, Callable[[int, int], float]] = {
    "you let the other replicas start level with you: when your pull passes the gate they "
    "may be as many as s clocks BEHIND you (the gate bounds the lead over the slowest), and "
    "before you push they may run up to s + 1 clocks ahead — 2s + 1 pushes each, not s + 1":
        lambda s, n: (n - 1) * (s + 1),
    "one push short per replica: a replica exactly s clocks ahead of the slowest may still "
    "pull (the gate holds only MORE than s) and then push, so each other replica gets 2s + 1 "
    "pushes in, not 2s": lambda s, n: (n - 1) * 2 * s,
    "count only the OTHER replicas' pushes: your own gradient is the one being applied, not "
    "one it missed (n − 1 replicas, not n)": lambda s, n: n * (2 * s + 1),
    "every one of the other n − 1 replicas can push that often while you compute, not just "
    "one": lambda s, n: 2 * s + 1,
    "the bound s counts clocks of one replica, but the staleness counts the updates of all "
    "the other replicas: each of the n − 1 may push 2s + 1 times": lambda s, n: s,
    "that is the bound on the lead, s clocks per other replica; they can start s behind and "
    "end s + 1 ahead of your clock: 2s + 1 pushes each": lambda s, n: (n - 1) * s,
}


def _worst_schedule(s: int, n: int, timeout: float) -> int:
    """Drive a real SSP(s) shard through the worst schedule and return the staleness it
    measured for replica 0's push: replica 0 pushes s times alone, pulls at clock s; every
    other replica then pulls and pushes 2s + 1 times (clocks 0 … 2s); replica 0 pushes."""
    from ddl_lab.parameter_server.server import ParameterServer
    zero = np.zeros(4)
    with ParameterServer(zero, shards=1, rule="sgd", lr=0.1, mode="ssp", s=s,
                         timeout=timeout) as ps:
        clients = [ps.connect(f"replica {r}") for r in range(n)]
        for c in clients:
            c.join()

        def step(c: Any) -> None:
            c.push(zero, c.pull().versions)
            c.snapshot()                    # same connection: the push has been applied
        for _ in range(s):
            step(clients[0])
        mine = clients[0].pull()
        for _ in range(2 * s + 1):
            for c in clients[1:]:
                step(c)
        clients[0].push(zero, mine.versions)
        clients[0].snapshot()
        return int(ps.finish().staleness[-1])


@task("parameter_server")
def worst_staleness(my_worst_staleness: Callable[[int, int], int], seed: int = 0) -> None:
    """Lesson 07, reasoning: ``my_worst_staleness(s, replicas)`` is the largest staleness
    (updates applied between a replica's pull and its push) that SSP with bound s admits:
    (replicas − 1)·(2s + 1). A real shard, driven through the worst schedule, agrees."""
    trial = Trial("worst_staleness", my_worst_staleness, seed, table(
        "s replicas", (0, 1), (0, 2), (0, 4), (1, 2), (2, 3), (3, 4), (5, 2)), draws=4,
        draw=lambda rng: {"s": int(rng.integers(0, 9)), "replicas": int(rng.integers(1, 10))})
    name, rule = trial.name, answers.Whole(what="a whole number of updates")
    got = [answers.answer(trial.call(c, *c.params.values()), rule, name,
                          f"{name}({c.params['s']}, {c.params['replicas']})", c) for c in trial]
    if wrong := [(c, g) for c, g in zip(trial, got) if g != _worst(*c.params.values())]:
        case, g = wrong[0]
        s, n = case.params["s"], case.params["replicas"]
        hint = next((h for h, f in _STALENESS_MISTAKES.items()
                     if all(f(*c.params.values()) == v for c, v in zip(trial, got))), None)
        fail(f"{name}(s={s}, replicas={n}) returned {g}, expected {_worst(s, n)}"
             + (f": {hint}." if hint else ".") + f" The worst schedule: replica 0 pushes {s} "
             f"time(s) alone and pulls at clock {s} (the others, at clock 0, are exactly s "
             f"behind); each other replica then pulls and pushes at clocks 0 … {2 * s} (the "
             f"last {s + 1} of them ahead of replica 0) before replica 0 pushes. ({case})")
    s, n = 2, 3
    measured = real(lambda _, *a: _worst_schedule(*a), my_worst_staleness, s, n, REAL_TIMEOUT)
    passed("worst_staleness", f"(replicas − 1)(2s + 1) on {len(trial)} cases (s = 0 to 8, 1 to "
           f"9 replicas); a real SSP(s={s}) shard with {n} replicas, driven through the worst "
           f"schedule, measured a staleness of {measured} for the last push")


# ------------------------------------------------------------------ design: a Downpour plan

PLAN_REPLICAS = 4
PLAN_TARGET = 0.5           # training loss the plan must reach
PLAN_CASES = [{"steps": 120, "budget": 120}, {"steps": 120, "budget": 60},
              {"steps": 120, "budget": 40}]          # the budgets the prompt's example names


def _budget_draw(rng: np.random.Generator, kind: str) -> dict[str, Any]:
    """Steps and a budget the prompt never shows: steps/4 to 2·steps messages per replica,
    or (``tight``) steps/8 to steps/5 — tighter than any the prompt names; or a case run for
    ``real``: 160 to 240 steps, a tight budget that rarely divides 2·steps."""
    if kind == "real":
        steps = int(rng.choice([160, 200, 240]))
        return {"steps": steps, "budget": int(rng.integers(steps // 4, steps // 2))}
    steps = int(rng.choice([30, 45, 77, 150, 250, 401, 1000]))
    low, high = (math.ceil(steps / 8), math.ceil(steps / 5)) if kind == "tight" else \
        (math.ceil(steps / 4), 2 * steps + 1)
    return {"steps": steps, "budget": int(rng.integers(low, high))}


def _messages(steps: int, n_fetch: int, n_push: int) -> tuple[int, int]:
    """(pulls, pushes) of one replica: a pull at steps 0, n_fetch, …; a push every n_push
    steps and at the end."""
    return math.ceil(steps / n_fetch), math.ceil(steps / n_push)


def _plan(out: Any, name: str, case: Any) -> tuple[int, int, float]:
    """The learner's (n_fetch, n_push, lr), or a CheckFailed saying what is wrong."""
    judge(answers.plan(out, name, {"n_fetch": "", "n_push": "", "lr": ""}, f" ({case})"))
    n_fetch, n_push = (answers.Whole(1).read(out[k]) for k in ("n_fetch", "n_push"))
    if n_fetch is None or n_push is None:
        fail(f"{name} chose n_fetch = {out['n_fetch']!r} and n_push = {out['n_push']!r}: both "
             f"are numbers of steps, whole numbers ≥ 1 ({case}).")
    if (lr := answers.Real(0, closed="neither").read(out["lr"])) is None:
        fail(f"{name} chose lr = {describe_value(out['lr'])}: a learning rate is a positive "
             f"number ({case}).")
    return n_fetch, n_push, lr


def _downpour(_: Callable, steps: int, n_fetch: int, n_push: int, lr: float) -> tuple:
    """One real asynchronous Downpour run with SGD on the shards: (final loss, pulls and
    pushes per replica, as the shards counted them)."""
    from ddl_lab.parameter_server.downpour import digits_problem, run
    r = run(digits_problem(example_cost=0.0), replicas=PLAN_REPLICAS, shards=2, mode="async",
            rule="sgd", lr=lr, n_fetch=n_fetch, n_push=n_push, steps=steps, batch=32,
            eval_every=0.5, timeout=REAL_TIMEOUT)
    shard = r.report.shards[0]
    return r.final_loss, shard["pulls"] / PLAN_REPLICAS, shard["pushes"] / PLAN_REPLICAS


@task("parameter_server")
def downpour_plan(my_downpour_plan: Callable[[int, int], dict], seed: int = 0) -> None:
    """Lesson 07, design: ``my_downpour_plan(steps, budget)`` returns {n_fetch, n_push, lr}
    for 4 asynchronous Downpour replicas of ``steps`` steps each, SGD on 2 shards, such that
    each replica sends at most ``budget`` messages (pulls + pushes) and the training loss
    ends at or below 0.5. The check asks for plans at budgets it draws (their messages
    counted) and runs the tightest prompt budget and one drawn one on real processes."""
    kinds = iter(["far"] * 6 + ["tight"] * 2 + ["real"])      # the last one runs for real
    trial = Trial("downpour_plan", my_downpour_plan, seed, PLAN_CASES, draws=9,
                  draw=lambda rng: _budget_draw(rng, next(kinds)), plan=True)
    name = trial.name
    plans = [_plan(trial.call(c, c.params["steps"], c.params["budget"]), name, c) for c in trial]
    for i, (case, (n_fetch, n_push, lr)) in enumerate(zip(trial, plans)):
        steps, budget = case.params["steps"], case.params["budget"]
        pulls, pushes = _messages(steps, n_fetch, n_push)
        if pulls + pushes > budget:
            fail(f"{_chose(name, case, n_fetch, n_push, lr)}: each replica sends ⌈steps/n_fetch⌉ "
                 f"+ ⌈steps/n_push⌉ = {pulls} + {pushes} = {pulls + pushes} messages, over "
                 f"the budget of {budget}"
                 + ("" if i < len(PLAN_CASES) else " (a budget the prompt does not show)")
                 + ". " + _over_budget_hint(steps, budget, n_fetch, n_push, plans) + f" ({case})")
    done = []
    for case, (n_fetch, n_push, lr) in ((trial.cases[i], plans[i]) for i in (2, -1)):
        steps, budget = case.params["steps"], case.params["budget"]
        loss, pulls, pushes = real(_downpour, my_downpour_plan, steps, n_fetch, n_push, lr)
        chose = _chose(name, case, n_fetch, n_push, lr)
        if pulls + pushes > budget:
            fail(f"{chose}: on the real run each replica sent {pulls:g} pulls + {pushes:g} "
                 f"pushes = {pulls + pushes:g} messages, over the budget of {budget} ({case})")
        if not loss <= PLAN_TARGET:
            fail(f"{chose}: the training loss ended at {loss:.3g}, above the target "
                 f"{PLAN_TARGET:g}. " + _loss_hint(loss, lr, n_push)
                 + answers.same_for_all(plans) + f" ({case})")
        done.append(f"{steps} steps, {budget} messages: {pulls + pushes:g} sent, loss {loss:.2f}")
    steps = sorted({c.params["steps"] for c in trial})
    passed("downpour_plan", f"within budget on {len(trial)} (steps, budget) pairs ({steps[0]} to "
           f"{steps[-1]} steps, budgets of steps/8 to 2·steps messages); on real shards and 4 "
           f"replicas — {'; '.join(done)}")


def _chose(name: str, case: Any, n_fetch: int, n_push: int, lr: float) -> str:
    steps, budget = case.params["steps"], case.params["budget"]
    return f"{name}({steps}, {budget}) chose n_fetch = {n_fetch}, n_push = {n_push}, lr = {lr:g}"


def _over_budget_hint(steps: int, budget: int, n_fetch: int, n_push: int,
                      plans: list[tuple[int, int, float]]) -> str:
    pulls, pushes = _messages(steps, n_fetch, n_push)
    hints = {   # the first that holds; a plan that ignores its budgets is told so instead
        f"2·steps/budget = {2 * steps / budget:.4g} was rounded DOWN to {n_fetch}: when the "
        "budget does not divide 2·steps, the shorter interval sends too many messages — round "
        "the interval up.": n_fetch == n_push == (2 * steps) // budget and 2 * steps % budget,
        f"With an odd budget ({budget}) the pulls and the pushes cannot each have half of it: "
        "equal intervals send an even number of messages, ⌈steps/k⌉ of each.":
            n_fetch == n_push == math.ceil(2 * steps / budget) and budget % 2,
        f"Fetching every {n_fetch} step(s) alone costs {pulls} pulls: fetch less often too — a "
        "fetch is a message as much as a push is.": pulls >= budget > pushes,
        "Pulls count as well as pushes: with n steps between them, a replica sends "
        "steps/n_fetch + steps/n_push messages.": math.ceil(steps / budget) in (n_fetch, n_push),
        "Choose larger intervals.": len(set(plans)) > 1}
    return next((h for h, hit in hints.items() if hit), "") + answers.same_for_all(plans)


def _loss_hint(loss: float, lr: float, n_push: int) -> str:
    step = n_push * lr
    if not np.isfinite(loss) or loss > 2.0 or step > 0.6:
        return (("The run diverged" if not np.isfinite(loss) or loss > 2.0 else
                 "The run was unstable") + f": a push carries the SUM of the {n_push} gradients "
                f"computed since the last one, so the shards step {n_push} × lr = {step:.3g} at "
                "once — scale lr down as n_push grows.")
    return ("The run was stable but did not get far enough: the budget allows more messages, "
            "or a larger step per push (lr·n_push), without diverging.")
