"""One shard of the parameter server: its state and what it does with each request (lesson 07).

The shard process (``server.py``) feeds ``Shard.handle`` what arrives on its sockets;
the tests call it directly. The rules it applies are in ``rules.py``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Hashable

import numpy as np

from ddl_lab.parameter_server.rules import (PUSH, _ssp_must_wait, _staleness_lr,
                                            validate)

__all__ = ["Shard"]


@dataclass
class _Log:
    t: list = field(default_factory=list)
    replica: list = field(default_factory=list)
    staleness: list = field(default_factory=list)
    lr: list = field(default_factory=list)


class Shard:
    """The state of one shard and what it does with each request (lesson 07).

    ``handle(sender, request)`` returns the replies to send as (receiver, message) pairs;
    the shard process feeds it what arrives on its sockets, and the tests call it
    directly. Requests: ``join``, ``pull``, ``push``, ``leave``, ``snapshot`` (an
    ungated read for the driver), ``get``/``accumulate``/``ops`` (Sandblaster).
    ``gate``, ``push`` and ``rate`` replace the SSP gate, the rule's push handler and the
    staleness-aware rate of ``rules.py`` (the exercise plugs the learner's functions in).
    """

    def __init__(self, index: int, theta: np.ndarray, *, rule: str = "sgd", lr: float = 0.1,
                 eps: float = 1e-8, mode: str = "async", s: int = 2,
                 staleness_aware: bool = False, gate: Callable | None = None,
                 push: Callable | None = None, rate: Callable | None = None):
        validate(rule, lr, mode, s)
        self.index, self.rule, self.lr, self.eps, self.mode = index, rule, lr, eps, mode
        self.s = 0 if mode == "bsp" else s
        self.staleness_aware = staleness_aware
        self.gate = gate or _ssp_must_wait
        self.push_fn = push or PUSH[rule]
        self.rate = rate or _staleness_lr
        self.vectors: dict[str, np.ndarray] = {"theta": np.array(theta, dtype=np.float64)}
        self.G = np.zeros_like(self.vectors["theta"])
        self.version = 0                               # gradients applied so far
        self.clocks: dict[Hashable, int] = {}          # live replicas -> pushes made
        self.pending: list[tuple[Hashable, float]] = []
        self.rounds: dict[int, list] = {}              # BSP: clock -> [(grad, who, version)]
        self.stopping = False
        self.log = _Log()
        self.gaps: list[tuple[float, Hashable, int]] = []
        self.joins: list[tuple[float, Hashable, int]] = []
        self.leaves: list[tuple[float, Hashable]] = []
        self.lost: list[tuple[float, Hashable]] = []
        self.pulls = self.pushes = self.requests = 0
        self.busy = 0.0                                # seconds inside handle()
        self.idle = 0.0                                # seconds the process waited for work
        self.born = time.perf_counter()
        self.batch: int | None = None                  # Sandblaster
        self.seen: set[int] = set()
        self.deferred: list[tuple] = []
        self.discarded = 0

    @property
    def theta(self) -> np.ndarray:
        return self.vectors["theta"]

    # -- dispatch
    def handle(self, sender: Hashable, request: tuple) -> list[tuple[Hashable, tuple]]:
        t = time.perf_counter()
        self.requests += 1
        handler = getattr(self, "_on_" + str(request[0]), None)
        if handler is None:
            raise ValueError(f"shard {self.index}: unknown request {request[0]!r} from "
                             f"{sender!r}")
        try:
            return handler(sender, *request[1:])
        finally:
            self.busy += time.perf_counter() - t

    # -- membership and the consistency gate
    def _on_join(self, who: Hashable) -> list:
        if who in self.clocks:
            raise ValueError(f"shard {self.index}: {who!r} joined twice")
        clock = min(self.clocks.values()) if self.clocks else 0   # late joiners start level
        self.clocks[who] = clock
        self.joins.append((time.perf_counter(), who, clock))
        return [(who, ("joined", clock, self.version))]

    def _on_leave(self, who: Hashable) -> list:
        if self.clocks.pop(who, None) is not None:
            self.leaves.append((time.perf_counter(), who))
        return self._progress()

    def lose(self, who: Hashable) -> list:
        """``who``'s connection dropped without a goodbye: report it, stop waiting for it."""
        if self.clocks.pop(who, None) is not None:
            self.lost.append((time.perf_counter(), who))
        self.pending = [p for p in self.pending if p[0] != who]
        return self._progress()

    def stop(self) -> list:
        """The driver ends the run: every waiting and every later pull is answered 'stop'."""
        self.stopping = True
        return self._release_ready()

    def _must_wait(self, who: Hashable) -> bool:
        if self.mode == "async" or who not in self.clocks:
            return False
        verdict = self.gate(self.clocks[who], list(self.clocks.values()), self.s)
        if not isinstance(verdict, (bool, np.bool_)):
            raise TypeError(f"the gate must return True (wait) or False (go), got "
                            f"{verdict!r} ({type(verdict).__name__})")
        return bool(verdict)

    def _release(self, who: Hashable, arrived: float, opened: float) -> tuple:
        """The answer to a pull that arrived at ``arrived`` and passed the gate at ``opened``."""
        if who in self.clocks:
            self.gaps.append((opened, who, self.clocks[who] - min(self.clocks.values())))
        return (who, ("params", self.theta.copy(), self.version, opened, arrived))

    def _release_ready(self) -> list:
        out, still = [], []
        for who, arrived in self.pending:
            if self.stopping:
                out.append((who, ("stop",)))
            elif self._must_wait(who):
                still.append((who, arrived))
            else:
                out.append(self._release(who, arrived, time.perf_counter()))
        self.pending = still
        return out

    def _on_pull(self, who: Hashable) -> list:
        self.pulls += 1
        if self.stopping:
            return [(who, ("stop",))]
        now = time.perf_counter()
        if self._must_wait(who):
            self.pending.append((who, now))
            return []
        return [self._release(who, now, now)]

    def _on_snapshot(self, who: Hashable) -> list:
        now = time.perf_counter()
        return [(who, ("params", self.theta.copy(), self.version, now, now))]

    # -- updates
    def _on_push(self, who: Hashable, grad: np.ndarray, version_read: int) -> list:
        self.pushes += 1
        grad = np.asarray(grad, dtype=np.float64)
        if grad.shape != self.theta.shape:
            raise ValueError(f"shard {self.index}: {who!r} pushed {grad.shape[0] if grad.ndim else 1}"
                             f" values, but this shard holds {self.theta.size} parameters")
        if self.mode == "bsp" and who in self.clocks:      # held until the clock is complete
            self.rounds.setdefault(self.clocks[who], []).append((grad, who, version_read))
            self.clocks[who] += 1
        else:
            self._apply(grad, who, self.version - version_read)
            if who in self.clocks:
                self.clocks[who] += 1
        return self._progress()

    def _apply(self, grad: np.ndarray, who: Hashable, tau: int) -> None:
        """Apply one gradient that is ``tau`` updates stale, and record it."""
        lr = self.lr
        if self.staleness_aware:
            lr = self.rate(self.lr, tau)
            try:
                lr = float(lr)
            except (TypeError, ValueError):
                raise TypeError(f"the staleness-aware rate must be a number, got {lr!r}") from None
            if not np.isfinite(lr):
                raise ValueError(f"the staleness-aware rate for staleness {tau} is {lr}")
        result = self.push_fn(self.theta, grad, self.G, lr, self.eps)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"the push handler must return (theta, G), got "
                            f"{type(result).__name__}")
        theta, G = (np.asarray(a, dtype=np.float64) for a in result)
        if theta.shape != self.theta.shape or G.shape != self.G.shape:
            raise ValueError(f"the push handler returned θ of shape {theta.shape} and G of "
                             f"shape {G.shape}; both must keep the shard's shape "
                             f"{self.theta.shape}")
        self.vectors["theta"], self.G = theta, G
        self.version += 1
        self.log.t.append(time.perf_counter())
        self.log.replica.append(who)
        self.log.staleness.append(tau)
        self.log.lr.append(lr)

    def _progress(self) -> list:
        """Apply every BSP clock all live replicas have pushed, then open what can go.

        A clock's gradients were all computed on the same θ: they are applied one after
        another (for SGD, θ − lr·Σg) and each counts as fresh (staleness 0).
        """
        while self.rounds:
            clock = min(self.rounds)
            if self.clocks and min(self.clocks.values()) <= clock:
                break
            base = self.version
            for grad, who, version_read in self.rounds.pop(clock):
                self._apply(grad, who, base - version_read)
        return self._release_ready()

    # -- Sandblaster: vectors that stay on the shard
    def _on_get(self, who: Hashable, name: str) -> list:
        return [(who, ("vector", self._vector(name).copy()))]

    def _on_accumulate(self, who: Hashable, batch: int, slice_id: int,
                       part: np.ndarray) -> list:
        if batch != self.batch or slice_id in self.seen:    # a backup task's late twin
            self.discarded += 1
            return []
        self.vectors["g_new"] += part
        self.seen.add(slice_id)
        out, still = [], []
        for item in self.deferred:
            (out if self._batch_complete(item[1], item[2]) else still).append(item)
        self.deferred = still
        return [(w, ("results", self._execute(ops))) for w, _, _, ops in out]

    def _on_ops(self, who: Hashable, batch: int | None, n_slices: int, ops: list) -> list:
        if batch is not None and not self._batch_complete(batch, n_slices):
            self.deferred.append((who, batch, n_slices, ops))
            return []
        return [(who, ("results", self._execute(ops)))]

    def _batch_complete(self, batch: int, n_slices: int) -> bool:
        return batch == self.batch and len(self.seen) >= n_slices

    def _vector(self, name: str) -> np.ndarray:
        if name not in self.vectors:
            raise KeyError(f"shard {self.index} has no vector {name!r} (it has "
                           f"{sorted(self.vectors)})")
        return self.vectors[name]

    def _execute(self, ops: list) -> list:
        results = []
        for op in ops:
            kind, args = op[0], op[1:]
            value = None
            if kind == "dot":
                value = float(self._vector(args[0]) @ self._vector(args[1]))
            elif kind == "axpy":                       # dst += alpha * src
                self._vector(args[0])[:] += args[1] * self._vector(args[2])
            elif kind == "copy":                       # dst = src
                self.vectors[args[0]] = self._vector(args[1]).copy()
            elif kind == "scale":                      # dst *= alpha
                self._vector(args[0])[:] *= args[1]
            elif kind == "new_batch":
                self.batch, self.seen = args[0], set()
                self.vectors["g_new"] = np.zeros_like(self.theta)
            else:
                raise ValueError(f"shard {self.index}: unknown vector operation {kind!r}")
            results.append(value)
        return results

    # -- the end
    def report(self) -> dict:
        return {"index": self.index, "theta": self.theta, "G": self.G,
                "version": self.version,
                "t": np.array(self.log.t), "replica": list(self.log.replica),
                "staleness": np.array(self.log.staleness, dtype=int),
                "lr": np.array(self.log.lr), "gaps": self.gaps, "joins": self.joins,
                "leaves": self.leaves, "lost": self.lost, "pulls": self.pulls,
                "pushes": self.pushes, "requests": self.requests, "busy": self.busy,
                "idle": self.idle, "alive": time.perf_counter() - self.born,
                "discarded": self.discarded}

