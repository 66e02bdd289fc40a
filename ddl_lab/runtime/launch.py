"""One-shot launches, a shared pool, and tutorial-style ``run(rank, size)`` (lesson 00).

    launch(fn, 4, *args, **kwargs)               # every argument goes to fn
    launch_with(fn, 4, args, kwargs, timeout=None, backend="gloo")   # runtime options
    launch(rank_size(run), 4)                    # PyTorch tutorial's run(rank, size)
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from .cluster import Cluster

_POOL: dict[tuple, Cluster] = {}
_POOL_SIZE = 2


def shared_cluster(world_size: int, **options: Any) -> Cluster:
    """A cached cluster for widgets and checks: started once, reused (at most two kept)."""
    key = (world_size, tuple(sorted(options.items())))
    c = _POOL.pop(key, None)
    if c is None or not c.alive:
        while len(_POOL) >= _POOL_SIZE:
            _POOL.pop(next(iter(_POOL))).shutdown()
        c = Cluster(world_size, **options)
    _POOL[key] = c        # most recently used last
    return c


def close_shared() -> int:
    """Shut down every cluster ``shared_cluster`` keeps (a lesson's last cell); how many.
    A later ``shared_cluster`` call starts a fresh one."""
    closed = 0
    while _POOL:
        _POOL.popitem()[1].shutdown()
        closed += 1
    return closed


def launch(fn: Callable, world_size: int, *args: Any, **kwargs: Any) -> list:
    """One shot: start ``world_size`` ranks, run ``fn(*args, **kwargs)`` on each, shut down
    (lesson 00). Every argument goes to ``fn``; runtime options go to ``launch_with``."""
    return launch_with(fn, world_size, args, kwargs)


def launch_with(fn: Callable, world_size: int, args: tuple = (), kwargs: dict | None = None,
                *, backend: str = "auto", timeout: float | None = 30.0,
                num_threads: int = 1) -> list:
    """``launch`` with runtime options (see ``Cluster``); ``timeout=None``: no limit."""
    if not callable(fn):                    # before any process starts
        raise TypeError(f"launch() needs a function to run on every rank, got "
                        f"{type(fn).__name__}")
    with Cluster(world_size, backend=backend, timeout=timeout, num_threads=num_threads) as c:
        return c.run_with(fn, args, kwargs)


class rank_size:
    """Run a PyTorch-tutorial-style ``run(rank, size, ...)`` unchanged (lesson 00).

    ``launch(rank_size(run), 4)`` or ``cluster.run(rank_size(run), *args)`` calls
    ``run(dist.get_rank(), dist.get_world_size(), *args)`` on every rank; the process
    group is already initialised, so the tutorial's ``init_process`` is not needed.
    Under torchrun, ``main = rank_size(run)`` in a module and
    ``torchrun -m ddl_lab.torchrun module:main``.
    """

    def __init__(self, fn: Callable):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch.distributed as dist
        return self.fn(dist.get_rank(), dist.get_world_size(), *args, **kwargs)

    def __repr__(self) -> str:
        return f"rank_size({getattr(self.fn, '__name__', self.fn)!r})"
