"""Backends, devices and ports for the workers (lesson 00)."""
from __future__ import annotations

import socket
from typing import Any


def available_backends() -> dict[str, bool]:
    """Which torch.distributed backends this machine offers (lesson 00)."""
    import torch
    import torch.distributed as dist
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return {"gloo": dist.is_gloo_available(),
            "nccl": dist.is_nccl_available() and gpus > 0}


def choose_backend(backend: str, world_size: int) -> str:
    """'auto' -> nccl with one GPU per rank, else gloo; a named backend is checked."""
    import torch
    avail = available_backends()
    if backend == "auto":
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return "nccl" if avail["nccl"] and gpus >= world_size else "gloo"
    if backend not in avail:
        raise ValueError(f"unknown backend {backend!r}: use 'auto', 'gloo' or 'nccl'")
    if not avail[backend]:
        why = ("no CUDA GPU is visible (torch.cuda.is_available() is False)"
               if backend == "nccl" else "this torch build has no gloo")
        ok = [b for b, a in avail.items() if a]
        raise ValueError(f"backend {backend!r} is not available here: {why}. "
                         f"Available: {ok}; use backend='auto' to pick one.")
    gpus = torch.cuda.device_count()
    if backend == "nccl" and gpus < world_size:
        raise ValueError(f"nccl needs one GPU per rank: {world_size} ranks but {gpus} GPU(s). "
                         f"Use world_size <= {gpus}, or backend='gloo' (or 'auto').")
    return backend


def group_backend(backend: str) -> str:
    """The process group's backend string: with nccl, CPU tensors still go through gloo,
    so the same worker code runs with or without GPUs."""
    return "cpu:gloo,cuda:nccl" if backend == "nccl" else backend


def check_port(addr: str, port: int) -> None:
    """Raise a ValueError saying what to do when ``addr:port`` is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, port))
        except OSError as e:
            raise ValueError(f"port {port} on {addr} is in use ({e.strerror}): another "
                             "cluster or torchrun holds it. Pass port=None to let "
                             "ddl_lab pick a free one.") from None


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port on ``addr`` that nothing listens on now (the workers' MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def device() -> Any:
    """This rank's device: its own GPU under nccl, else the CPU (any lesson's worker code)."""
    import torch
    import torch.distributed as dist
    if dist.is_initialized() and "nccl" in str(dist.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
