"""Elastic training (lesson 11): the textbook checkpoint round trip, a worker killed under
torchrun --max-restarts that resumes and ends where an uninterrupted run ends, and a host
that leaves a --nnodes=1:2 job, which goes on smaller; the jobs' deadline, stretched by
DDL_LAB_PATIENCE (tests/runtime/test_patience.py: the runtime's other waits)."""
import os
import sys

import pytest
import torch
import torch.distributed as dist

from ddl_lab import shared_cluster
from ddl_lab.scaling_out import elastic as E
from ddl_lab.scaling_out.hosts import VirtualHosts, unavailable


def round_trip(folder):
    """Worker: train a model 2 momentum steps, checkpoint, resume into fresh objects."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    path = os.path.join(folder, "ckpt.pt")
    assert E.resume(path, model, opt) == 0                   # nothing saved yet
    dist.barrier()                                           # before rank 0 writes one
    for _ in range(2):
        opt.zero_grad()
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
    E.save_checkpoint(path, 2, model, opt)
    dist.barrier()
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    step = E.resume(path, fresh, fresh_opt)
    buf = fresh_opt.state[fresh_opt.param_groups[0]["params"][0]]["momentum_buffer"]
    return step, torch.equal(fresh.weight, model.weight), float(buf.abs().sum())


def test_the_textbook_checkpoint_restores_model_optimizer_and_step(tmp_path):
    out = shared_cluster(3).run(round_trip, str(tmp_path))
    assert [o[:2] for o in out] == [(2, True)] * 3 and out[0][2] > 0
    assert os.listdir(tmp_path) == ["ckpt.pt"]               # the .tmp was renamed away


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The same job without a failure, on the notebook's cluster (3 workers)."""
    folder = str(tmp_path_factory.mktemp("uninterrupted"))
    shared_cluster(3).run(E.train, folder, 24, 5, batch=60)
    return torch.load(os.path.join(folder, "final.pt"))


def test_a_killed_worker_is_restarted_and_the_run_ends_where_it_would_have(uninterrupted):
    run = E.run_elastic(steps=24, every=5, kill_at=13, nproc=2, max_restarts=2, batch=60,
                        timeout=150)
    assert run.ok, run.jobs[0].tail()
    attempts = run.attempts()        # a busy machine may cost a second restart (2 allowed)
    first, restart, last = attempts[0], attempts[1], attempts[-1]
    assert (first["last"], restart["start"], last["last"]) == (13, 10, 24), \
        (attempts, run.jobs[0].tail())
    assert all(a["start"] in [0, *run.checkpoints()] for a in attempts)   # each from a save
    assert torch.allclose(run.params, uninterrupted, atol=1e-5)   # 2 workers here, 3 there


@pytest.mark.skipif(unavailable() is not None, reason=f"no network namespaces: {unavailable()}")
def test_a_host_that_leaves_a_1_to_2_node_job_leaves_a_smaller_job_that_finishes(
        tmp_path, uninterrupted):
    os.chmod(tmp_path, 0o777)
    with VirtualHosts() as vh:
        jobs = vh.torchrun("ddl_lab.scaling_out.elastic:train", str(tmp_path), 24, 5, 13, 1,
                           "b", 60, nproc=1, nnodes="1:2", max_restarts=1, timeout=150,
                           rdzv_conf=E.QUICK_RDZV)
    run = E.ElasticRun(jobs, E.read_log(tmp_path), torch.load(tmp_path / "final.pt"),
                       str(tmp_path))
    assert jobs[0].ok and not jobs[1].ok, jobs[0].tail()     # host B is gone, A finished
    first, second = run.attempts()
    assert (first["world"], second["world"], second["start"]) == (2, 1, 10)
    assert torch.allclose(run.params, uninterrupted, atol=1e-5)   # same global batches


def test_the_entry_point_explains_a_restart_on_a_shared_store():
    """A restarted worker that torchrun points at its own (shared) store: the entry point
    prints why that fails with gloo and what to set. This test plays the agent's store."""
    import subprocess
    import sys
    from datetime import timedelta
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, timeout=timedelta(seconds=60),
                          wait_for_workers=False)
    env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
           "GLOO_SOCKET_IFNAME": "lo", "TORCHELASTIC_USE_AGENT_STORE": "True",
           "TORCHELASTIC_RESTART_COUNT": "1"}
    out = subprocess.run([sys.executable, "-m", "ddl_lab.torchrun",
                          "ddl_lab.welcome:sum_of_ranks"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "rank 0: 0" in out.stdout, out.stderr[-2000:]
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in out.stderr


def test_patience_stretches_a_jobs_default_deadline(monkeypatch):
    from ddl_lab.scaling_out.launch import run_jobs
    nap = [[sys.executable, "-c", "import time; time.sleep(1.5)"]]
    monkeypatch.setenv("DDL_LAB_PATIENCE", "1")
    late = run_jobs(nap, timeout=0.5)[0]
    assert late.timed_out and late.seconds == 0.5
    monkeypatch.setenv("DDL_LAB_PATIENCE", "20")       # 10 s for a 1.5 s nap: room on a busy machine
    done = run_jobs(nap, timeout=0.5)[0]
    assert not done.timed_out and done.returncode == 0
