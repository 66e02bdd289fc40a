"""Downpour SGD: model replicas around a sharded parameter server (lesson 07).

DistBelief (Dean et al., 2012) trains one model with many *replicas*, each on its own
part of the data. A replica fetches θ from the shards every ``n_fetch`` steps, computes
gradients on its mini-batches, and pushes the accumulated gradient every ``n_push``
steps — asynchronously: nobody waits for anybody. ``run`` does it for real: the shards
(``server.py``) and every replica are separate processes talking over
loopback sockets; the driver (this process) samples θ to draw the loss against wall
time, starts replicas late (warm start), kills one if asked, and collects what every
replica did (a ``Timeline``) and the staleness of every update the shards applied.

``Setup`` holds the knobs: consistency (``bsp``/``ssp``/``async``), Adagrad on the
shards, a straggler (``slow``), staleness on purpose (``delay``), Zhang et al.'s
staleness-aware rate, and EASGD (``algorithm='easgd'``). The model is a small MLP on
the 8×8 digits in numpy (``problem.py``). The loops a lesson prints are the short ones of
``textbook.py``; the ones here also record a timeline, a delay and local steps. Pictures:
``plots.py``.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
from multiprocess.connection import wait

from ddl_lab.parameter_server.errors import ParameterServerError
from ddl_lab.parameter_server.problem import (Problem, compute_gradient, digits_problem,
                                              emulation, one_blas_thread)
from ddl_lab.parameter_server.roles import Roles, from_driver, tell_driver
from ddl_lab.parameter_server.rules import validate
from ddl_lab.parameter_server.server import ParameterServer, ServerReport
from ddl_lab.parameter_server.wire import Pulled, ShardClient
from ddl_lab.timeline import Timeline

__all__ = ["Problem", "digits_problem", "Setup", "DownpourRun", "downpour_replica",
           "easgd_replica", "replica_main", "run", "compare", "time_to_target_table"]


# ------------------------------------------------------------------ the knobs

@dataclass(frozen=True)
class Setup:
    """Everything one Downpour run needs besides the problem (lesson 07).

    Args:
        replicas, shards: processes of each kind.
        mode, s: 'bsp', 'ssp' (a replica may lead the slowest by at most s clocks) or
            'async'. BSP/SSP count a clock per push and pull every clock.
        rule, lr: the shards' update, 'sgd' or 'adagrad' (EASGD always uses the
            elastic move).
        n_fetch, n_push: a replica fetches θ every n_fetch steps and pushes its
            accumulated gradient every n_push steps.
        steps, batch: mini-batch steps per replica, examples per step.
        slow: a number makes the last replica that many times slower; a sequence gives
            every replica its factor. A slow replica computes slow× as long (it sleeps
            (slow − 1)× its compute time), like a slower machine.
        hiccup: the probability that a step of any replica takes 10× as long (a
            transient straggler: a noisy neighbour, a pause).
        delay: compute every gradient on the θ pulled ``delay`` pulls ago — staleness on
            purpose, as one replica among delay + 1 would see it.
        staleness_aware: the shards divide lr by each gradient's staleness (Zhang et al.).
        algorithm, alpha, tau, local_lr: 'downpour' or 'easgd' (every tau local steps a
            replica and the centre move toward each other by alpha·(x_i − x̃); local
            steps use local_lr). Downpour replicas also step locally between fetches
            when local_lr is given (as DistBelief's client does).
        join_at: seconds at which each replica starts (a number: replica 0 at 0, the
            others at that time: a warm start).
        kill_at: {replica: seconds}: terminate that replica's process then.
        kill_shard_at: {shard: seconds}: terminate a shard's process (the run must end
            with ``ShardDied``).
        duration, target: stop after that many seconds / once the loss is that low.
        eval_every: seconds between the driver's loss measurements.
        timeout: the longest any single wait may take.
        gate, push, rate: the learner's SSP gate, push handler, staleness rate.
        replica: a replica loop to run instead of ``downpour_replica`` (same signature;
            it may be written in a notebook cell; it may return its stats or None).
    """

    replicas: int = 4
    shards: int = 2
    mode: str = "async"
    s: int = 3
    rule: str = "adagrad"
    lr: float = 0.1
    n_fetch: int = 1
    n_push: int = 1
    steps: int = 300
    batch: int = 32
    slow: float | tuple[float, ...] = 1.0
    hiccup: float = 0.0
    delay: int = 0
    staleness_aware: bool = False
    algorithm: str = "downpour"
    alpha: float | None = None
    tau: int = 4
    local_lr: float | None = None
    join_at: float | tuple[float, ...] = 0.0
    kill_at: dict | None = None
    kill_shard_at: dict | None = None
    duration: float | None = None
    target: float | None = None
    eval_every: float = 0.05
    seed: int = 0
    timeout: float = 30.0
    gate: Callable | None = field(default=None, repr=False)
    push: Callable | None = field(default=None, repr=False)
    rate: Callable | None = field(default=None, repr=False)
    replica: Callable | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for name in ("replicas", "shards", "n_fetch", "n_push", "steps", "batch", "tau"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        validate(self.rule, self.lr, self.mode, self.s)       # rule, lr, mode, the bound s
        if self.mode != "async" and self.n_fetch != self.n_push:
            raise ValueError(f"{self.mode.upper()} counts a clock per push and pulls at every "
                             f"clock, so n_fetch must equal n_push (got {self.n_fetch} and "
                             f"{self.n_push}); use mode='async' for Downpour's free rates")
        if self.algorithm not in ("downpour", "easgd"):
            raise ValueError(f"algorithm must be 'downpour' or 'easgd', got {self.algorithm!r}")
        if self.delay < 0 or (self.delay and self.n_fetch != 1):
            raise ValueError(f"delay must be >= 0 and needs n_fetch=1, got delay={self.delay}"
                             f", n_fetch={self.n_fetch}")
        if not 0 <= self.hiccup < 1:
            raise ValueError(f"hiccup is a probability in [0, 1), got {self.hiccup!r}")
        if any(f < 1 for f in self.slowness()):
            raise ValueError(f"slow factors must be >= 1 (1 = normal speed), got {self.slow!r}")
        if any(t < 0 for t in self.start_times()):
            raise ValueError(f"join_at must be >= 0 seconds, got {self.join_at!r}")
        for name, n, kills in (("kill_at", self.replicas, self.kill_at),
                               ("kill_shard_at", self.shards, self.kill_shard_at)):
            for i, t in (kills or {}).items():
                if not 0 <= i < n or t < 0:
                    raise ValueError(f"{name} maps an index in 0..{n - 1} to a time >= 0, "
                                     f"got {i!r}: {t!r}")
        if self.alpha is not None and not 0 < self.alpha < 1:
            raise ValueError(f"EASGD's alpha must be between 0 and 1, got {self.alpha!r}")
        if not self.timeout > 0 or not self.eval_every > 0:
            raise ValueError("timeout and eval_every must be positive numbers of seconds")

    def slowness(self) -> list[float]:
        """Each replica's slow factor."""
        if isinstance(self.slow, (int, float, np.number)):
            return [1.0] * (self.replicas - 1) + [float(self.slow)]
        if len(self.slow) != self.replicas:
            raise ValueError(f"slow has {len(self.slow)} factors for {self.replicas} replicas")
        return [float(f) for f in self.slow]

    def start_times(self) -> list[float]:
        """When each replica starts, in seconds after the first."""
        if isinstance(self.join_at, (int, float, np.number)):
            return [0.0] + [float(self.join_at)] * (self.replicas - 1)
        if len(self.join_at) != self.replicas:
            raise ValueError(f"join_at has {len(self.join_at)} times for {self.replicas} "
                             "replicas")
        return [float(t) for t in self.join_at]

    @property
    def elastic_alpha(self) -> float:
        return self.alpha if self.alpha is not None else 0.9 / self.replicas

    def describe(self) -> str:
        mode = f"SSP(s={self.s})" if self.mode == "ssp" else self.mode.upper()
        if self.mode == "async":
            mode = "async"
        rule = "EASGD" if self.algorithm == "easgd" else self.rule
        extra = " lr/τ" if self.staleness_aware else ""
        return f"{mode}, {rule} lr={self.lr:g}{extra}"


