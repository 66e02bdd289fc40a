"""The allreduces lesson 06 prints give the engine's sums bit for bit (lesson 06)."""
import numpy as np
import pytest
import torch
import torch.distributed as dist

from ddl_lab.ring_allreduce import engine, textbook
from ddl_lab.runtime import shared_cluster


def _differences():
    """Every length × dtype × segments (ring) or root (reduce+broadcast) where the textbook
    and the engine disagree; none expected."""
    n, rank = dist.get_world_size(), dist.get_rank()
    bad = []
    for length in (0, 1, 2, 7, 1001, 100_003):
        x = torch.from_numpy(np.random.default_rng(1000 * rank + length).normal(size=length))
        for dtype in (torch.float64, torch.float32):
            for segments in (1, 3):
                a, b = x.to(dtype, copy=True), x.to(dtype, copy=True)
                textbook.ring_allreduce(a, segments)
                engine.allreduce(b, "ring", segments=segments)
                if not torch.equal(a, b):
                    bad.append(("ring", length, dtype, segments))
            for root in sorted({0, n - 1}):
                a, b = x.to(dtype, copy=True), x.to(dtype, copy=True)
                textbook.reduce_broadcast_allreduce(a, root)
                engine.allreduce(b, "reduce_broadcast", root=root)
                if not torch.equal(a, b):
                    bad.append(("reduce_broadcast", length, dtype, root))
    return bad


@pytest.mark.parametrize("world_size", [2, 3])
def test_textbook_and_engine_give_the_same_sums(world_size):
    assert shared_cluster(world_size).run(_differences) == [[]] * world_size
