"""Faults: a rank SIGKILLed in the middle of every kind of communication, a
shard killed while replicas push, Ctrl-C, the notebook's kernel killed, a worker out of
memory. Each ends in a clear error within seconds, the cluster works afterwards, and
nothing is left behind: no process, no /dev/shm segment, no temporary file."""
import functools
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager, suppress

import numpy as np
import psutil
import pytest
import torch
import torch.distributed as dist

from ddl_lab import WorkerError, progress, shared_cluster
from ddl_lab.message_passing.comm import CommError, comm_run
from ddl_lab.parameter_server import downpour as D
from ddl_lab.parameter_server.errors import ShardDied
from ddl_lab.ring_allreduce.engine import allreduce
from ddl_lab.ring_allreduce.shm import shm_allreduce
from ddl_lab.runtime import on_progress
from ddl_lab.runtime.process import start_method, start_server

from .system import descendants, gone, listening, survivors, wait_until

FOREVER = 10**9
RUN_TIMEOUT = 90.0          # a fault reported after half of this was not detected: it timed out
VICTIM = 2


@pytest.fixture(scope="module")
def cluster():
    """The 4-rank cluster comm_run uses too (shared_cluster(4))."""
    return shared_cluster(4)


def looping(step, numel=1 << 16):
    """A worker function: ``step(t)`` over and over, reporting progress after each."""
    def loop():
        t = torch.ones(numel)
        for i in range(1, FOREVER):
            step(t.fill_(1.0))
            progress(i, FOREVER)
    return loop


def gather_forever(comm):
    x = np.ones(1 << 12)
    for i in range(1, FOREVER):
        comm.gather(x, root=0)
        progress(i, FOREVER)


def kill_mid_run(pids, call, errors):
    """Run ``call()``; SIGKILL rank VICTIM once it reported 3 steps done. Returns the
    error ``call`` raised and the seconds from the kill to it."""
    killed = []

    def sink(rank, done, total):
        if rank == VICTIM and done >= 3 and not killed:
            os.kill(pids[VICTIM], signal.SIGKILL)
            killed.append(time.monotonic())
    with on_progress(sink), pytest.raises(errors) as caught:
        call()
    seconds = time.monotonic() - killed[0]
    print(f"\n  fault -> {type(caught.value).__name__} after {seconds:.2f} s")
    return caught.value, seconds


def assert_recovered(cluster, old_pids, leftovers):
    assert gone(old_pids), "a killed run's workers survived"
    assert cluster.run(dist.get_rank) == [0, 1, 2, 3]
    assert leftovers() == []


@pytest.mark.parametrize("step", [
    pytest.param(functools.partial(allreduce, algorithm="ring"), id="hand ring"),
    pytest.param(dist.all_reduce, id="dist.all_reduce"),
    pytest.param(shm_allreduce, id="shared-memory allreduce"),
])
def test_a_rank_killed_mid_allreduce(cluster, leftovers, step):
    pids = cluster.pids
    err, seconds = kill_mid_run(pids, lambda: cluster.run_with(looping(step),
                                                              timeout=RUN_TIMEOUT), WorkerError)
    assert f"rank {VICTIM} died (exit code -9 (SIGKILL))" in str(err)
    assert "out-of-memory killer" in str(err) and "next run starts fresh ones" in str(err)
    assert seconds < RUN_TIMEOUT / 2
    assert_recovered(cluster, pids, leftovers)


def test_a_rank_killed_mid_gather(cluster, leftovers):
    pids = cluster.pids
    err, seconds = kill_mid_run(pids, lambda: comm_run(gather_forever, 4, timeout=30,
                                                       run_timeout=RUN_TIMEOUT), CommError)
    assert f"rank {VICTIM} died (exit code -9 (SIGKILL))" in str(err)
    assert "The workers were restarted" in str(err)
    assert seconds < RUN_TIMEOUT / 2
    assert_recovered(cluster, pids, leftovers)
    assert comm_run(lambda comm: comm.allreduce(comm.rank), 4) == [6] * 4


# ------------------------------------------------------------------ the parameter server

def _peer_ports(client):
    ports = []
    for conn in client.conns:
        with socket.socket(fileno=os.dup(conn.fileno())) as s:
            ports.append(s.getpeername()[1])
    return ports


def test_a_shard_killed_while_replicas_push(leftovers, tmp_path):
    problem = D.digits_problem(example_cost=0.0)
    said = tmp_path / "shard-ports"

    def announcing(client, problem, setup, rid, tl):
        """Downpour's replica; replica 0 names the shards' ports after 5 pushes."""
        push, pushes = client.push, [0]

        def counted(grad, versions):
            push(grad, versions)
            pushes[0] += 1
            if rid == 0 and pushes[0] == 5:
                ready = said.with_suffix(".part")       # renamed whole: never read half
                ready.write_text(" ".join(map(str, _peer_ports(client))))
                ready.rename(said)
        client.push = counted
        return D.downpour_replica(client, problem, setup, rid, tl)

    start_server()                  # a process of this session, not of the run
    before = descendants()
    outcome = {}

    def drive():
        try:
            D.run(problem, D.Setup(replicas=2, shards=2, steps=FOREVER, batch=8,
                                   timeout=30.0, replica=announcing))
        except BaseException as e:
            outcome["error"], outcome["at"] = e, time.monotonic()
    driver = threading.Thread(target=drive)
    driver.start()
    assert wait_until(said.exists, 120), "the replicas never pushed"
    port = int(said.read_text().split()[1])
    shard, = [pid for pid, _, p in listening(descendants()) if p == port]
    os.kill(shard, signal.SIGKILL)
    killed = time.monotonic()
    driver.join(60)
    assert not driver.is_alive(), "the run did not end after its shard was killed"
    err = outcome["error"]
    print(f"\n  shard killed -> {type(err).__name__} after {outcome['at'] - killed:.2f} s")
    assert isinstance(err, ShardDied), err
    assert "shard 1 died (exit code -9 (SIGKILL))" in str(err) and "cannot go on" in str(err)
    assert outcome["at"] - killed < 15.0          # every wait's timeout is 30 s
    assert wait_until(lambda: descendants() <= before, 5), "a process of the run survived"
    assert D.run(problem, D.Setup(replicas=2, shards=2, steps=10, batch=8)).updates == 20
    assert leftovers() == []


