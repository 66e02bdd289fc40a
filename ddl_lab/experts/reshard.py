"""Resharding checkpoints (lesson 14, experts, section 5): a run saved with
``torch.distributed.checkpoint`` (DCP) under one layout resumes under another, its loss
continuing where it stopped.

The model is lesson 12's GPT with Q, K and V as three Linear layers (``transformers.tensor``'s
``SplitAttention``: the same numbers as ``ml.gpt.GPT``, and parameter names that every layout
shares — a checkpoint is matched by name). Layouts (a ``dict``, ``{"kind": ...}``):

- ``"dp×tp"`` (``DP_TP``): a 2-D mesh ``(dp, tp)``; lesson 12's plan (``parallelize_module``:
  Q, K, V, ``fc`` ``ColwiseParallel``, the projections ``RowwiseParallel``) on the tp dim, then
  FSDP2 ``fully_shard`` (each block, then the root) on the dp dim. FSDP2 rather than replicated
  data parallelism on dp, because then *every* parameter and Adam moment is a DTensor on the
  one 2-D mesh (a TP-sharded weight gets ``_StridedShard`` on dp, ``Shard`` on tp): each rank
  holds a different piece, which is what DCP records and reshards; a replicated dp dim only
  adds copies that DCP's planner de-duplicates.
- ``"fsdp"`` (``FSDP``): FSDP2 on every rank (a 1-D mesh), each block and the root.
- ``"one"`` (``ONE``): the plain model, in a world of one rank or with no process group.

The global batch of step i is drawn from (seed, i), whatever the layout, each dp rank taking
its slice, so the losses of a layout are those of one process (to float32 rounding).

``train_and_save`` saves ``{"model", "optim", "step"}`` with ``dcp.save(get_state_dict(...))``:
every rank writes its own shards to ``__<rank>_0.distcp`` in parallel and the coordinator
writes ``.metadata`` — each tensor's global shape and the chunks (offsets, sizes) and where
each lies. ``load_and_continue`` builds the model under any layout, asks ``get_state_dict``
for the pieces *this* layout holds, and ``dcp.load`` reads each from whatever chunks overlap
it — the resharding happens in the load — then ``set_state_dict`` and training goes on.
``what_dcp_wrote`` reads the folder back; ``hand_saved`` is lesson 11's checkpoint beside it
(``scaling_out.elastic.save_checkpoint``: rank 0 writes one file of whole tensors, which only
works because every rank holds the same whole model).

PyTorch documentation: "Distributed Checkpoint - torch.distributed.checkpoint"
(https://docs.pytorch.org/docs/stable/distributed.checkpoint.html) and the recipe "Getting
Started with Distributed Checkpoint (DCP)"
(https://docs.pytorch.org/tutorials/recipes/distributed_checkpoint_recipe.html).
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.ml.gpt import GPT, GPTConfig, build_gpt, lm_loss
from ddl_lab.transformers.tensor import library_plan, SplitAttention, batch

__all__ = ["DP_TP", "FSDP", "ONE", "LAYOUTS", "build_model", "apply_layout", "step_batch",
           "train_and_save", "load_and_continue", "one_process_losses", "what_dcp_wrote",
           "hand_saved", "SHOWN"]

DP_TP: dict[str, Any] = {"kind": "dp×tp", "dp": 2, "tp": 2}
FSDP: dict[str, Any] = {"kind": "fsdp"}
ONE: dict[str, Any] = {"kind": "one"}
LAYOUTS = ("dp×tp", "fsdp", "one")
# what_dcp_wrote's default: a TP column-split weight, a TP row-split one, a replicated one,
# an Adam moment and Adam's step count
SHOWN = ("model.blocks.0.attn.q.weight", "model.blocks.0.attn.proj.weight", "model.tok.weight",
         "optim.state.blocks.0.attn.q.weight.exp_avg", "optim.state.tok.weight.step")

_MESHES: dict[tuple, Any] = {}


def _rank_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) with no process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _mesh(shape: tuple[int, ...], names: tuple[str, ...]):
    """A CPU device mesh of ``shape`` over every rank, made once per worker."""
    from torch.distributed.device_mesh import init_device_mesh
    key = (dist.get_world_size(), shape, names)
    if key not in _MESHES:
        _MESHES[key] = init_device_mesh("cpu", shape, mesh_dim_names=names)
    return _MESHES[key]


@contextmanager
def _one_process_is_meant() -> Iterator[None]:
    """DCP warns that it saves or loads in one process when there is no process group:
    in layout 'one' that is what is meant."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        yield