# ------------------------------------------------------------------ a replica

def _record_pull(tl: Timeline, got: Pulled) -> float:
    """Timeline spans of one pull; returns the seconds spent waiting at the gate."""
    if got.held > 1e-4:
        tl.add("communicate", got.sent, got.arrived)
        tl.add("wait", got.arrived, got.opened)
        tl.add("communicate", got.opened, got.received)
        return got.held
    tl.add("communicate", got.sent, got.received)
    return 0.0


def _slowdown(setup: Setup, rid: int, rng: np.random.Generator) -> float:
    """This step's slow factor: the replica's own, times 10 on a hiccup."""
    hiccup = setup.hiccup and rng.random() < setup.hiccup
    return setup.slowness()[rid] * (10.0 if hiccup else 1.0)


def downpour_replica(client: ShardClient, problem: Problem, setup: Setup, rid: int,
                     tl: Timeline) -> dict:
    """One Downpour SGD replica (Dean et al. 2012): fetch θ every n_fetch steps, push the
    accumulated gradient every n_push steps, never wait for the other replicas (unless
    the shards' BSP/SSP gate holds a pull)."""
    rng = np.random.default_rng(1000 * setup.seed + rid)
    rows = np.arange(rid % setup.replicas, len(problem), setup.replicas)   # my data
    client.join()
    recent: deque[Pulled] = deque(maxlen=setup.delay + 1)   # pulls, oldest first
    acc = np.zeros(problem.n_params)
    steps = pushes = 0
    waited = 0.0
    while steps < setup.steps:
        if steps % setup.n_fetch == 0:
            got = client.pull()                       # BSP/SSP: the gate may hold this
            if got is None:                           # the driver ended the run
                break
            waited += _record_pull(tl, got)
            recent.append(got)
            theta = got.theta
        used = recent[0]                              # delay > 0: a θ `delay` pulls old
        _, grad = compute_gradient(problem, used.theta if setup.delay else theta,
                                   rng.choice(rows, setup.batch), tl,
                                   _slowdown(setup, rid, rng))
        acc += grad
        if setup.local_lr:                            # DistBelief's client steps locally
            theta = theta - setup.local_lr * grad
        steps += 1
        if steps % setup.n_push == 0 or steps == setup.steps:
            with tl.span("communicate"):
                client.push(acc, used.versions)
            acc[:] = 0.0
            pushes += 1
    client.leave()
    return {"steps": steps, "pushes": pushes, "waited": waited}


