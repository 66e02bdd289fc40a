"""What a hand-written allreduce did on the workers (lesson 06's checks): each rank's
tensor, the calls the runtime's ``Wiretap`` saw while it ran (the bytes sent, every
message's source and destination, the built-in collectives called) and the result.
A send/recv buffer of another dtype than the tensor is refused before gloo sees it."""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["DTYPE_MARK", "inputs", "run_case"]

# ProcessGroup method -> the torch.distributed function a learner would have called
_BUILTINS = {"allreduce": "all_reduce", "allreduce_coalesced": "all_reduce_coalesced",
             "reduce": "reduce", "broadcast": "broadcast", "allgather": "all_gather",
             "_allgather_base": "all_gather_into_tensor",
             "allgather_coalesced": "all_gather_coalesced",
             "allgather_into_tensor_coalesced": "all_gather_into_tensor",
             "all_gather_single": "all_gather_into_tensor",
             "reduce_scatter": "reduce_scatter",
             "_reduce_scatter_base": "reduce_scatter_tensor",
             "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
             "reduce_scatter_single": "reduce_scatter_tensor",
             "alltoall": "all_to_all", "alltoall_base": "all_to_all_single",
             "all_to_all_single": "all_to_all_single", "gather": "gather",
             "scatter": "scatter"}
DTYPE_MARK = "[dtype]"       # starts the message of a buffer-dtype refusal on a worker


def inputs(length: int, rank: int, dtype: str, seed: int):
    """Rank ``rank``'s tensor: multiples of 1/4, so every order of summing is exact."""
    import torch
    g = torch.Generator().manual_seed(seed * 101 + rank)
    return torch.randint(-40, 40, (length,), generator=g).to(getattr(torch, dtype)) / 4


def _guard(what: str, tensors: list, dtype: Any) -> None:
    """Refuse a send/recv buffer of another dtype than the tensor being summed."""
    for t in tensors:
        if t.dtype != dtype:
            raise TypeError(
                f"{DTYPE_MARK} called dist.{what} with a {str(t.dtype)[6:]} buffer while the "
                f"tensor being summed is {str(dtype)[6:]}: a message must land in a "
                "buffer of the same dtype and length as the chunk sent "
                "(torch.empty_like(chunk)), or gloo reads the bytes wrongly.")


def run_case(fn: Callable, length: int, dtype: str, seed: int) -> dict:
    """Worker: call ``fn(tensor)`` with the process group wiretapped; report what it did."""
    import torch
    import torch.distributed as dist
    from ddl_lab.runtime.wiretap import Wiretap
    tensor = inputs(length, dist.get_rank(), dtype, seed)
    before, used = tensor.clone(), []

    def watch(op: Any, args: tuple) -> None:
        if op.method in ("send", "recv"):
            _guard(op.method, args[0], tensor.dtype)
        elif op.method in _BUILTINS:
            used.append(_BUILTINS[op.method])

    with Wiretap(on_op=watch, refuse_new_group=(
            "dist.new_group was called: the ring runs on the group it is given (the default "
            "group, dist.get_world_size() ranks) — a group of your own would talk past the "
            "check. Send to your neighbours with dist.send/recv or isend/irecv.")) as tap:
        returned = fn(tensor)
    other = (returned.detach().double().cpu().numpy().copy()
             if isinstance(returned, torch.Tensor) and returned is not tensor
             and returned.numel() == length else None)
    return {"result": tensor.double().cpu().numpy(), "returned": other,
            "sent": tap.payload["send"], "used": sorted(set(used)),
            "messages": [(op.op, op.src, op.dst) for op in tap.ops
                         if op.op in ("send", "recv") and not op.refused],
            "unchanged": bool(torch.equal(tensor, before))}
