"""Lesson 10 on a GPU: ZeRO by hand, DDP and FSDP2 with their tensors on ``ddl_lab.device()``
under nccl give what they give on gloo (skipped without CUDA; ``make test-gpu`` runs it).

One GPU allows one nccl rank (nccl refuses two ranks on one device), so these runs prove the
device placement and the nccl group's API paths; the multi-rank arithmetic is proven on gloo."""
import numpy as np
import pytest
import torch

from ddl_lab import Cluster
from ddl_lab.memory import library as L
from ddl_lab.memory import zero as Z

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.fixture(scope="module")
def both():
    with Cluster(GPUS, backend="nccl", timeout=300) as gpu, \
            Cluster(GPUS, backend="gloo", timeout=300) as cpu:
        yield gpu, cpu


def _close(a, b, tol=1e-3):
    for x, y in zip(a, b):
        assert np.abs(x.params - y.params).max() < tol
        assert x.losses == pytest.approx(y.losses, rel=tol)


@pytest.mark.parametrize("stage", Z.STAGES)
def test_every_zero_stage_on_nccl_equals_gloo(both, stage):
    gpu, cpu = both
    args = (stage, "fp32", False, 48, 3, 24, 3)
    on_gpu, on_cpu = gpu.run(Z.zero_run, *args), cpu.run(Z.zero_run, *args)
    _close(on_gpu, on_cpu)
    assert on_gpu[0].memory.total == on_cpu[0].memory.total


def test_builtin_collectives_and_bf16_on_nccl(both):
    gpu, cpu = both
    args = (2, "bf16", True, 48, 3, 24, 3)
    _close(gpu.run(Z.zero_run, *args, builtin=True), cpu.run(Z.zero_run, *args, builtin=True),
           tol=3e-2)


@pytest.mark.parametrize("kind", ["DDP", *L.LIBRARIES])
def test_ddp_and_the_libraries_on_nccl_equal_gloo(both, kind):
    gpu, cpu = both
    if kind == "DDP":
        on_gpu, on_cpu = gpu.run(Z.ddp_run, 48, 3, 24, 3), cpu.run(Z.ddp_run, 48, 3, 24, 3)
    else:
        on_gpu = gpu.run(L.library_run, kind, 48, 3, 24, 3)
        on_cpu = cpu.run(L.library_run, kind, 48, 3, 24, 3)
    _close(on_gpu, on_cpu)
