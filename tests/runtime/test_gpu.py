"""The nccl path, on a machine with GPUs (skipped elsewhere; run on a GPU machine by hand)."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from ddl_lab import Cluster, device

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def both_devices():
    cpu = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(cpu)
    gpu = torch.full((1 << 20,), float(dist.get_rank() + 1), device=device())
    dist.all_reduce(gpu)
    return str(gpu.device), cpu.item(), gpu[0].item()


def test_auto_picks_nccl_with_one_gpu_per_rank_and_cpu_tensors_still_work():
    with Cluster(GPUS, backend="auto") as c:
        assert c.backend == "nccl"
        want = float(GPUS * (GPUS + 1) // 2)
        assert c.run(both_devices) == [(f"cuda:{r}", want, want) for r in range(GPUS)]


def test_auto_falls_back_to_gloo_with_more_ranks_than_gpus():
    with Cluster(GPUS + 1, backend="auto") as c:
        assert c.backend == "gloo"


def test_explicit_nccl_with_too_many_ranks_is_a_clear_error():
    with pytest.raises(ValueError, match="nccl needs one GPU per rank"):
        Cluster(GPUS + 1, backend="nccl")


def test_torchrun_uses_nccl(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import torch, torch.distributed as dist
        from ddl_lab import device
        def on_gpu():
            t = torch.ones(4, device=device())
            dist.all_reduce(t)
            return str(dist.get_backend()), str(t.device), t.sum().item()
    """))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run",
                          f"--nproc_per_node={GPUS}", "-m", "ddl_lab.torchrun", "job:on_gpu"],
                         capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"rank 0: ('cpu:gloo,cuda:nccl', 'cuda:0', {4.0 * GPUS})" in out.stdout