def easgd_replica(client: ShardClient, problem: Problem, setup: Setup, rid: int,
                  tl: Timeline) -> dict:
    """Asynchronous EASGD (Zhang, Choromanska, LeCun 2015): SGD on my own x_i; every tau
    steps x_i and the centre x̃ (on the shards) move toward each other by α(x_i − x̃)."""
    rng = np.random.default_rng(1000 * setup.seed + rid)
    rows = np.arange(rid % setup.replicas, len(problem), setup.replicas)
    alpha = setup.elastic_alpha
    lr = setup.local_lr or setup.lr
    client.join()
    got = client.pull()
    x = got.theta.copy() if got is not None else None
    steps = pushes = 0
    while got is not None and steps < setup.steps:
        if steps and steps % setup.tau == 0:
            got = client.pull()
            if got is None:
                break
            _record_pull(tl, got)
            elastic = alpha * (x - got.theta)         # the elastic force between x_i and x̃
            x -= elastic
            with tl.span("communicate"):
                client.push(elastic, got.versions)    # the shards: x̃ += elastic
            pushes += 1
        _, grad = compute_gradient(problem, x, rng.choice(rows, setup.batch), tl,
                                   _slowdown(setup, rid, rng))
        x -= lr * grad
        steps += 1
    client.leave()
    return {"steps": steps, "pushes": pushes, "waited": 0.0}


def replica_main(parent: Any, rid: int, addresses: list, ranges: list, authkey: bytes,
                 problem: Problem, setup: Setup) -> dict | None:
    """A replica process: say ready, wait for 'go' (a warm start waits longer), connect
    to every shard, run the loop, return what it did."""
    tell_driver(parent, "ready")
    msg = from_driver(parent, setup.timeout + max(setup.start_times()) + 60.0)
    if msg[0] != "go":
        return None
    client = ShardClient(addresses, ranges, authkey, rid, setup.timeout)
    tl = Timeline(rank=rid)
    loop = setup.replica or (easgd_replica if setup.algorithm == "easgd" else downpour_replica)
    try:
        stats = loop(client, problem, setup, rid, tl)
    finally:
        client.close()
    return {**(stats or {}), "timeline": tl}


