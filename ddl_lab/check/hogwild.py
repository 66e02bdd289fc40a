"""Checks for lesson 03 (Hogwild!): the sparse update in place; the lock-free worker loop."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

import numpy as np

from ddl_lab.runtime import WorkerError, WorkerTimeout
from ._core import CheckFailed, call_local, fail, first_difference, passed, worker_failure

if TYPE_CHECKING:
    from ddl_lab.hogwild.engine import Problem

__all__ = ["hogwild_update", "hogwild_worker"]

_COPY_HINT = ("`w = theta[idx]` (fancy indexing) and `theta = theta - ...` both make a new "
              "array; write into the shared one: `theta[idx] -= step`.")


def _small_problem(m: int, seed: int) -> "Problem":
    from ddl_lab.hogwild.engine import sparse_problem
    return sparse_problem(m=m, d=200, nnz=5, lr=0.2, seed=seed)


def hogwild_update(fn: Callable) -> None:
    """Lesson 03, task 1: ``fn(theta, idx, val, y, lr)`` does one SGD step of logistic
    regression on a sparse example, in place: θ[idx] −= lr (σ(θ[idx]·val) − y) val."""
    __tracebackhide__ = True
    from ddl_lab.hogwild.engine import sgd_update
    p = _small_problem(200, seed=5)
    rng = np.random.default_rng(0)
    theta = rng.normal(size=p.d)
    for i in range(30):
        before = theta.copy()
        want = before.copy()
        sgd_update(want, p.idx[i], p.val[i], p.y[i], p.lr)
        out = call_local(fn, theta, p.idx[i], p.val[i], float(p.y[i]), p.lr)
        if np.array_equal(theta, before):
            if isinstance(out, np.ndarray) and out.shape == theta.shape and \
                    first_difference(want, out) is None:
                fail(f"{fn.__name__} returned the new θ but left `theta` unchanged: the "
                     "workers share `theta`, so the update must be written into it. "
                     + _COPY_HINT)
            fail(f"theta did not change: {fn.__name__} updated a copy. " + _COPY_HINT)
        outside = np.setdiff1d(np.nonzero(theta != before)[0], p.idx[i])
        if len(outside):
            fail(f"example {i} uses features {list(p.idx[i])}, but coordinate {outside[0]} "
                 "changed too: a Hogwild! update reads and writes only the example's own "
                 "features — that is why workers rarely collide.")
        diff = first_difference(want, theta, rtol=1e-9, atol=1e-12)
        if diff is not None:
            d_want, d_got = want - before, theta - before
            hint = (" The step has the wrong sign: subtract lr·(σ(z) − y)·val."
                    if np.allclose(d_got, -d_want) else
                    " Is it σ(z) − y with z = θ[idx]·val, times val and lr?")
            fail(f"after one update on example {i}: {diff}.{hint}")
        theta = theta.copy()
    passed("hogwild_update", "30 sparse updates match θ[idx] −= lr (σ(θ[idx]·val) − y) val, "
           "written in place, touching only the example's features")


def hogwild_worker(fn: Callable) -> None:
    """Lesson 03, task 2: ``fn(theta, problem, rows, lr, lock, locked)`` runs SGD over
    ``rows`` on the shared θ: without the lock (Hogwild!) unless ``locked``."""
    __tracebackhide__ = True
    from ddl_lab.hogwild.engine import reference_sgd
    p = _small_problem(3000, seed=1)
    rows = np.arange(40)
    theta = np.zeros(p.d)
    call_local(fn, theta, p, rows, p.lr, threading.Lock(), False)      # in this process first
    if not theta.any():
        fail(f"after {fn.__name__}(theta, problem, rows, ...) theta is still all zeros: the "
             "loop must update the `theta` it is given, which is the shared vector, not a "
             "copy of it. " + _COPY_HINT)
    one = _on_processes(fn, p, 1, False)
    want = reference_sgd(p, one["rows"][0], p.lr)
    diff = first_difference(want, one["theta"], rtol=1e-4, atol=1e-6)
    if diff is not None:
        fail(f"one process, lock-free: the shared θ after one pass over its rows differs "
             f"from plain SGD over the same rows in the same order: {diff}. Apply one "
             "update per row, in the order of `rows`, with the given lr.")
    if one["lock_acquisitions"]:
        fail(_took_lock(fn, one["lock_acquisitions"], len(one["rows"][0])))
    locked = _on_processes(fn, p, 1, True)
    if first_difference(want, locked["theta"], rtol=1e-4, atol=1e-6) is not None:
        fail("one process, locked=True: θ differs from plain SGD — the lock must not "
             "change what the updates do.")
    n = len(locked["rows"][0])
    if locked["lock_acquisitions"] != n:
        fail(f"locked=True: the lock was taken {locked['lock_acquisitions']:,} times for "
             f"{n:,} updates. The locked baseline holds it around each update (read θ, "
             "compute, write) — once per row, so the other workers can take turns.")
    two = _on_processes(fn, p, 2, False)
    if two["lock_acquisitions"]:
        fail(_took_lock(fn, two["lock_acquisitions"], sum(len(r) for r in two["rows"])))
    start, serial = p.loss(np.zeros(p.d)), p.loss(want)
    if not two["loss"] < start - 0.5 * (start - serial):
        fail(f"2 processes, lock-free: the shared θ ends with training loss "
             f"{two['loss']:.4f} (start {start:.4f}; one process reaches {serial:.4f}). "
             "Did both workers write their updates into the shared theta?")
    passed("hogwild_worker", f"matches serial SGD in 1 process, takes the lock once per update "
           f"only when locked, and 2 lock-free processes train the shared θ "
           f"(loss {start:.3f} → {two['loss']:.3f}, lock taken 0 times)")


def _took_lock(fn: Callable, times: int, updates: int) -> str:
    return (f"lock-free mode (locked=False): {fn.__name__} took the lock {times:,} times "
            f"during {updates:,} updates. Hogwild! never locks: the workers write the shared "
            "θ at the same time, and that is the point.")


def _on_processes(fn: Callable, problem: "Problem", processes: int, locked: bool) -> dict:
    __tracebackhide__ = True
    from ddl_lab.hogwild.engine import run_learner_worker
    try:
        return run_learner_worker(fn, problem, processes, locked, timeout=30)
    except WorkerTimeout:
        raise CheckFailed(f"{fn.__name__} on {processes} process(es) did not finish within "
                          "30 s: is the lock released after each update (`with lock:`)?"
                          ) from None
    except WorkerError as e:
        raise worker_failure(e, fn, f"in process {{}} of {processes}") from None
