"""Downpour SGD: model replicas around a sharded parameter server (lesson 07).

DistBelief (Dean et al., 2012) trains one model with many *replicas*, each on its own
part of the data. A replica fetches θ from the shards every ``n_fetch`` steps, computes
gradients on its mini-batches, and pushes the accumulated gradient every ``n_push``
steps — asynchronously: nobody waits for anybody. ``run`` does it for real: the shards
(``parameter_server.py``) and every replica are separate processes talking over
loopback sockets; the driver (this process) samples θ to draw the loss against wall
time, starts replicas late (warm start), kills one if asked, and collects what every
replica did (a ``Timeline``) and the staleness of every update the shards applied.

``Setup`` holds the knobs: consistency (``bsp``/``ssp``/``async``), Adagrad on the
shards, a straggler (``slow``), staleness on purpose (``delay``), Zhang et al.'s
staleness-aware rate, and EASGD (``algorithm='easgd'``). The model is a small MLP on
the 8×8 digits in numpy (``Problem``), so a replica process starts in a fraction of a
second.
"""
from __future__ import annotations

import functools
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
from multiprocess.connection import wait

from ddl_lab.parameter_server.server import (MODES, ParameterServer, ParameterServerError, Pulled,
                               ServerReport, ShardClient, Roles, from_driver, tell_driver)
from ddl_lab.timeline import Timeline

__all__ = ["Problem", "digits_problem", "Setup", "DownpourRun", "downpour_replica",
           "easgd_replica", "compute_gradient", "replica_main", "run", "compare", "plot_loss", "plot_timelines",
           "plot_staleness", "plot_time_split", "plot_consistency", "plot_run", "time_to_target_table",
           "one_blas_thread"]


# ------------------------------------------------------------------ the model

@dataclass
class Problem:
    """An MLP x → tanh(x W1 + b1) W2 + b2 with softmax cross-entropy, in numpy (lesson 07).

    ``hidden=0`` is softmax regression. θ is one flat float64 vector (W1, b1, W2, b2), the
    form the shards slice. ``X_test``/``y_test`` (optional) give a test accuracy.
    ``example_cost`` (seconds per example) is how long the model *would* take: a replica
    pads its numpy compute with sleep up to that, so a step costs what a bigger network's
    would (0: just the numpy MLP, whose 0.1 ms steps leave messaging dominant).
    """

    X: np.ndarray
    y: np.ndarray
    hidden: int = 32
    classes: int = 10
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    example_cost: float = 0.0

    def __len__(self) -> int:
        return len(self.y)

    def shapes(self) -> list[tuple[int, ...]]:
        d = self.X.shape[1]
        if self.hidden == 0:
            return [(d, self.classes), (self.classes,)]
        return [(d, self.hidden), (self.hidden,), (self.hidden, self.classes), (self.classes,)]

    @property
    def n_params(self) -> int:
        return int(sum(np.prod(s) for s in self.shapes()))

    def unpack(self, theta: np.ndarray) -> list[np.ndarray]:
        out, offset = [], 0
        for shape in self.shapes():
            k = int(np.prod(shape))
            out.append(theta[offset:offset + k].reshape(shape))
            offset += k
        return out

    def init(self, seed: int = 0) -> np.ndarray:
        """Weights ~ N(0, 1/fan_in), biases 0."""
        rng = np.random.default_rng(seed)
        parts = []
        for shape in self.shapes():
            parts.append(rng.normal(0.0, shape[0] ** -0.5, shape).ravel() if len(shape) == 2
                         else np.zeros(shape))
        return np.concatenate(parts)

    def _forward(self, theta: np.ndarray, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        params = self.unpack(theta)
        h = X if self.hidden == 0 else np.tanh(X @ params[0] + params[1])
        z = h @ params[-2] + params[-1]
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return h, p / p.sum(axis=1, keepdims=True)

    def loss_grad(self, theta: np.ndarray, rows: np.ndarray | None = None
                  ) -> tuple[float, np.ndarray]:
        """Mean cross-entropy over ``rows`` (all if None) and its gradient."""
        X, y = (self.X, self.y) if rows is None else (self.X[rows], self.y[rows])
        h, p = self._forward(theta, X)
        n = len(y)
        loss = float(-np.log(p[np.arange(n), y] + 1e-12).mean())
        dz = p
        dz[np.arange(n), y] -= 1.0
        dz /= n
        params = self.unpack(theta)
        grads = [h.T @ dz, dz.sum(axis=0)]
        if self.hidden:
            dh = (dz @ params[2].T) * (1.0 - h * h)
            grads = [X.T @ dh, dh.sum(axis=0)] + grads
        return loss, np.concatenate([g.ravel() for g in grads])

    def loss(self, theta: np.ndarray, rows: np.ndarray | None = None) -> float:
        """Mean cross-entropy over ``rows`` (all training examples if None)."""
        X, y = (self.X, self.y) if rows is None else (self.X[rows], self.y[rows])
        with np.errstate(all="ignore"):
            _, p = self._forward(theta, X)
        return float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean())

    def accuracy(self, theta: np.ndarray) -> float:
        """Test accuracy (training accuracy if there is no test set)."""
        X, y = (self.X, self.y) if self.X_test is None else (self.X_test, self.y_test)
        with np.errstate(all="ignore"):
            return float((self._forward(theta, X)[1].argmax(axis=1) == y).mean())


