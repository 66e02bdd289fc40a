"""Sandblaster L-BFGS: batch optimisation driven by a coordinator (lesson 07).

DistBelief's second optimiser (Dean et al., 2012). A single *coordinator* (here, the
driver process) runs L-BFGS, but it never holds a parameter vector: it sends the
parameter-server shards small commands — "dot these two vectors", "q += α·y" — and each
shard executes them on its own slice and keeps L-BFGS's history (the last ``memory``
pairs s_i, y_i) locally. Only scalars travel to the coordinator.

The full-batch gradient is computed by the model replicas, each on small *slices* of
the data handed out one at a time, so fast replicas take more slices than slow ones
(load balancing). When no slice is left but some are still running on a slow replica,
the coordinator gives a copy of the oldest one to an idle replica — a *backup task*,
as in MapReduce — and takes whichever copy finishes first; the shards count every
slice once.
"""
from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from multiprocess.connection import wait

from ddl_lab.parameter_server.downpour import DownpourRun, Setup
from ddl_lab.parameter_server.downpour import run as downpour_run
from ddl_lab.parameter_server.errors import ParameterServerError
from ddl_lab.parameter_server.problem import (Problem, compute_gradient, emulation,
                                              one_blas_thread)
from ddl_lab.parameter_server.roles import Roles, from_driver, tell_driver
from ddl_lab.parameter_server.server import ParameterServer, ServerReport
from ddl_lab.parameter_server.wire import ShardClient
from ddl_lab.timeline import Timeline

__all__ = ["SandblasterRun", "Coordinator", "sandblaster_replica", "run", "distbelief"]


_BACKUP_AFTER = 1.2        # a slice running longer than this × the median task gets a backup


def _slices(m: int, n: int) -> list[np.ndarray]:
    return np.array_split(np.arange(m), n)


def sandblaster_replica(parent: Any, rid: int, addresses: list, ranges: list,
                        authkey: bytes, problem: Problem, slices: int, slow: float,
                        timeout: float) -> dict:
    """A Sandblaster replica: for each task (batch, slice, vector), fetch the vector from
    the shards (once per batch), compute the loss and gradient sums over that slice of
    the data, add the gradient to the shards' g_new, and report to the coordinator."""
    client = ShardClient(addresses, ranges, authkey, rid, timeout)
    tl = Timeline(rank=rid)
    parts = _slices(len(problem), slices)
    tell_driver(parent, "ready")
    cached: tuple[int | None, np.ndarray | None] = (None, None)
    done = 0
    try:
        while True:
            msg = from_driver(parent, timeout)
            if msg[0] == "stop":
                break
            _, batch, slice_id, name = msg
            if cached[0] != batch:
                with tl.span("communicate"):
                    cached = (batch, client.get(name))
            rows = parts[slice_id]
            loss, grad = compute_gradient(problem, cached[1], rows, tl, slow)
            with tl.span("communicate"):
                client.accumulate(batch, slice_id, grad * len(rows))
            tell_driver(parent, "done", batch, slice_id, loss * len(rows))
            done += 1
    finally:
        client.close()
    return {"slices": done, "timeline": tl}


