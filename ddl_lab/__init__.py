"""ddl_lab: the package behind the distributed deep learning course.

One module per concept; each lesson imports what it teaches from here.
Only the runtime is imported eagerly, so worker processes start fast.
"""
import re
from importlib import import_module, metadata
from typing import Any

TORCH_FLOOR = (2, 6)    # the oldest torch with every API the package uses (CONTRIBUTING.md)


def require_torch(version: str) -> None:
    """Refuse a torch older than ``TORCH_FLOOR`` with a message that says what to do."""
    found = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if found < TORCH_FLOOR:
        floor = ".".join(map(str, TORCH_FLOOR))
        raise ImportError(f"ddl_lab needs torch >= {floor}, but torch {version} is installed "
                          f"(torch.distributed.fsdp.fully_shard arrived in 2.6, "
                          f"torch.distributed.pipelining in 2.4). Upgrade it: "
                          f"pip install 'torch>={floor}' — CONTRIBUTING.md lists every API "
                          "the course needs and the version that introduced it.")


try:
    require_torch(metadata.version("torch"))
except metadata.PackageNotFoundError:      # a torch built from source without metadata
    pass

# after the floor check: with an older torch, the runtime's imports would fail first
from .runtime import (Cluster, WorkerError, WorkerTimeout, device, launch,  # noqa: E402
                      launch_with, progress, rank_size, shared_cluster)

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