def build_model(cfg: GPTConfig, seed: int) -> GPT:
    """Lesson 14 (experts), section 5: the seeded GPT with Q, K, V as three Linear layers
    (``blocks.i.attn.q``/``k``/``v``), the same in every layout."""
    model = build_gpt(cfg, seed)
    for block in model.blocks:
        block.attn = SplitAttention(block.attn)
    return model


def _fully_shard(model: GPT, mesh) -> None:
    from torch.distributed.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


def apply_layout(model: GPT, layout: dict[str, Any]) -> tuple[nn.Module, int, int]:
    """Lesson 14 (experts), section 5: ``model`` laid out as ``layout`` says, on every rank;
    returns (the model, this rank's data-parallel index, the data-parallel size)."""
    rank, n = _rank_world()
    kind = layout.get("kind")
    if kind == "one":
        if n != 1:
            raise ValueError(f"layout 'one' runs in one process, not on {n} ranks")
        return model, 0, 1
    if kind == "fsdp":
        _fully_shard(model, _mesh((n,), ("dp",)))
        return model, rank, n
    if kind == "dp×tp":
        from torch.distributed.tensor.parallel import parallelize_module
        dp = layout.get("dp", 2)
        tp = layout.get("tp", n // dp)
        if dp * tp != n:
            raise ValueError(f"dp × tp = {dp} × {tp} must be the world size {n}")
        mesh = _mesh((dp, tp), ("dp", "tp"))
        model = parallelize_module(model, mesh["tp"], library_plan(model.cfg.layers, False))
        _fully_shard(model, mesh["dp"])
        return model, mesh["dp"].get_local_rank(), dp
    raise ValueError(f"layout kind must be one of {LAYOUTS}, got {kind!r}")


def step_batch(cfg: GPTConfig, size: int, seed: int, step: int, part: int = 0,
               parts: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Lesson 14 (experts), section 5: slice ``part`` of ``parts`` of the global batch of
    step ``step`` (``size`` sequences drawn from (seed, step), whatever the layout)."""
    if size % parts:
        raise ValueError(f"the batch of {size} must divide by the {parts} data-parallel ranks")
    idx, targets = batch(cfg, size, seed * 100_003 + step)
    rows = slice(part * size // parts, (part + 1) * size // parts)
    return idx[rows], targets[rows]


def _train(model: nn.Module, opt: torch.optim.Optimizer, cfg: GPTConfig, steps: range,
           seed: int, size: int, part: int, parts: int) -> list[float]:
    """Adam steps ``steps``; the global batch's loss of each (the mean over the ranks)."""
    _, n = _rank_world()
    losses = []
    for i in steps:
        idx, targets = step_batch(cfg, size, seed, i, part, parts)
        loss = lm_loss(model(idx), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        if n > 1:                    # tp ranks hold equal copies: the mean is the dp mean
            dist.all_reduce(mean)
        losses.append(mean.item() / n)
    return losses


def _written(folder: str, rank: int) -> dict[str, int]:
    """The shard files rank ``rank`` wrote in ``folder``: name → bytes."""
    return {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))
            if f.startswith(f"__{rank}_") and f.endswith(".distcp")}


def train_and_save(layout: dict[str, Any], cfg: GPTConfig, steps: int, folder: str,
                   seed: int = 0, lr: float = 1e-2, size: int = 4) -> dict[str, Any]:
    """Worker, lesson 14 (experts), section 5: ``steps`` Adam steps of the seeded GPT under
    ``layout`` (global batch of ``size``), then ``dcp.save`` of model, optimizer and step
    into ``folder``. Returns this rank's losses and the files it wrote (name → bytes)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    rank, _ = _rank_world()
    model, part, parts = apply_layout(build_model(cfg, seed), layout)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = _train(model, opt, cfg, range(steps), seed, size, part, parts)
    model_sd, optim_sd = get_state_dict(model, opt)
    with _one_process_is_meant():
        dcp.save({"model": model_sd, "optim": optim_sd, "step": steps}, checkpoint_id=folder)
    return {"rank": rank, "losses": losses, "wrote": _written(folder, rank)}


def load_and_continue(layout: dict[str, Any], cfg: GPTConfig, steps_more: int, folder: str,
                      seed: int = 0, lr: float = 1e-2, size: int = 4,
                      optimizer: bool = True) -> dict[str, Any]:
    """Worker, lesson 14 (experts), section 5: the GPT built under ``layout`` (any), its
    model and optimizer state loaded from ``folder`` (``dcp.load`` reshards to this layout,
    ``set_state_dict`` puts it in place), then ``steps_more`` more steps on the same batch
    sequence. ``optimizer=False`` loads the model alone (Adam starts afresh: the mistake).
    Returns the saved step and the losses of the steps after it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import state_dict as sd
    rank, _ = _rank_world()
    model, part, parts = apply_layout(build_model(cfg, seed + 1), layout)   # overwritten
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    if optimizer:                                       # the pieces this layout holds
        model_sd, optim_sd = sd.get_state_dict(model, opt)
        state = {"model": model_sd, "optim": optim_sd, "step": -1}
    else:
        state = {"model": sd.get_model_state_dict(model), "step": -1}
    with _one_process_is_meant():
        dcp.load(state, checkpoint_id=folder)           # only the keys asked for are read
    if optimizer:
        sd.set_state_dict(model, opt, model_state_dict=state["model"],
                          optim_state_dict=state["optim"])
    else:
        sd.set_model_state_dict(model, state["model"])
    start = state["step"]
    losses = _train(model, opt, cfg, range(start, start + steps_more), seed, size, part, parts)
    return {"rank": rank, "start": start, "losses": losses}


def one_process_losses(cfg: GPTConfig, total_steps: int, seed: int = 0, lr: float = 1e-2,
                       size: int = 4) -> list[float]:
    """Lesson 14 (experts), section 5, the reference: the same training uninterrupted in
    this process (no process group used), one loss per step."""
    model = build_model(cfg, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for i in range(total_steps):
        idx, targets = step_batch(cfg, size, seed, i)
        loss = lm_loss(model(idx), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def what_dcp_wrote(folder: str, names: Sequence[str] | None = SHOWN) -> dict[str, Any]:
    """Lesson 14 (experts), section 5: what a DCP checkpoint folder holds — "files" (name →
    bytes), and from ``.metadata``, for the tensors ``names`` (None: all), "tensors": fqn →
    {"shape": global shape, "dtype", "chunks": [{"offsets", "sizes", "file"}, …]}, and
    "objects": the non-tensor entries (pickled: the step, Adam's hyper-parameters)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    meta = FileSystemReader(folder).read_metadata()
    where = {(index.fqn, tuple(index.offset or ())): info.relative_path
             for index, info in (meta.storage_data or {}).items()}
    tensors, objects = {}, []
    for fqn, md in meta.state_dict_metadata.items():
        if not isinstance(md, TensorStorageMetadata):
            objects.append(fqn)
        elif names is None or fqn in names:
            chunks = [{"offsets": tuple(c.offsets), "sizes": tuple(c.sizes),
                       "file": where.get((fqn, tuple(c.offsets)))} for c in md.chunks]
            tensors[fqn] = {"shape": tuple(md.size), "dtype": str(md.properties.dtype),
                            "chunks": sorted(chunks, key=lambda c: c["offsets"])}
    files = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))}
    return {"files": files, "tensors": tensors, "objects": sorted(objects)}


def hand_saved(cfg: GPTConfig, steps: int, folder: str, seed: int = 0, lr: float = 1e-2,
               size: int = 4) -> dict[str, Any]:
    """Worker, lesson 14 (experts), section 5: lesson 11's checkpoint beside DCP — the same
    training with the model whole on every rank (gradients averaged by one ``all_reduce``
    each, lesson 05), then ``scaling_out.elastic.save_checkpoint``: rank 0 writes one file,
    ``checkpoint.pt``, of whole tensors. Returns this rank's losses and the folder's files."""
    from ddl_lab.scaling_out.elastic import save_checkpoint
    rank, n = _rank_world()
    model = build_model(cfg, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for i in range(steps):
        idx, targets = step_batch(cfg, size, seed, i, rank, n)
        loss = lm_loss(model(idx), targets)
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= n
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / n)
    save_checkpoint(os.path.join(folder, "checkpoint.pt"), steps, model, opt)
    dist.barrier()
    files = {f: os.path.getsize(os.path.join(folder, f)) for f in sorted(os.listdir(folder))}
    return {"rank": rank, "losses": losses, "files": files}