# ------------------------------------------------------------------ a run

@dataclass
class DownpourRun:
    """What one run produced: the loss over wall time, the final model, every update's
    staleness, every replica's timeline, and who was lost (lesson 07)."""

    setup: Setup
    t: np.ndarray                       # seconds since the start, when the loss was measured
    loss: np.ndarray                    # training loss of the shards' θ then
    versions: np.ndarray                # updates shard 0 had applied then
    accuracy: np.ndarray                # test accuracy of that θ
    theta: np.ndarray                   # the final model
    report: ServerReport
    replicas: list[dict | None]         # each replica's stats and timeline (None: killed)
    t0: float                           # perf_counter at the start (timelines' origin)
    wall: float
    started: dict[int, float]           # replica -> when it got 'go'
    killed: dict[int, float]            # replica -> when the driver terminated it
    died: dict[int, float]              # replica -> when it died by itself
    label: str = ""
    example_cost: float = 0.0           # the problem's padded compute per example (s)

    @property
    def emulated(self) -> str:
        """What this run's times emulate ('' if nothing): padded compute, stragglers."""
        return emulation(self.example_cost, self.setup.batch, self.setup.slowness(),
                         self.setup.hiccup)

    @property
    def final_loss(self) -> float:
        return float(self.loss[-1])

    @property
    def staleness(self) -> np.ndarray:
        """Staleness of every gradient the shards applied."""
        return self.report.staleness

    @property
    def lost(self) -> list[tuple[float, int]]:
        """(seconds since the start, replica) of each replica the server lost."""
        return [(t - self.t0, r) for t, r in self.report.lost]

    @property
    def updates(self) -> int:
        return int(self.report.shards[0]["version"])

    @property
    def examples_seen(self) -> np.ndarray:
        """Examples whose gradient had reached the shards at each measurement."""
        per = self.setup.batch * (self.setup.tau if self.setup.algorithm == "easgd"
                                  else self.setup.n_push)
        return self.versions * per

    def time_to(self, target: float) -> float:
        """Seconds until the measured loss first fell to ``target`` (inf if never)."""
        hit = np.flatnonzero(self.loss <= target)
        if not len(hit):
            return float("inf")
        i = hit[0]
        if i == 0:
            return float(self.t[0])
        t0, t1, l0, l1 = self.t[i - 1], self.t[i], self.loss[i - 1], self.loss[i]
        return float(t0 + (t1 - t0) * (l0 - target) / (l0 - l1)) if l0 != l1 else float(t1)

    def timelines(self) -> list[Timeline]:
        return [r["timeline"] if r else Timeline(rank=i) for i, r in enumerate(self.replicas)]


def run(problem: Problem, setup: Setup | None = None, **changes: Any) -> DownpourRun:
    """Train ``problem`` with Downpour SGD (or EASGD) on real shard and replica processes.

    ``run(problem, mode='ssp', s=2, slow=3)`` changes fields of ``Setup()`` (or of
    ``setup``). Raises ``ShardDied`` if a shard dies, ``ParameterServerError`` if a
    replica raises; a replica that dies is reported and the others carry on.
    """
    setup = replace(setup or Setup(), **changes)
    rule = "elastic" if setup.algorithm == "easgd" else setup.rule
    for_replicas = replace(setup, gate=None, push=None, rate=None)
    with ParameterServer(problem.init(setup.seed), setup.shards, rule, setup.lr, setup.mode,
                         setup.s, staleness_aware=setup.staleness_aware, gate=setup.gate,
                         push=setup.push, rate=setup.rate, timeout=setup.timeout) as ps:
        reps = Roles(setup.replicas, "replica")
        try:
            for r in range(setup.replicas):
                reps.start(r, replica_main, r, *ps.client_args(), problem, for_replicas)
            for r in range(setup.replicas):
                reps.expect(r, "ready", setup.timeout + 30.0)
            with one_blas_thread(), ps.guard():
                return _drive(problem, setup, ps, reps)
        finally:
            reps.close()


