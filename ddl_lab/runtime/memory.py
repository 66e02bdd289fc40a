"""Will the workers fit in memory? (lesson 00: how many ranks one laptop can hold).

Every worker is a whole Python process with torch imported: measured on torch 2.x CPU, a
gloo worker owns about 150 MB of its own (its USS, shared libraries not counted).
``Cluster(world_size)`` refuses, before it starts a single process, a world size whose
workers would not fit in the memory free now — the alternative is a machine that
swaps until it freezes. ``worker_memory`` reports what running workers really use.
"""
from __future__ import annotations

from typing import Sequence

WORKER_BYTES = 200 << 20      # one worker: ~150 MB measured idle, and room for its tensors


def available_memory() -> int | None:
    """Bytes of memory free for new processes now (None where it cannot be read)."""
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def check_fits(world_size: int, available: int | None = None,
               per_worker: int = WORKER_BYTES) -> None:
    """Raise a ValueError when ``world_size`` workers of ``per_worker`` bytes each would
    not fit in ``available`` bytes (default: the memory free now, as the OS reports it)."""
    if available is None:
        available = available_memory()
    if available is None or world_size * per_worker <= available:
        return
    fits = available // per_worker
    advice = (f"use world_size <= {fits}" if fits else "not even one worker fits")
    raise ValueError(
        f"world_size={world_size} does not fit in memory: {world_size} workers need about "
        f"{_gb(world_size * per_worker)} (~{per_worker >> 20} MB each: a Python process with "
        f"torch), but only {_gb(available)} is free now. {advice[0].upper() + advice[1:]}, "
        "or close other programs (other notebooks' clusters too).")


def worker_memory(pids: Sequence[int]) -> list[int]:
    """Bytes each process owns alone (its USS; 0 if it is gone): a cluster's real
    per-worker footprint, e.g. ``worker_memory(cluster.pids)``."""
    import psutil
    out = []
    for pid in pids:
        try:
            out.append(int(psutil.Process(pid).memory_full_info().uss))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            out.append(0)
    return out


def _gb(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GB"
