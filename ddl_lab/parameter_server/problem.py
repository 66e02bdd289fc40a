"""The model lesson 07's replicas train, and what one gradient costs (lesson 07).

A small MLP on the 8×8 digits in numpy (``Problem``), so a replica process starts in a
fraction of a second; ``compute_gradient`` pads its compute to what a bigger network's
step would cost (and more on a slower machine), recording it on the replica's timeline.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ddl_lab.timeline import Timeline

__all__ = ["Problem", "digits_problem", "compute_gradient", "emulation", "one_blas_thread"]


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



def emulation(example_cost: float, batch: int = 0, slowness: Sequence[float] = (),
              hiccup: float = 0.0) -> str:
    """What a run's times emulate with sleep, for its printouts and plots (lesson 07): the
    padded compute, stragglers, hiccups; '' when nothing was (real numpy compute)."""
    parts = []
    if example_cost:
        parts.append(f"compute padded to {1e6 * example_cost:g} µs per example" + (
            f" ({1e3 * example_cost * batch:.3g} ms per mini-batch of {batch})" if batch else ""))
    slow = [f"replica {i} ×{f:g}" for i, f in enumerate(slowness) if f > 1]
    if slow:
        parts.append("slower replicas by sleeping: " + ", ".join(slow))
    if hiccup:
        parts.append(f"10× hiccups by sleeping, probability {hiccup:g} per step")
    return "emulated: " + "; ".join(parts) if parts else ""


_BLAS: Any = None


def one_blas_thread() -> Any:
    """A context in which this process's numpy uses one BLAS thread: the driver's own
    evaluations would otherwise fight the replica processes for the cores."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController
        _BLAS = ThreadpoolController()
    return _BLAS.limit(limits=1)