def _drive(problem: Problem, setup: Setup, ps: ParameterServer, reps: Roles) -> DownpourRun:
    """The driver's loop: start and kill replicas on time, watch the loss, end the run."""
    monitor = ps.connect("monitor")
    starts, kills = setup.start_times(), dict(setup.kill_at or {})
    shard_kills = dict(setup.kill_shard_at or {})
    started: dict[int, float] = {}
    killed: dict[int, float] = {}
    died: dict[int, float] = {}
    results: list[dict | None] = [None] * setup.replicas
    curve: list[tuple[float, float]] = []
    t0 = time.perf_counter()
    next_eval, stopping = 0.0, False
    last_version, last_progress = -1, 0.0
    while reps.running():
        now = time.perf_counter() - t0
        for r in range(setup.replicas):
            if r not in started and starts[r] <= now and not stopping:
                reps.tell(r, "go")
                started[r] = now
        for r, at in kills.items():
            if r not in killed and at <= now and reps.state[r] == "running":
                reps.kill(r)
                killed[r] = now
        for i, at in list(shard_kills.items()):
            if at <= now:
                ps.kill_shard(i)
                del shard_kills[i]
        if now >= next_eval:
            theta, versions = monitor.snapshot()
            curve.append((now, problem.loss(theta), versions[0], problem.accuracy(theta)))
            next_eval = now + setup.eval_every
            if versions[0] != last_version:
                last_version, last_progress = versions[0], now
            elif now - last_progress > setup.timeout:
                raise ParameterServerError(
                    f"no update reached the shards for {setup.timeout:g} s while replicas "
                    f"{reps.running()} were running: a replica stuck at the gate? "
                    f"(mode={setup.mode}, s={setup.s})")
            reached = setup.target is not None and curve[-1][1] <= setup.target
            if not stopping and (reached or (setup.duration and now >= setup.duration)):
                stopping = True
                ps.stop_pulls()
                for r in range(setup.replicas):
                    if r not in started:
                        reps.tell(r, "cancel")
        upcoming = [next_eval] + [starts[r] for r in range(setup.replicas) if r not in started]
        upcoming += [at for r, at in kills.items() if r not in killed]
        upcoming += list(shard_kills.values())
        pause = max(0.0, min(0.1, min(upcoming) - (time.perf_counter() - t0)))
        ready = wait(reps.waitables() + ps.roles.waitables(), timeout=pause)
        ps.check(ps.roles.collect(ready))
        for ev in reps.collect(ready):
            if ev.kind == "done":
                results[ev.index] = ev.payload
            elif ev.kind == "died":
                if ev.index not in killed:
                    died[ev.index] = time.perf_counter() - t0
            else:
                ps.check(ps.roles.events(0.5))        # a dead shard explains it better
                raise reps.error(ev)
    theta, versions = monitor.snapshot()
    wall = time.perf_counter() - t0
    curve.append((wall, problem.loss(theta), versions[0], problem.accuracy(theta)))
    report = ps.finish()
    t, loss, version, accuracy = (np.array(c) for c in zip(*curve))
    return DownpourRun(setup, t, loss, version, accuracy, report.theta, report, results, t0,
                       wall, started, killed, died, setup.describe(), problem.example_cost)


def compare(problem: Problem, setups: dict[str, Setup | dict], base: Setup | None = None
            ) -> dict[str, DownpourRun]:
    """Run several variants one after another; {label: run}. A variant is a Setup or the
    fields to change in ``base``."""
    base = base or Setup()
    runs = {}
    for label, s in setups.items():
        r = run(problem, s) if isinstance(s, Setup) else run(problem, base, **s)
        r.label = label
        runs[label] = r
    return runs



def time_to_target_table(runs: dict[str, DownpourRun], target: float) -> str:
    """A small text table: time to the target loss, updates/s, mean staleness, per run;
    below it, what the runs' times emulate (if anything)."""
    lines = [f"{'run':<28}{'to loss ' + format(target, 'g'):>14}{'updates/s':>11}"
             f"{'mean τ':>8}{'max τ':>7}{'final loss':>12}"]
    for label, r in runs.items():
        tt = r.time_to(target)
        lines.append(f"{label:<28}{(f'{tt:.2f} s' if np.isfinite(tt) else 'not reached'):>14}"
                     f"{r.updates / r.wall:>11.0f}{r.staleness.mean():>8.1f}"
                     f"{r.staleness.max(initial=0):>7d}{r.final_loss:>12.4f}")
    notes = dict.fromkeys(r.emulated for r in runs.values() if r.emulated)
    return "\n".join(lines + [f"(times {n})" for n in notes])
