"""Lesson 06 on a GPU: the bucketed allreduce that overlaps backward, and the timed
allreduce, with tensors on ``ddl_lab.device()`` under nccl (skipped without CUDA;
``make test-gpu`` runs it). One GPU allows one nccl rank."""
import pytest
import torch

from ddl_lab import Cluster
from ddl_lab.ring_allreduce.buckets import overlap_backward
from ddl_lab.ring_allreduce.engine import time_allreduce

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_overlapped_buckets_run_on_nccl():
    with Cluster(GPUS, backend="nccl", timeout=300) as gpu:
        out = gpu.run(overlap_backward, "digits-wide-mlp", 256, 1 << 18, 3)
    assert out[0]["buckets"] >= 2
    assert all(v > 0 for k, v in out[0].items() if k != "buckets")


@pytest.mark.parametrize("name", ["dist.all_reduce", "ring"])
def test_allreduce_timed_on_nccl(name):
    with Cluster(GPUS, backend="nccl", timeout=300) as gpu:
        times = gpu.run(time_allreduce, name, 1 << 20, 2)
    assert all(t >= 0 for per_rank in times for t in per_rank)
