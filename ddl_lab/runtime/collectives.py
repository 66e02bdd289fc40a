"""torch.distributed's single-tensor all-gather and reduce-scatter under the names this torch
has (lesson 10's built-in ZeRO; CONTRIBUTING.md, "The torch floor").

torch 2.8 named them ``all_gather_single`` and ``reduce_scatter_single``; the old names,
``all_gather_into_tensor`` and ``reduce_scatter_tensor``, print a deprecation warning on
every rank of a newer torch, and are all that torch 2.6–2.7 has. Same arguments either way.
"""
from __future__ import annotations

from typing import Callable

import torch.distributed as dist

__all__ = ["all_gather_single", "reduce_scatter_single"]

all_gather_single: Callable = getattr(dist, "all_gather_single", None) \
    or dist.all_gather_into_tensor
reduce_scatter_single: Callable = getattr(dist, "reduce_scatter_single", None) \
    or dist.reduce_scatter_tensor
