"""ddl_lab: the package behind the distributed deep learning course.

One module per concept; each lesson imports what it teaches from here.
Only the runtime is imported eagerly, so worker processes start fast.
"""
from importlib import import_module
from typing import Any

from .runtime import (Cluster, WorkerError, WorkerTimeout, device, launch, launch_with,
                      progress, rank_size, shared_cluster)

__all__ = ["Cluster", "WorkerError", "WorkerTimeout", "launch", "launch_with", "rank_size",
           "shared_cluster", "device", "progress"]


def __getattr__(name: str) -> Any:
    """Import submodules on first use (``ddl_lab.check``, ``ddl_lab.widgets``, ...)."""
    try:
        return import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module 'ddl_lab' has no attribute {name!r}") from None
