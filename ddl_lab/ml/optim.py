"""Optimisers written out for teaching (lesson 01; Adagrad again in lesson 07).

The three code fragments of Jamshidi's lecture, made real on numpy::

    batch_gd(theta, X, y, grad, lr, epochs)            # one full gradient per step
    sgd(theta, X, y, grad, lr, epochs, rng)            # one example per step
    minibatch_gd(theta, X, y, grad, lr, epochs, rng)   # one mini-batch per step

and the update rules as small objects with ``step(theta, grad) -> theta``: ``GD``
(θ ← θ − γ g), ``Momentum``, ``Adagrad`` and ``AdamW`` (lesson 01 §9, lesson 10 §1), each
with the semantics of its ``torch.optim`` twin (tests/ml/test_optim.py runs both on one
problem). The rules work on numpy arrays and on torch tensors alike; ``TorchOptimizer``
drives a torch model with one. A learning rate is a number or a schedule ``lr(t)`` of the update count t.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Iterator

import numpy as np

__all__ = ["GradFn", "Record", "Schedule", "check_data", "get_batches", "minibatch_sgd_epoch",
           "batch_gd", "sgd", "minibatch_gd", "Rule", "GD", "Momentum", "Adagrad", "AdamW",
           "step_decay", "exponential_decay", "inverse_time", "ReduceOnPlateau", "TorchOptimizer",
           "lipschitz"]

GradFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
Record = Callable[[np.ndarray], None]     # called with θ after every update


# ------------------------------------------------------------- schedules

Schedule = Callable[[int], float]


def step_decay(lr: float, factor: float = 0.5, every: int = 100) -> Schedule:
    """γ_t = γ · factor^⌊t/every⌋ (torch's StepLR stepped once per update)."""
    _positive("lr", lr)
    _positive("every", every)
    return lambda t: lr * factor ** (t // every)


def exponential_decay(lr: float, gamma: float = 0.99) -> Schedule:
    """γ_t = γ · gammaᵗ (torch's ExponentialLR stepped once per update)."""
    _positive("lr", lr)
    return lambda t: lr * gamma ** t


def inverse_time(lr: float, k: float = 0.01) -> Schedule:
    """γ_t = γ / (1 + k·t): slow enough for SGD to converge (Σγ_t = ∞, Σγ_t² < ∞)."""
    _positive("lr", lr)
    return lambda t: lr / (1.0 + k * t)


class ReduceOnPlateau:
    """Anneal when the objective stops improving: γ ← factor·γ after an epoch whose loss
    is not below the best so far minus ``threshold`` (torch's ReduceLROnPlateau with
    mode='min', threshold_mode='abs', patience=0). Call ``observe(epoch_loss)`` after
    every epoch; use the object itself as the schedule."""

    def __init__(self, lr: float, factor: float = 0.5, threshold: float = 1e-4):
        _positive("lr", lr)
        if not 0 < factor < 1:
            raise ValueError(f"factor must be between 0 and 1, got {factor!r}")
        self.lr, self.factor, self.threshold = lr, factor, threshold
        self.best = math.inf

    def observe(self, loss: float) -> None:
        if loss < self.best - self.threshold:
            self.best = loss
        else:
            self.lr *= self.factor

    def __call__(self, t: int) -> float:
        return self.lr


# ------------------------------------------------------------- update rules

def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def check_data(X: np.ndarray, y: np.ndarray) -> None:
    """Raise a ValueError unless X has one row per label in y."""
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} examples (rows) but y has {len(y)} labels: "
                         "they must match")


def _count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def _sqrt(x: Any) -> Any:
    return x ** 0.5                    # numpy arrays and torch tensors alike


class Rule:
    """An update rule θ ← rule(θ, g); ``t`` counts updates, ``lr`` is a number or schedule."""

    def __init__(self, lr: float | Schedule):
        if not callable(lr):
            _positive("lr", lr)
        self.lr = lr
        self.t = 0

    def rate(self) -> float:
        return self.lr(self.t) if callable(self.lr) else self.lr

    def step(self, theta: Any, grad: Any) -> Any:
        new = self._update(theta, grad, self.rate())
        self.t += 1
        return new

    def _update(self, theta: Any, grad: Any, lr: float) -> Any:
        raise NotImplementedError


class GD(Rule):
    """θ ← θ − γ g: batch GD, SGD and mini-batch GD differ only in which g (torch's SGD)."""

    def _update(self, theta, grad, lr):
        return theta - lr * grad


class Momentum(Rule):
    """v ← μ v + g;  θ ← θ − γ v  (torch's SGD(momentum=μ))."""

    def __init__(self, lr: float | Schedule, momentum: float = 0.9):
        super().__init__(lr)
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
        self.momentum = momentum
        self.v = None

    def _update(self, theta, grad, lr):
        self.v = grad * 1.0 if self.v is None else self.momentum * self.v + grad
        return theta - lr * self.v


class Adagrad(Rule):
    """G ← G + g²;  θ ← θ − γ g / (√G + ε)  — per-parameter rates (torch's Adagrad).

    A feature seen rarely has a small G, hence a large step when it does appear.
    """

    def __init__(self, lr: float | Schedule, eps: float = 1e-10):
        super().__init__(lr)
        _positive("eps", eps)
        self.eps = eps
        self.G = None

    def _update(self, theta, grad, lr):
        self.G = grad * grad if self.G is None else self.G + grad * grad
        return theta - lr * grad / (_sqrt(self.G) + self.eps)