@functools.lru_cache(maxsize=8)
def digits_problem(hidden: int = 32, seed: int = 0, example_cost: float = 50e-6) -> Problem:
    """The 8×8 digits (1347 training, 450 test images) and an MLP with ``hidden`` units;
    each example costs ``example_cost`` seconds of compute (cached: scikit-learn loads
    slowly)."""
    from ddl_lab.ml.data import digits
    if example_cost < 0:
        raise ValueError(f"example_cost must be >= 0 seconds, got {example_cost!r}")
    train, test = digits(seed=seed)
    return Problem(train.X.astype(np.float64), train.y, hidden, 10,
                   test.X.astype(np.float64), test.y, example_cost)


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
            it may be written in a notebook cell).
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
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
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


def compute_gradient(problem: Problem, theta: np.ndarray, rows: np.ndarray, tl: Timeline,
                     slow: float = 1.0) -> tuple[float, np.ndarray]:
    """Loss and gradient on ``rows``, taking as long as the problem's model would: the numpy
    compute, padded with sleep to len(rows)·example_cost, then slow× that on a slower
    machine. Recorded as a 'compute' span and a 'straggle' span."""
    t0 = time.perf_counter()
    loss, grad = problem.loss_grad(theta, rows)
    real = time.perf_counter() - t0
    cost = max(real, len(rows) * problem.example_cost)
    if cost > real:
        time.sleep(cost - real)
    t1 = time.perf_counter()
    tl.add("compute", t0, t1)
    if slow > 1.0:
        time.sleep((slow - 1.0) * cost)
        tl.add("straggle", t1, time.perf_counter())
    return loss, grad


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
    return {**stats, "timeline": tl}


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


_BLAS: Any = None


def one_blas_thread() -> Any:
    """A context in which this process's numpy uses one BLAS thread: the driver's own
    evaluations would otherwise fight the replica processes for the cores."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController
        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1)


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
                       wall, started, killed, died, setup.describe())


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


# ------------------------------------------------------------------ pictures

def plot_loss(runs: dict[str, Any], ax=None, target: float | None = None, x: str = "time"):
    """Training loss of several runs against wall time (``x='time'``) or updates applied
    (``x='updates'``); kills marked ×, warm-start joins dotted."""
    import matplotlib.pyplot as plt
    if x not in ("time", "updates"):
        raise ValueError(f"x must be 'time' or 'updates', got {x!r}")
    ax = ax or plt.gca()
    for i, (label, r) in enumerate(runs.items()):
        color = f"C{i}"
        xs = r.t if x == "time" else r.versions
        ax.plot(xs, r.loss, color=color, lw=1.5, label=label)
        if x != "time":
            continue
        for rep, at in getattr(r, "killed", {}).items():
            y = np.interp(at, r.t, r.loss)
            ax.plot([at], [y], "x", color=color, ms=10, mew=2)
            ax.annotate(f"replica {rep} killed", (at, y), textcoords="offset points",
                        xytext=(5, 8), fontsize=8, color=color)
        for rep, at in getattr(r, "started", {}).items():
            if at > 0.01:
                ax.axvline(at, color=color, ls=":", lw=1)
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=0.8, label=f"target {target:g}")
    ax.set_yscale("log")
    ax.set_xlabel("wall time (s)" if x == "time" else "updates applied by the shards")
    ax.set_ylabel("training loss")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def _window(r: DownpourRun, window: float) -> tuple[list[Timeline], float]:
    """The replicas' spans during ``window`` seconds from the moment the last replica
    started computing (before that, replicas connect and join), and that origin."""
    from ddl_lab.timeline import Span
    tls = r.timelines()
    firsts = [min(s.start for s in tl.spans if s.kind == "compute") for tl in tls
              if any(s.kind == "compute" for s in tl.spans)]
    origin = max(firsts, default=r.t0)
    end = origin + window
    return [Timeline(tl.rank, [Span(s.kind, max(s.start, origin), min(s.end, end), s.step)
                               for s in tl.spans if s.start < end and s.end > origin])
            for tl in tls], origin


def plot_timelines(runs: dict[str, DownpourRun], window: float = 0.15, axes=None):
    """One timeline panel per run: what each replica did during the first ``window``
    seconds (computing, talking to the shards, waiting at the gate, straggling)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from ddl_lab.timeline import COLORS, plot_timeline
    if axes is None:
        fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.3 * len(runs) + 1.2),
                                 squeeze=False, sharex=True)
        axes = axes[:, 0]
        fig.subplots_adjust(hspace=0.45)
    for k, (ax, (label, r)) in enumerate(zip(axes, runs.items())):
        cut, origin = _window(r, window)
        if not any(tl.spans for tl in cut):
            raise ValueError(f"{label}: no replica recorded anything (did every replica die?)")
        plot_timeline(cut, ax=ax, t0=origin)
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_yticks(range(r.setup.replicas),
                      [f"replica {i}" + (f" ×{f:g}" if f > 1 else "")
                       for i, f in enumerate(r.setup.slowness())], fontsize=8)
        ax.set_xlim(0, window)
        ax.get_legend().remove()
        if k < len(runs) - 1:
            ax.set_xlabel("")
    seen = {s.kind for r in runs.values() for tl in r.timelines() for s in tl.spans}
    axes[-1].legend(handles=[Patch(color=c, label=k) for k, c in COLORS.items() if k in seen],
                    loc="upper center", bbox_to_anchor=(0.5, -0.5), ncol=len(seen),
                    fontsize=8, frameon=False)
    return axes


