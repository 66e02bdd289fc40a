"""The worker runtime's contract (lesson 00; every lesson stands on it)."""
import gc
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import torch.distributed as dist

from ddl_lab import Cluster, WorkerError, WorkerTimeout, launch, shared_cluster
from ddl_lab.runtime import RunInterrupted
from ddl_lab.runtime import available_backends


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:          # a zombie has exited
        return f.read().split()[2] != "Z"


def _gone(pids, within=10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def notebook_function(source: str, name: str, **globals_):
    """Define a function as a notebook cell does: in __main__, by value for dill."""
    ns = {"__name__": "__main__", **globals_}
    exec(textwrap.dedent(source), ns)
    return ns[name]


# ------------------------------------------------------------------ running

def test_results_come_back_in_rank_order(cluster4):
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]
    assert cluster4.run(dist.get_world_size) == [4] * 4


def test_collectives_work_on_the_workers(cluster4):
    def total(x):
        t = torch.tensor([float(dist.get_rank()) + x])
        dist.all_reduce(t)
        return t.item()
    assert cluster4.run(total, 0.5) == [8.0] * 4


def test_a_notebook_cell_function_with_its_helpers_and_imports(cluster4):
    helper = notebook_function("""
        def scale(t):
            return t * FACTOR
        FACTOR = 3
    """, "scale")
    fn = notebook_function("""
        class Box:
            def __init__(self, v): self.v = v
        def work(offset, *, power=1):
            t = torch.ones(2) * (dist.get_rank() + offset) ** power
            dist.all_reduce(t)
            return Box(scale(t).tolist()).v
    """, "work", torch=torch, dist=dist, scale=helper)
    want = [3.0 * sum((r + 1) ** 2 for r in range(4))] * 2
    assert cluster4.run(fn, 1, power=2) == [want] * 4


def test_workers_use_one_thread_by_default_and_the_parameter_changes_it(cluster4):
    assert cluster4.run(torch.get_num_threads) == [1] * 4
    with Cluster(1, num_threads=2) as c:
        assert c.run(torch.get_num_threads) == [2]


def test_launch_is_one_shot():
    assert launch(dist.get_rank, 2) == [0, 1]


def test_two_clusters_at_once_do_not_collide():
    def total():
        t = torch.tensor([1.0])
        dist.all_reduce(t)
        return t.item()
    with Cluster(2) as a, Cluster(3) as b:
        assert a.run(total) == [2.0, 2.0]
        assert b.run(total) == [3.0] * 3
        assert a.run(total) == [2.0, 2.0]


def test_shared_cluster_is_reused_and_bounded():
    c = shared_cluster(1)
    assert shared_cluster(1) is c
    pid = c.pids[0]
    del c                                         # nobody holds it any more
    shared_cluster(2), shared_cluster(3)          # evicts the oldest: the pool keeps two
    assert _gone([pid])


def test_a_held_shared_cluster_is_never_shut_down_by_eviction():
    mine = shared_cluster(1)
    pids = mine.pids
    shared_cluster(2), shared_cluster(3)          # the pool moves on; a learner holds `mine`
    assert mine.alive and mine.pids == pids       # still running, nothing restarted
    assert mine.run(dist.get_world_size) == [1]
    assert shared_cluster(1) is mine              # asked again: the same cluster, not a second


def test_a_stopped_held_shared_cluster_comes_back_inside_the_pool():
    from ddl_lab.runtime.launch import _POOL, close_shared
    mine = shared_cluster(1)
    close_shared()                                # a lesson's last cell
    assert not mine.alive
    again = shared_cluster(1)
    assert again is mine and mine.alive           # restarted in place, one cluster for the key
    assert sum(c is mine for c in _POOL.values()) == 1


def _sum_in_a_new_group():
    t = torch.tensor([1.0])
    dist.all_reduce(t, group=dist.new_group([0, 1]))   # a new group needs the store
    return t.item()


def test_a_cluster_whose_store_folder_was_removed_starts_fresh_workers(tmp_path, monkeypatch):
    """The grading judge's temporary files go to a run's folder, removed when the run ends,
    while its warm cluster is kept for the next learner: a cluster whose file store is gone
    is not run on again (its groups could no longer be made) but started afresh."""
    import shutil
    import tempfile

    from ddl_lab.runtime.process import start_server
    start_server()                  # the forkserver's socket lies elsewhere (as the judge's)
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(run))
    with Cluster(2, timeout=10) as c:
        pids = c.pids
        shutil.rmtree(run)                        # the run ended; the cluster is kept
        run.mkdir()                               # the next run's folder
        assert c.run(_sum_in_a_new_group) == [2.0, 2.0]
        assert c.pids != pids and _gone(pids)