class Coordinator:
    """Drives L-BFGS through vector operations on the shards (lesson 07).

    It holds scalars only: the ρ_i = 1/(s_i·y_i) of the history, the step size, the
    loss. ``run(ops)`` executes a list of operations on every shard and adds up the
    shards' partial dot products.
    """

    def __init__(self, client: ShardClient, ps: ParameterServer, reps: Roles, m: int,
                 slices: int, backup: bool, memory: int, timeout: float):
        self.client, self.ps, self.reps = client, ps, reps
        self.m, self.slices, self.backup, self.memory = m, slices, backup, memory
        self.timeout = timeout
        self.history: deque[tuple[int, float]] = deque(maxlen=memory)   # (slot, ρ)
        self.gamma = 1.0
        self.pairs = 0
        self.batch_id = 0
        self.running: dict[int, tuple[int, int, float]] = {}   # replica -> (batch, slice, t)
        self.batch_log: list[dict] = []
        self.lost: list[int] = []
        self.task_times: list[float] = []
        self.round_trips = 0

    # -- vector operations on the shards
    def run(self, ops: list, batch: int | None = None) -> list:
        """Execute ``ops`` on every shard; per op, the sum of the shards' results (dots)."""
        self.round_trips += 1
        per_shard = self.client.ops(ops, batch, self.slices)
        return [sum(r[i] for r in per_shard) if per_shard[0][i] is not None else None
                for i in range(len(ops))]

    def direction(self) -> float:
        """d = −H·g by the two-loop recursion, on the shards; returns d·g."""
        alphas, pending = {}, [("copy", "q", "g")]
        for slot, rho in reversed(self.history):          # newest to oldest
            a = rho * self.run(pending + [("dot", f"s{slot}", "q")])[-1]
            alphas[slot] = a
            pending = [("axpy", "q", -a, f"y{slot}")]
        pending.append(("scale", "q", self.gamma))         # H0 = γI, γ = s·y / y·y
        for slot, rho in self.history:                     # oldest to newest
            b = rho * self.run(pending + [("dot", f"y{slot}", "q")])[-1]
            pending = [("axpy", "q", alphas[slot] - b, f"s{slot}")]
        return self.run(pending + [("copy", "d", "q"), ("scale", "d", -1.0),
                                   ("dot", "d", "g")])[-1]

    def remember(self) -> None:
        """Store s = trial − θ and y = g_new − g on the shards; θ ← trial, g ← g_new."""
        sy, yy = self.run([("copy", "s_new", "trial"), ("axpy", "s_new", -1.0, "theta"),
                           ("copy", "y_new", "g_new"), ("axpy", "y_new", -1.0, "g"),
                           ("copy", "theta", "trial"), ("copy", "g", "g_new"),
                           ("dot", "s_new", "y_new"), ("dot", "y_new", "y_new")])[-2:]
        if sy > 1e-10 * max(yy, 1e-30):                     # keep H positive definite
            slot = self.pairs % self.memory                 # overwrites the oldest pair
            self.run([("copy", f"s{slot}", "s_new"), ("copy", f"y{slot}", "y_new")])
            self.history.append((slot, 1.0 / sy))
            self.pairs += 1
            self.gamma = sy / yy

    # -- the distributed gradient, with backup tasks
    def _late(self, b: int, done: dict, copies: Counter) -> list[tuple[float, int]]:
        """Slices of batch b running (once) for longer than _BACKUP_AFTER × the median task
        time, oldest first: the stragglers worth a backup copy."""
        if len(self.task_times) < 3:
            return []
        limit = time.perf_counter() - _BACKUP_AFTER * float(np.median(self.task_times[-50:]))
        return sorted((t, s) for bb, s, t in self.running.values()
                      if bb == b and s not in done and copies[s] == 1 and t < limit)

    def _dispatch(self, b: int, at: str, todo: deque, done: dict, copies: Counter) -> int:
        """Give every idle replica a slice: the next one, else a backup of a late one."""
        backups = 0
        for r in self.reps.running():
            if r in self.running:
                continue
            if todo:
                slice_id = todo.popleft()
            else:
                late = self._late(b, done, copies) if self.backup else []
                if not late:
                    break
                slice_id = late[0][1]
                backups += 1
            copies[slice_id] += 1
            self.reps.tell(r, "task", b, slice_id, at)
            self.running[r] = (b, slice_id, time.perf_counter())
        return backups

    def evaluate(self, at: str) -> float:
        """Loss at the shards' vector ``at``; its gradient lands in the shards' g_new."""
        self.batch_id += 1
        b, t_start = self.batch_id, time.perf_counter()
        self.run([("new_batch", b)])
        todo, done, copies = deque(range(self.slices)), {}, Counter()
        backups = wasted = 0
        deadline = time.monotonic() + self.timeout
        while len(done) < self.slices:
            backups += self._dispatch(b, at, todo, done, copies)
            if time.monotonic() > deadline:
                missing = sorted(set(range(self.slices)) - set(done))
                raise ParameterServerError(f"batch {b}: slices {missing} not computed within "
                                           f"{self.timeout:g} s")
            pause = 0.002 if self.backup and not todo else 0.5   # watch for late slices
            ready = wait(self.reps.waitables() + self.ps.roles.waitables(), timeout=pause)
            self.ps.check(self.ps.roles.collect(ready))
            for ev in self.reps.collect(ready):
                task = self.running.pop(ev.index, None)
                if ev.kind == "msg" and ev.payload[0] == "done":
                    _, bb, slice_id, loss_sum = ev.payload
                    self.task_times.append(time.perf_counter() - task[2])
                    if bb == b and slice_id not in done:
                        done[slice_id] = loss_sum
                    else:
                        wasted += 1                        # the other copy was faster
                elif ev.kind == "died":                    # its slice goes back in the queue
                    self.lost.append(ev.index)
                    if task and task[0] == b and task[1] not in done:
                        copies[task[1]] -= 1
                        if not copies[task[1]]:
                            todo.appendleft(task[1])
                    if not self.reps.running():
                        raise ParameterServerError("every replica died")
                else:
                    raise self.reps.error(ev)
        self.run([("scale", "g_new", 1.0 / self.m)], batch=b)   # after every slice arrived
        self.batch_log.append({"batch": b, "seconds": time.perf_counter() - t_start,
                               "backups": backups, "wasted": wasted})
        return sum(done.values()) / self.m


