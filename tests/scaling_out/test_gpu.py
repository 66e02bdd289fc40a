"""Lesson 11 on GPUs: the same DDP and elastic code on nccl, and gloo-on-CPU vs nccl for
the allreduce (skipped without CUDA; run by hand on a GPU machine with ``-s`` to see the
figures)."""
import pytest
import torch

from ddl_lab import Cluster
from ddl_lab.data_parallel import engine as D
from ddl_lab.ring_allreduce.engine import time_allreduce
from ddl_lab.scaling_out import ddp as P

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_ddp_on_nccl_takes_the_steps_sync_sgd_takes_on_gloo():
    with Cluster(GPUS, backend="nccl", timeout=300) as gpu, \
            Cluster(GPUS, backend="gloo", timeout=300) as cpu:
        on_gpu = gpu.run(P.ddp_train, "digits-mlp", 10, 8 * GPUS, 0.1)
        on_cpu = cpu.run(D.sync_sgd, "digits-mlp", 10, 8 * GPUS, 0.1, barrier=False)
    assert on_gpu[0].loss == pytest.approx(on_cpu[0].loss, abs=1e-4)
    assert torch.allclose(on_gpu[0].params, on_cpu[0].params, atol=1e-4)


def test_the_allreduce_on_nccl_against_gloo_on_the_cpu():
    nbytes = 64 << 20
    with Cluster(GPUS, backend="nccl") as gpu:
        t_gpu = min(max(r) for r in zip(*gpu.run(time_allreduce, "dist.all_reduce", nbytes, 5)))
    with Cluster(GPUS, backend="gloo") as cpu:
        t_cpu = min(max(r) for r in zip(*cpu.run(time_allreduce, "dist.all_reduce", nbytes, 3)))
    print(f"\n64 MB allreduce on {GPUS} rank(s): gloo on CPU {t_cpu * 1e3:.1f} ms, "
          f"nccl on GPU {t_gpu * 1e3:.2f} ms ({t_cpu / max(t_gpu, 1e-9):.0f}×)")
    assert t_gpu > 0 and t_cpu > 0


@pytest.mark.skipif(GPUS < 2, reason="a kill and a restart need 2 ranks: 2 GPUs")
def test_the_elastic_job_restarts_on_nccl_and_ends_where_the_cpu_run_ends(tmp_path):
    from ddl_lab.scaling_out.elastic import run_elastic, train
    run = run_elastic(steps=20, every=5, kill_at=12, nproc=2, timeout=300)
    assert run.ok, run.jobs[0].tail()
    assert [a["start"] for a in run.attempts()] == [0, 10]
    with Cluster(2, backend="gloo") as cpu:
        cpu.run(train, str(tmp_path), 20, 5)
    assert torch.allclose(run.params, torch.load(tmp_path / "final.pt"), atol=1e-4)