def test_printing_arrives_line_by_line_prefixed_with_the_rank(cluster4, capsys):
    def chatty():
        import sys
        r = dist.get_rank()
        for i in range(50):
            sys.stdout.write(f"line-{r}-{i}-")      # half a line, then the rest
            sys.stdout.write("x" * 30 + "\n")
        print("no newline at the end", end="")
    cluster4.run(chatty)
    lines = capsys.readouterr().out.splitlines()
    pattern = re.compile(r"^\[rank (\d)\] (line-(\d)-\d+-x{30}|no newline at the end)$")
    assert len(lines) == 4 * 51
    for line in lines:
        m = pattern.match(line)
        assert m, f"interleaved or unprefixed line: {line!r}"
        assert m.group(3) in (None, m.group(1))


# ------------------------------------------------------------------ failures

def test_a_rank_that_raises_is_named_with_its_traceback(cluster4):
    def fails():
        if dist.get_rank() == 2:
            raise ValueError("bad shard")
        return dist.get_rank()
    pids = cluster4.pids
    with pytest.raises(WorkerError) as e:
        cluster4.run(fails)
    msg = str(e.value)
    assert "rank 2 raised ValueError: bad shard" in msg
    assert "Traceback" in msg and "in fails" in msg
    assert "_run_task" not in msg                  # the runtime's own frame is hidden
    assert set(e.value.failures) == {2}
    assert cluster4.pids == pids                   # every rank answered: no restart needed
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_a_rank_that_raises_while_others_wait_in_a_collective(cluster4):
    def fails_before_allreduce():
        if dist.get_rank() == 1:
            raise RuntimeError("rank 1 gives up")
        dist.all_reduce(torch.ones(1))
    t0 = time.monotonic()
    with pytest.raises(WorkerError, match="rank 1 raised RuntimeError") as e:
        cluster4.run(fails_before_allreduce)
    assert time.monotonic() - t0 < 15               # seconds, not the 20 s timeout
    assert sorted(e.value.failures) == [0, 1, 2, 3]
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


@pytest.mark.parametrize("how, code", [("exit", "exit code 7"), ("kill", "SIGKILL")])
def test_a_rank_that_dies_is_named_with_its_exit_code(cluster4, how, code):
    def dies(how):
        if dist.get_rank() == 3:
            if how == "exit":
                os._exit(7)
            os.kill(os.getpid(), signal.SIGKILL)
        return 0
    with pytest.raises(WorkerError, match=f"rank 3 died.*{code}"):
        cluster4.run(dies, how)
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_a_segfault_is_reported(cluster4):
    def segfault():
        if dist.get_rank() == 0:
            import ctypes
            ctypes.string_at(0)
    with pytest.raises(WorkerError, match="rank 0 died.*SIGSEGV"):
        cluster4.run(segfault)
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_a_deadlock_times_out_naming_the_ranks_and_the_cluster_recovers(cluster4):
    def deadlock():
        if dist.get_rank() in (0, 2):
            dist.recv(torch.zeros(1), src=1)
        return dist.get_rank()
    t0 = time.monotonic()
    with pytest.raises(WorkerTimeout, match=r"rank\(s\) \[0, 2\] did not answer.*deadlock"):
        cluster4.run_with(deadlock, timeout=1.5)
    assert time.monotonic() - t0 < 12
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_a_result_that_cannot_travel_back_names_the_rank(cluster4):
    def returns_a_lock():
        return (i for i in range(3)) if dist.get_rank() == 1 else 0
    with pytest.raises(WorkerError, match="rank 1 returned a generator that cannot be sent back"):
        cluster4.run(returns_a_lock)


def test_an_interrupted_run_stops_the_workers_and_the_next_run_works(cluster4):
    # Python's own Ctrl-C, as a kernel has it while it runs a cell: this process may have
    # started with SIGINT ignored (a job put in the background: `make test &`), or a library an
    # earlier test used may have left a handler of its own (Spark's cancels its jobs first)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    old = cluster4.pids
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(RunInterrupted, match="the workers were stopped"):
            cluster4.run(time.sleep, 30)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, before)
    assert _gone(old)
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("n", [0, -1, 2.5, "4"])
def test_world_size_must_be_a_positive_int(n):
    with pytest.raises(ValueError, match="world_size must be an integer >= 1"):
        Cluster(n)


def test_unavailable_backend_says_what_is_available():
    if available_backends()["nccl"]:
        pytest.skip("this machine has nccl")
    with pytest.raises(ValueError, match=r"'nccl' is not available here.*Available: \['gloo'\]"):
        Cluster(2, backend="nccl")
    with pytest.raises(ValueError, match="unknown backend 'mpi'"):
        Cluster(2, backend="mpi")


def test_backend_auto_is_gloo_without_gpus(cluster4):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert cluster4.backend == "gloo"


@pytest.mark.parametrize("timeout", [0, -1])
def test_timeout_must_be_positive(timeout):
    with pytest.raises(ValueError, match="timeout must be a positive"):
        Cluster(1, timeout=timeout)