def plot_staleness(runs: dict[str, DownpourRun], ax=None):
    """How stale the applied gradients were, per run (0 = computed on the current θ)."""
    import matplotlib.pyplot as plt
    ax = ax or plt.gca()
    top = max(int(r.staleness.max(initial=0)) for r in runs.values())
    bins = np.arange(top + 2) - 0.5
    for i, (label, r) in enumerate(runs.items()):
        st = r.staleness
        ax.hist(st, bins=bins, histtype="step", lw=2, color=f"C{i}",
                weights=np.full(len(st), 1.0 / max(len(st), 1)),
                label=f"{label}: mean {st.mean():.1f}, max {st.max(initial=0)}")
    ax.set_xlabel("staleness τ of an applied gradient (updates since its pull)")
    ax.set_ylabel("fraction of updates")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_time_split(runs: dict[str, DownpourRun], ax=None, legend: bool = True):
    """Where each replica's time went, per run: computing, talking, waiting, straggling."""
    import matplotlib.pyplot as plt
    from ddl_lab.timeline import COLORS
    ax = ax or plt.gca()
    kinds = ["compute", "communicate", "wait", "straggle"]
    ticks, labels, y = [], [], 0.0
    for label, r in runs.items():
        for i, tl in enumerate(r.timelines()):
            totals, left = tl.totals(), 0.0
            for kind in kinds:
                ax.barh(y, totals.get(kind, 0.0), left=left, color=COLORS[kind],
                        label=kind if not ticks else None)
                left += totals.get(kind, 0.0)
            ticks.append(y)
            labels.append(f"{label} · replica {i}" if label else f"replica {i}")
            y += 1.0
        y += 0.6
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds")
    if legend:
        ax.legend(fontsize=8, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0),
                  frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def plot_consistency(runs: dict[str, DownpourRun], target: float | None = None,
                     window: float = 0.15):
    """Lesson 07's main picture: each run's replica timeline (left), the loss against
    wall time and the staleness histogram (right)."""
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(12, 1.3 * len(runs) + 2.6))
    grid = fig.add_gridspec(len(runs), 2, width_ratios=[1.25, 1], hspace=0.55, wspace=0.25)
    plot_timelines(runs, window, axes=[fig.add_subplot(grid[i, 0]) for i in range(len(runs))])
    half = max(1, len(runs) // 2)
    plot_loss(runs, fig.add_subplot(grid[:half, 1]), target)
    plot_staleness(runs, fig.add_subplot(grid[half:, 1]))
    return fig


def plot_run(r: DownpourRun, window: float = 0.1):
    """One run at a glance: the replicas' timeline, the loss against wall time, and where
    each replica's time went."""
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(12, 5.4))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 1.2], hspace=0.75, wspace=0.3)
    label = r.label or r.setup.describe()
    plot_timelines({label: r}, window, axes=[fig.add_subplot(grid[0, :])])
    plot_loss({label: r}, fig.add_subplot(grid[1, 0]))
    plot_time_split({"": r}, fig.add_subplot(grid[1, 1]), legend=False)
    return fig


def time_to_target_table(runs: dict[str, DownpourRun], target: float) -> str:
    """A small text table: time to the target loss, updates/s, mean staleness, per run."""
    lines = [f"{'run':<28}{'to loss ' + format(target, 'g'):>14}{'updates/s':>11}"
             f"{'mean τ':>8}{'max τ':>7}{'final loss':>12}"]
    for label, r in runs.items():
        tt = r.time_to(target)
        lines.append(f"{label:<28}{(f'{tt:.2f} s' if np.isfinite(tt) else 'not reached'):>14}"
                     f"{r.updates / r.wall:>11.0f}{r.staleness.mean():>8.1f}"
                     f"{r.staleness.max(initial=0):>7d}{r.final_loss:>12.4f}")
    return "\n".join(lines)
