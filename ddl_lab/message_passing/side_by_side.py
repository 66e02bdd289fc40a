"""Lesson 04's collectives, ours and torch.distributed's, on the same data (lesson 04)."""
from __future__ import annotations

import time
from typing import Any

from ddl_lab.message_passing.comm import Comm
from ddl_lab.runtime import device

__all__ = ["collectives_side_by_side", "slowest_rank"]


def collectives_side_by_side(comm: Comm, nbytes: int = 4096, repeat: int = 3) -> dict:
    """Each operation done with ``comm`` and with ``torch.distributed`` on the same data.

    Runs on every rank (lesson 04), with tensors on ``ddl_lab.device()``. Returns
    {op: {"equal": bool, "ours_s": seconds, "torch_s": seconds}}: the best of ``repeat``
    times, measured between barriers.
    """
    import torch
    import torch.distributed as dist
    rank, size, dev = comm.rank, comm.size, device()
    n = max(1, nbytes // 4)
    x = torch.full((n,), float(rank + 1), device=dev)
    chunks = [torch.full((n,), float(10 * r), device=dev) for r in range(size)]

    def torch_p2p() -> Any:
        t = x.clone()
        if rank == 0:
            dist.send(t, dst=1)
        elif rank == 1:
            dist.recv(t, src=0)
        return t

    def torch_bcast() -> Any:
        t = x.clone()
        dist.broadcast(t, src=0)
        return t

    def torch_scatter() -> Any:
        t = torch.empty(n, device=dev)
        dist.scatter(t, chunks if rank == 0 else None, src=0)
        return t

    def torch_gather() -> Any:
        ts = [torch.empty(n, device=dev) for _ in range(size)] if rank == 0 else None
        dist.gather(x, ts, dst=0)
        return ts

    def torch_reduce() -> Any:
        t = x.clone()
        dist.reduce(t, dst=0)
        return t if rank == 0 else None

    def torch_allreduce() -> Any:
        t = x.clone()
        dist.all_reduce(t)
        return t

    def ours_p2p() -> Any:
        if rank == 0:
            comm.send(x, dest=1)
        return comm.recv(source=0) if rank == 1 else x

    pairs = {
        "send / recv": (ours_p2p, torch_p2p),
        "bcast": (lambda: comm.bcast(x, root=0), torch_bcast),
        "scatter": (lambda: comm.scatter(chunks if rank == 0 else None, root=0),
                    torch_scatter),
        "gather": (lambda: comm.gather(x, root=0), torch_gather),
        "reduce": (lambda: comm.reduce(x, root=0), torch_reduce),
        "allreduce": (lambda: comm.allreduce(x), torch_allreduce),
        "barrier": (comm.barrier, dist.barrier),
    }
    out = {}
    for name, (ours, theirs) in pairs.items():
        if name == "send / recv" and size < 2:
            continue
        times = {"ours_s": [], "torch_s": []}
        for _ in range(repeat):
            for key, f in (("ours_s", ours), ("torch_s", theirs)):
                dist.barrier()
                t0 = time.perf_counter()
                value = f()
                times[key].append(time.perf_counter() - t0)
                if key == "ours_s":
                    mine = value
                else:
                    same = _same(mine, value)
        out[name] = {"equal": same, "ours_s": min(times["ours_s"]),
                     "torch_s": min(times["torch_s"])}
    return out


def slowest_rank(per_rank: list[dict]) -> dict:
    """Merge every rank's ``collectives_side_by_side`` result: the slowest rank's times."""
    return {op: {"equal": all(r[op]["equal"] for r in per_rank),
                 "ours_s": max(r[op]["ours_s"] for r in per_rank),
                 "torch_s": max(r[op]["torch_s"] for r in per_rank)} for op in per_rank[0]}


def _same(a: Any, b: Any) -> bool:
    import torch
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(torch.equal(torch.as_tensor(a).cpu(), torch.as_tensor(b).cpu()))