def test_non_callable_and_unpicklable_arguments_are_named(cluster4):
    with pytest.raises(TypeError, match="needs a function"):
        cluster4.run(42)
    with pytest.raises(TypeError, match=r"argument 1 \(generator\) cannot be sent to the workers"):
        cluster4.run(print, 1, (i for i in range(3)))
    with pytest.raises(TypeError, match=r"keyword argument 'gen' \(generator\) cannot be sent"):
        cluster4.run(print, gen=(i for i in range(3)))
    assert cluster4.run(dist.get_rank) == [0, 1, 2, 3]


def test_a_port_in_use_is_a_clear_error():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ValueError, match=f"port {port} on 127.0.0.1 is in use.*port=None"):
            Cluster(2, port=port)


def test_a_named_port_rendezvous_works():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Cluster(2, port=port) as c:
        assert c.run(dist.get_rank) == [0, 1]


# ------------------------------------------------------------------ no orphans

def test_shutdown_and_leaving_with_leave_no_worker():
    with Cluster(2) as c:
        pids = c.pids
    assert _gone(pids)
    c = Cluster(2)
    pids = c.pids
    del c
    gc.collect()
    assert _gone(pids)


def test_start_refuses_a_running_cluster_and_starts_a_stopped_one_again():
    with Cluster(2) as c:
        first = c.pids
        with pytest.raises(RuntimeError, match=r"running already: restart\(\) starts fresh"):
            c.start()                      # once spawned a second set, then "deadlock"
        assert c.pids == first and c.run(dist.get_rank) == [0, 1]
        c.shutdown()
        c.start()
        assert c.run(dist.get_rank) == [0, 1] and not set(c.pids) & set(first)


def _child_pids(script: str) -> tuple[subprocess.Popen, list[int]]:
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("PIDS"), line
    return p, [int(x) for x in line.split()[1:]]


def test_interpreter_exit_leaves_no_worker():
    p, pids = _child_pids("""
        from ddl_lab import Cluster
        c = Cluster(2)
        print("PIDS", *c.pids, flush=True)
    """)
    p.wait(60)
    assert _gone(pids)


def test_workers_exit_when_their_parent_is_killed():
    p, pids = _child_pids("""
        import time
        from ddl_lab import Cluster
        c = Cluster(2)
        print("PIDS", *c.pids, flush=True)
        time.sleep(120)
    """)
    assert all(_alive(x) for x in pids)
    p.kill()
    p.wait(10)
    assert _gone(pids, within=5)


def test_a_kernel_restart_leaves_no_worker():
    from jupyter_client.manager import start_new_kernel
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        reply = []
        kc.execute_interactive("from ddl_lab import Cluster\nc = Cluster(2)\nprint(*c.pids)",
                               timeout=120, output_hook=lambda m: reply.append(m))
        text = "".join(m["content"].get("text", "") for m in reply
                       if m["msg_type"] == "stream")
        pids = [int(x) for x in text.split()]
        assert len(pids) == 2 and all(_alive(x) for x in pids)
        km.restart_kernel(now=True)
        assert _gone(pids, within=10)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


# ------------------------------------------------------------------ torchrun

def test_the_same_function_runs_under_torchrun(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import torch, torch.distributed as dist
        def scaled_sum(factor):
            t = torch.tensor([float(dist.get_rank())]) * factor
            dist.all_reduce(t)
            return t.item()
    """))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          "-m", "ddl_lab.torchrun", "job:scaled_sum", "10"],
                         capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rank 0: 10.0" in out.stdout and "rank 1: 10.0" in out.stdout


def test_workers_report_progress_to_the_parent(cluster4):
    from ddl_lab import progress
    from ddl_lab.runtime import on_progress

    def steps(n):
        for i in range(1, n + 1):
            progress(i, n)
        return dist.get_rank()
    seen = []
    with on_progress(lambda rank, done, total: seen.append((rank, done, total))):
        assert cluster4.run(steps, 1000) == [0, 1, 2, 3]
    assert {(r, 1000, 1000) for r in range(4)} <= set(seen)   # the last step always arrives
    assert len(seen) < 4 * 100                                  # throttled, not 4000 messages
    progress(1, 2)                                              # outside a worker: a no-op


def test_a_cell_function_may_use_ddl_lab_modules_through_an_alias(cluster4):
    import ddl_lab.message_passing.comm as mp_module      # holds a struct.Struct: no pickling by value
    import ddl_lab.welcome as welcome_module
    fn = notebook_function("""
        def via_alias():
            return W.sum_of_ranks(), M.__name__
    """, "via_alias", W=welcome_module, M=mp_module)
    assert cluster4.run(fn) == [(6, "ddl_lab.message_passing.comm")] * 4