class AdamW(Rule):
    """Adam's two moments with decoupled weight decay (torch's AdamW; Loshchilov & Hutter
    2019): one tensor's state, ``m`` and ``v`` and the count ``t`` (lesson 01 §9). Lesson
    10 §1 counts its bytes: two values per parameter."""

    def __init__(self, lr: float | Schedule, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2):
        super().__init__(lr)
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"betas must lie in [0, 1), got {betas!r}")
        _positive("eps", eps)
        self.betas, self.eps, self.weight_decay = tuple(betas), eps, weight_decay
        self.m = self.v = None

    def _update(self, theta, grad, lr):
        b1, b2 = self.betas
        count = self.t + 1                            # Rule.step counts after the update
        fresh = grad * 0.0
        self.m = b1 * (fresh if self.m is None else self.m) + (1 - b1) * grad
        self.v = b2 * (fresh if self.v is None else self.v) + (1 - b2) * grad * grad
        shrunk = theta * (1 - lr * self.weight_decay)
        scale = lr / (1 - b1 ** count)
        return shrunk - scale * self.m / (_sqrt(self.v) / (1 - b2 ** count) ** 0.5 + self.eps)

    def state_bytes(self) -> int:
        """Bytes of the moments this rule keeps (0 before its first step)."""
        return sum(int(x.nbytes) for x in (self.m, self.v) if x is not None)


class TorchOptimizer:
    """Drive a torch model with a teaching rule (one copy of the rule per parameter)."""

    def __init__(self, params, rule: Rule):
        import torch
        self.params = [p for p in params if p.requires_grad]
        self.rules = [copy.deepcopy(rule) for _ in self.params]
        self._no_grad = torch.no_grad

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        with self._no_grad():
            for p, rule in zip(self.params, self.rules):
                if p.grad is not None:
                    p.copy_(rule.step(p, p.grad))


# ----------------------------------------------------- Jamshidi's lecture's loops

def get_batches(m: int, batch_size: int, rng: np.random.Generator | None = None
                ) -> Iterator[np.ndarray]:
    """Index arrays of consecutive mini-batches of a shuffled 0..m−1 (no shuffle if rng
    is None); the last batch is smaller when batch_size does not divide m."""
    _positive("batch_size", batch_size)
    order = rng.permutation(m) if rng is not None else np.arange(m)
    for lo in range(0, m, batch_size):
        yield order[lo:lo + batch_size]


def minibatch_sgd_epoch(theta: np.ndarray, X: np.ndarray, y: np.ndarray, grad: GradFn,
                        rule: Rule, batch_size: int, rng: np.random.Generator | None,
                        record: Record | None = None) -> np.ndarray:
    """One epoch of mini-batch SGD: shuffle, cut into batches, one update per batch.

    ``rule`` is an update rule (``GD(lr)``: θ ← θ − lr·g; momentum, Adagrad, a schedule),
    whose state carries over to the next epoch; ``minibatch_gd`` takes a plain rate.
    ``record(θ)`` is called after every update. Returns the new θ.
    """
    if not isinstance(rule, Rule):
        raise TypeError(f"minibatch_sgd_epoch takes an update rule such as GD(lr), got "
                        f"{type(rule).__name__}; minibatch_gd takes a plain learning rate")
    check_data(X, y)
    for batch in get_batches(len(y), batch_size, rng):
        theta = rule.step(theta, grad(theta, X[batch], y[batch]))
        if record:
            record(theta)
    return theta


def batch_gd(theta: np.ndarray, X: np.ndarray, y: np.ndarray, grad: GradFn,
             lr: float | Rule, epochs: int, record: Record | None = None) -> np.ndarray:
    """Batch gradient descent: every step uses the gradient over all m examples."""
    return minibatch_gd(theta, X, y, grad, lr, epochs, None, batch_size=len(y),
                        record=record)


def sgd(theta: np.ndarray, X: np.ndarray, y: np.ndarray, grad: GradFn, lr: float | Rule,
        epochs: int, rng: np.random.Generator, record: Record | None = None) -> np.ndarray:
    """Stochastic gradient descent: shuffle every epoch, one update per example."""
    return minibatch_gd(theta, X, y, grad, lr, epochs, rng, batch_size=1, record=record)


def minibatch_gd(theta: np.ndarray, X: np.ndarray, y: np.ndarray, grad: GradFn,
                 lr: float | Rule, epochs: int, rng: np.random.Generator | None,
                 batch_size: int = 256, record: Record | None = None) -> np.ndarray:
    """Mini-batch gradient descent: shuffle every epoch, one update per mini-batch."""
    _count("epochs (steps)", epochs)
    rule = lr if isinstance(lr, Rule) else GD(lr)     # one rule (and state) for all epochs
    for _ in range(epochs):
        theta = minibatch_sgd_epoch(theta, X, y, grad, rule, batch_size, rng, record)
    return theta


def lipschitz(X: np.ndarray) -> float:
    """L = largest eigenvalue of XᵀX/m: batch GD on J converges iff γ < 2/L (lesson 01)."""
    return float(np.linalg.eigvalsh(X.T.astype(np.float64) @ X / len(X))[-1])
