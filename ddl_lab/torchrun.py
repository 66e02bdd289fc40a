"""Run a course worker function under ``torchrun`` (lesson 00; every lesson's worker code).

    torchrun --nproc_per_node=2 -m ddl_lab.torchrun ddl_lab.welcome:sum_of_ranks
    torchrun --nnodes=2 --node_rank=0 --master_addr=HOST --nproc_per_node=4 \\
        -m ddl_lab.torchrun mymodule:train 0.1 32

A PyTorch tutorial's ``run(rank, size)`` runs unchanged as ``main = rank_size(run)`` in its
module (``ddl_lab.rank_size``), named ``module:main``.

The process group is initialised from torchrun's env:// variables (nccl when every
local rank has a GPU, else gloo); ``fn`` is called with the remaining arguments
(parsed as Python literals where possible) and rank 0 prints every rank's result.
"""
from __future__ import annotations

import ast
import importlib
import os
import sys
from datetime import timedelta
from typing import Any, Callable


def load(target: str) -> Callable:
    """``'package.module:function'`` -> the function."""
    module, _, name = target.partition(":")
    if not name:
        raise SystemExit(f"expected module:function, got {target!r}")
    return getattr(importlib.import_module(module), name)


def literal(arg: str) -> Any:
    try:
        return ast.literal_eval(arg)
    except (ValueError, SyntaxError):
        return arg


def main(argv: list[str] | None = None) -> None:
    import torch
    import torch.distributed as dist
    from .runtime import group_backend
    from .runtime.patience import patience
    argv = sys.argv[1:] if argv is None else argv
    if not argv or "RANK" not in os.environ:
        raise SystemExit("usage: torchrun --nproc_per_node=N -m ddl_lab.torchrun "
                         "module:function [args...]  (RANK etc. come from torchrun)")
    fn, args = load(argv[0]), [literal(a) for a in argv[1:]]
    local = int(os.environ.get("LOCAL_RANK", 0))
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= per_node
    torch.set_num_threads(int(os.environ.get("DDL_LAB_THREADS", 1)))
    if gpu:
        torch.cuda.set_device(local)
    if (os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and local == 0
            and int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)) > 0):
        print("ddl_lab.torchrun: a restarted job on torchrun's shared rendezvous store reads "
              "the first attempt's addresses (gloo: 'Connection refused' or a hang). Start "
              "torchrun with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (lesson 11).",
              file=sys.stderr, flush=True)
    dist.init_process_group(group_backend("nccl" if gpu else "gloo"), init_method="env://",
                            timeout=timedelta(seconds=float(os.environ.get("DDL_LAB_TIMEOUT", 60 * patience()))))
    try:
        result = fn(*args)
        gathered = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(result, gathered, dst=0)
        if dist.get_rank() == 0:
            for rank, r in enumerate(gathered):
                print(f"rank {rank}: {r!r}", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