@dataclass
class SandblasterRun:
    """Loss after every L-BFGS iteration, batch times, backups, timelines (lesson 07)."""

    t: np.ndarray                  # seconds since the start
    loss: np.ndarray
    examples: np.ndarray           # examples whose gradient was computed so far
    accuracy: np.ndarray           # test accuracy after each iteration
    theta: np.ndarray
    batches: list[dict]            # per batch: seconds, backups issued, copies wasted
    replicas: list[dict | None]
    report: ServerReport
    t0: float
    wall: float
    round_trips: int
    label: str = "Sandblaster L-BFGS"
    example_cost: float = 0.0      # the problem's padded compute per example (s)
    slowness: tuple[float, ...] = ()

    @property
    def emulated(self) -> str:
        """What this run's times emulate ('' if nothing): padded compute, a straggler."""
        return emulation(self.example_cost, 0, self.slowness)

    @property
    def final_loss(self) -> float:
        return float(self.loss[-1])

    def time_to(self, target: float) -> float:
        hit = np.flatnonzero(self.loss <= target)
        return float(self.t[hit[0]]) if len(hit) else float("inf")

    def timelines(self) -> list[Timeline]:
        return [r["timeline"] if r else Timeline(rank=i) for i, r in enumerate(self.replicas)]


def run(problem: Problem, replicas: int = 4, shards: int = 2, iterations: int = 30,
        memory: int = 5, slices: int = 16, backup: bool = True,
        slow: float | tuple[float, ...] = 1.0, duration: float | None = None,
        seed: int = 0, timeout: float = 30.0) -> SandblasterRun:
    """Sandblaster L-BFGS on real shard and replica processes (lesson 07).

    ``slow`` makes the last replica that many times slower (or gives every replica its
    factor); ``backup`` turns backup tasks on or off. Stops after ``iterations`` L-BFGS
    steps or ``duration`` seconds.
    """
    for name, v in (("replicas", replicas), ("iterations", iterations), ("memory", memory),
                    ("slices", slices)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if slices > len(problem):
        raise ValueError(f"cannot cut {len(problem)} examples into {slices} slices")
    factors = Setup(replicas=replicas, slow=slow).slowness()
    with ParameterServer(problem.init(seed), shards, "sgd", 0.0, timeout=timeout) as ps:
        reps = Roles(replicas, "replica")
        try:
            for r in range(replicas):
                reps.start(r, sandblaster_replica, r, *ps.client_args(), problem, slices,
                           factors[r], timeout)
            for r in range(replicas):
                reps.expect(r, "ready", timeout + 30.0)
            coord = Coordinator(ps.connect("coordinator"), ps, reps, len(problem), slices,
                                backup, memory, timeout)
            t0 = time.perf_counter()
            with one_blas_thread(), ps.guard():
                curve = _lbfgs(coord, problem, iterations, duration, t0)
            wall = time.perf_counter() - t0
            for r in reps.running():
                reps.tell(r, "stop")
            results: list[dict | None] = [None] * replicas
            deadline = time.monotonic() + timeout
            while reps.running() and time.monotonic() < deadline:
                for ev in reps.events(0.5):
                    if ev.kind == "done":
                        results[ev.index] = ev.payload
                    elif ev.kind == "err":
                        raise reps.error(ev)
            report = ps.finish()
        finally:
            reps.close()
    t, loss, batches, accuracy = (np.array(c) for c in zip(*curve))
    return SandblasterRun(t, loss, batches * len(problem), accuracy, report.theta,
                          coord.batch_log, results, report, t0, wall, coord.round_trips,
                          example_cost=problem.example_cost, slowness=tuple(factors))


def _lbfgs(coord: Coordinator, problem: Problem, iterations: int, duration: float | None,
           t0: float) -> list[tuple[float, float, int, float]]:
    """L-BFGS with a backtracking (Armijo) line search; (time, loss, batches, test
    accuracy) after every step (the accuracy is the driver's look, not part of L-BFGS)."""
    coord.run([("copy", "trial", "theta")])
    f = coord.evaluate("trial")
    coord.run([("copy", "g", "g_new")])
    curve = [(time.perf_counter() - t0, f, 1, problem.accuracy(coord.client.get("theta")))]
    for _ in range(iterations):
        dg = coord.direction()
        if not dg < 0:                                   # not downhill: forget the history
            coord.history.clear()
            dg = coord.direction()
        step = 1.0
        for _ in range(20):
            coord.run([("copy", "trial", "theta"), ("axpy", "trial", step, "d")])
            f_new = coord.evaluate("trial")
            if f_new <= f + 1e-4 * step * dg:
                break
            step *= 0.5
        else:
            break                                        # no decrease along d: converged
        coord.remember()
        f = f_new
        curve.append((time.perf_counter() - t0, f, coord.batch_id,
                      problem.accuracy(coord.client.get("theta"))))
        if duration and curve[-1][0] >= duration:
            break
    return curve


# ------------------------------------------------------------------ DistBelief's comparison

def distbelief(problem: Problem, replicas: int = 4, shards: int = 2, steps: int = 250,
               adagrad_lr: float = 0.1, sgd_lr: float = 0.3, iterations: int = 30,
               seed: int = 0) -> dict[str, DownpourRun | SandblasterRun]:
    """Dean et al.'s figure at laptop scale: Downpour SGD with Adagrad, Downpour SGD with a
    fixed rate, and Sandblaster L-BFGS, on the same replicas and shards."""
    base = Setup(replicas=replicas, shards=shards, steps=steps, seed=seed)
    runs: dict[str, Any] = {
        "Downpour SGD + Adagrad": downpour_run(problem, base, rule="adagrad", lr=adagrad_lr),
        "Downpour SGD, fixed rate": downpour_run(problem, base, rule="sgd", lr=sgd_lr),
        "Sandblaster L-BFGS": run(problem, replicas, shards, iterations, seed=seed)}
    for label, r in runs.items():
        r.label = label
    return runs