# ------------------------------------------------------------------ memory

def test_a_worker_out_of_memory_is_a_clear_error(cluster, leftovers):
    def hog(mb):
        import resource
        old = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
        held = []
        resource.setrlimit(resource.RLIMIT_AS, (size + (mb << 20), old[1]))
        try:
            if dist.get_rank() == 1:
                while True:
                    held.append(torch.ones(16 << 20))      # 64 MB more each time
        finally:
            held.clear()
            resource.setrlimit(resource.RLIMIT_AS, old)
        return dist.get_rank()

    pids = cluster.pids
    t = time.monotonic()
    with pytest.raises(WorkerError, match=r"rank 1 raised RuntimeError: .*can't allocate "
                                          r"memory.*That rank ran out of memory") as e:
        cluster.run_with(hog, (300,), timeout=RUN_TIMEOUT)
    print(f"\n  out of memory -> WorkerError after {time.monotonic() - t:.2f} s")
    assert "fewer ranks" in str(e.value) and "The cluster is ready for the next run" in str(e.value)
    assert cluster.pids == pids                          # the workers are fine
    assert cluster.run(dist.get_rank) == [0, 1, 2, 3]
    assert leftovers() == []


# ------------------------------------------------------------------ the notebook's kernel

KERNEL = """
    import signal, sys, time
    import numpy as np
    import torch, torch.distributed as dist
    from ddl_lab import Cluster, progress
    from ddl_lab.parameter_server.server import ParameterServer
    from ddl_lab.runtime import RunInterrupted, on_progress

    def loop():
        t = torch.ones(1 << 16)
        for i in range(1, 10**9):
            dist.all_reduce(t)
            progress(i, 10**9)

    def main():
        # as a Jupyter kernel does while it runs a cell: Ctrl-C raises KeyboardInterrupt, even
        # where this process was started with SIGINT ignored (a job put in the background)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        c = Cluster(4, timeout=120)
        ps = ParameterServer(np.zeros(8), shards=2) if "--ps" in sys.argv else None
        said = []

        def running(rank, done, total):
            if not said:
                said.append(1)
                print("RUNNING", *c.pids, flush=True)
        with on_progress(running):
            try:
                c.run(loop)
            except RunInterrupted as e:
                print("INTERRUPTED", time.time(), e, flush=True)
        print("NEXT", *c.run(dist.get_rank), flush=True)
        c.shutdown()

    if __name__ == "__main__":
        main()
"""


@contextmanager
def kernel(tmp_path, *flags):
    """A notebook kernel (a Python process) running a cluster: (process, worker pids),
    once the run is under way. Killed, with its workers, if the test fails."""
    script = tmp_path / "kernel.py"
    script.write_text(textwrap.dedent(KERNEL))
    p = subprocess.Popen([sys.executable, str(script), *flags], stdout=subprocess.PIPE,
                         text=True, cwd=tmp_path)
    family = []
    try:
        line = p.stdout.readline()
        family = psutil.Process(p.pid).children(recursive=True)
        assert line.startswith("RUNNING"), line
        yield p, [int(x) for x in line.split()[1:]]
    finally:
        p.kill()
        for child in family:                   # psutil never signals a reused pid
            with suppress(psutil.NoSuchProcess):
                child.kill()
        p.wait()


def test_ctrl_c_during_a_run_stops_the_workers_and_the_next_run_works(tmp_path, leftovers):
    with kernel(tmp_path) as (p, pids):
        family = descendants(p.pid)              # the forkserver too
        sent = time.time()
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=120)
    lines = dict(line.split(" ", 1) for line in out.splitlines())
    seconds = float(lines["INTERRUPTED"].split()[0]) - sent
    print(f"\n  SIGINT -> RunInterrupted after {seconds:.2f} s")
    assert "the workers were stopped; the next run starts fresh ones" in lines["INTERRUPTED"]
    assert seconds < 15.0
    assert lines["NEXT"] == "0 1 2 3" and p.returncode == 0
    assert gone(family), f"outlived their kernel: {survivors(family)}"
    assert leftovers() == []


def test_the_kernel_killed_with_a_cluster_and_shards_up_leaves_nothing(tmp_path, leftovers):
    with kernel(tmp_path, "--ps") as (p, pids):
        family = descendants(p.pid)
        assert set(pids) < family and len(family) >= 6        # 4 ranks, 2 shards
        server = {psutil.Process(pid).ppid() for pid in pids} - {p.pid}   # the forkserver
        assert len(server) == (start_method() == "forkserver") and server < family
        p.kill()
        killed = time.monotonic()
        p.wait(10)
        # seconds on a quiet machine; the bound leaves room for a laptop at load 20
        assert gone(family, within=15.0), f"workers outlived their kernel: {survivors(family)}"
    print(f"\n  kernel SIGKILL -> all {len(family)} processes gone after "
          f"{time.monotonic() - killed:.2f} s")
    assert leftovers() == []
