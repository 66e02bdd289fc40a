"""The process layer (lesson 00): one start method (a forkserver, or spawn by one setting),
error replies, bounded stops, ending with the parent (the server too), the caller's
environment, and one pickling policy for what travels by value."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from ddl_lab.runtime import pickling, process
from ddl_lab.runtime.process import (CONTEXT, SETTING, ByValue, Child, Raised, answer,
                                     exit_text, start_method, stop_all, use_start_method)

from .notebook import Notebook

ROOT = Path(__file__).resolve().parents[2]


def _answer_once(conn, fn, *first):
    conn.send(answer(fn, *first))


def _stubborn(conn):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn.send("ready")
    time.sleep(120)


def _sleeper(conn):
    time.sleep(120)


def _bad_rank(rank):
    raise ValueError(f"bad rank {rank}")


def _reply(child: Child, timeout: float = 60.0) -> tuple:
    assert child.conn.poll(timeout), "the child did not answer"
    return child.conn.recv()


def test_the_start_method_is_one_setting_and_never_the_platform_default(monkeypatch):
    # set, then removed: monkeypatch puts back what was there (a plain delenv of an unset
    # variable records nothing, and use_start_method's "spawn" outlived the test: every
    # later test in the process then started its workers by spawn)
    monkeypatch.setenv(SETTING, "forkserver")
    monkeypatch.delenv(SETTING)
    assert start_method() == CONTEXT.get_start_method() == "forkserver"
    use_start_method("spawn")
    assert os.environ[SETTING] == "spawn"
    assert start_method() == CONTEXT.get_start_method() == "spawn"
    monkeypatch.setenv(SETTING, "fork")
    with pytest.raises(ValueError, match="forkserver, spawn"):
        start_method()
    with pytest.raises(ValueError, match="forkserver, spawn"):
        use_start_method("fork")


def _environment(conn, names):
    import torch
    conn.send(({n: os.environ.get(n) for n in names}, os.getcwd(), torch.get_num_threads()))


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_child_gets_the_callers_environment_as_it_is_now(monkeypatch, tmp_path, method):
    monkeypatch.setenv(SETTING, method)
    Child.start(_sleeper).stop()                   # the server (if any) is up before the change
    monkeypatch.setenv("DDL_TEST_SET", "now")
    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")     # read at torch's import: followed by hand
    monkeypatch.chdir(tmp_path)
    child = Child.start(_environment, (["DDL_TEST_SET", "HOME"],))
    try:
        env, cwd, threads = _reply(child)
    finally:
        child.stop()
    assert env == {"DDL_TEST_SET": "now", "HOME": None}
    assert (cwd, threads) == (str(tmp_path), 1)


def _parallel_op(conn):
    import torch
    a = torch.randn(256, 256)
    conn.send((torch.get_num_threads(), float((a @ a).sum().isfinite())))


def test_a_child_runs_a_parallel_op_on_the_threads_it_asked_for():
    """The server never ran one, so the child's thread pool starts afresh (no hang)."""
    child = Child.start(_parallel_op, threads=2)
    try:
        assert _reply(child) == (2, 1.0)
    finally:
        child.stop()


def test_a_child_that_raises_answers_with_type_message_and_traceback():
    child = Child.start(_answer_once, (_bad_rank, 3), name="ddl_lab-test")
    try:
        tag, raised = _reply(child)
    finally:
        child.stop()
    assert tag == "err" and isinstance(raised, Raised)
    assert (raised.type, raised.message) == ("ValueError", "bad rank 3")
    assert raised.summary == "ValueError: bad rank 3"
    assert raised.traceback.startswith("Traceback") and "in _bad_rank" in raised.traceback
    assert "in answer" not in raised.traceback              # the frame that caught it
    assert raised.traceback.rstrip().endswith("ValueError: bad rank 3")


def test_answer_says_ok_with_the_result_and_errs_on_a_task_that_cannot_load():
    tag, body = answer(ByValue(divmod), 7, args=[ByValue(2)])
    assert tag == "ok" and pickling.loads(body) == (3, 1)
    broken = ByValue(0)
    broken.payload = b"not a pickle"
    tag, raised = answer(broken)
    assert tag == "err" and raised.type == "UnpicklingError"
    assert Raised.of(KeyError()).summary == "KeyError"           # as a traceback says it


def test_a_child_that_ignores_sigterm_is_killed_within_the_bound():
    children = [Child.start(_stubborn, name=f"ddl_lab-stubborn{i}") for i in range(2)]
    for c in children:
        assert _reply(c) == "ready"
    t0 = time.monotonic()
    stop_all(children, grace=0.5)
    took = time.monotonic() - t0
    # SIGTERM ignored for the grace, then SIGKILL, whose report the forkserver may bring late
    assert took < 0.5 + process._KILLED_REPORT_S, f"stopping took {took:.1f} s"
    assert not any(c.alive for c in children)
    assert [exit_text(c.exitcode) for c in children] == ["exit code -9 (SIGKILL)"] * 2
    assert all(c.conn.closed for c in children)


def test_a_child_that_ends_on_sigterm_is_not_killed():
    child = Child.start(_sleeper)
    child.stop(grace=5.0)
    assert exit_text(child.exitcode) == "exit code -15 (SIGTERM)"


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_child_ends_when_its_parent_dies_and_cleans_up(tmp_path, method):
    """The forkserver too: a killed kernel leaves no process of the course behind."""
    left = tmp_path / "store"
    left.mkdir()
    script = textwrap.dedent(f"""
        import functools, shutil, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from ddl_lab.runtime.process import Child
        from tests.runtime.test_process import _sleeper
        c = Child.start(_sleeper, at_parent_exit=functools.partial(shutil.rmtree, {str(left)!r}))
        print("PID", c.pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, SETTING: method})
    family = []
    try:
        line = parent.stdout.readline()
        assert line.startswith("PID"), line
        pid = int(line.split()[1])
        assert _alive(pid)
        family = [p.pid for p in psutil.Process(parent.pid).children(recursive=True)]
        assert pid in family
    finally:
        parent.kill()
        parent.wait(10)
    # polled: on a quiet machine all within a second; a loaded one needs longer
    assert _within(30.0, lambda: not _alive(pid)), "the child outlived its parent"
    assert _within(30.0, lambda: not left.exists()), "the child did not clean up"
    assert _within(30.0, lambda: not any(map(_alive, family))), "a server outlived the parent"


def _parent_pid(conn):
    conn.send(os.getppid())
    time.sleep(120)


def test_the_forkserver_has_one_thread_and_forks_the_callers_children(monkeypatch):
    """What makes it safe where fork is not: nothing it preloads started a thread (an
    OpenMP pool, a watcher) that a fork would leave half-copied."""
    monkeypatch.setenv(SETTING, "forkserver")
    child = Child.start(_parent_pid)
    try:
        server = _reply(child)
        assert server != os.getpid()
        assert psutil.Process(server).ppid() == os.getpid()
        assert psutil.Process(server).num_threads() == 1
    finally:
        child.stop()


def test_a_child_refuses_to_run_another_ddl_lab_than_its_callers():
    """A server started before sys.path changed may have imported another copy."""
    from ddl_lab.runtime import process
    env = dict(os.environ)
    with pytest.raises(ImportError, match=f"set {SETTING}=spawn"):
        process._become({}, "/elsewhere/ddl_lab/runtime/process.py")
    assert dict(os.environ) == env                 # refused before touching anything
    assert process._become(env, process.__file__) == env


def test_a_server_that_died_is_started_again_and_its_children_end(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from ddl_lab.runtime.process import Child
        from tests.runtime.test_process import _alive, _parent_pid
        first = Child.start(_parent_pid)
        server = first.conn.recv()
        print("SERVER", server, first.pid, flush=True)
        os.kill(server, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while _alive(first.pid) and time.monotonic() < deadline:   # its watch ends it
            time.sleep(0.05)
        print("ENDED", not _alive(first.pid), flush=True)
        second = Child.start(_parent_pid)
        print("AGAIN", second.conn.recv(), os.getpid(), flush=True)
        second.stop()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env={**os.environ, SETTING: "forkserver"})
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert "AGAIN" in lines, out.stderr[-2000:]
    server, first = map(int, lines["SERVER"].split())
    again, parent = map(int, lines["AGAIN"].split())
    assert server != parent and again not in (server, parent)       # a new server
    assert lines["ENDED"] == "True", "a child outlived its server"
    assert out.returncode == 0


def test_a_notebook_cells_function_travels_by_value_through_the_one_policy():
    nb = Notebook()
    nb.cell("""
        import math
        SCALE = 3
        def even(n):
            return n == 0 or odd(n - 1)
        def odd(n):
            return n != 0 and even(n - 1)
        def task(rank):
            return math.sqrt(rank * rank) * SCALE, even(rank)
    """)
    task = nb["task"]
    assert ByValue(task).payload == pickling.dumps(task)       # one policy
    child = Child.start(_answer_once, (ByValue(task), 4))
    try:
        tag, body = _reply(child)
    finally:
        child.stop()
    assert tag == "ok", body
    assert pickling.loads(body) == (12.0, True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _within(seconds: float, ok) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ok():
            return True
        time.sleep(0.05)
    return ok()


@pytest.fixture(autouse=True)
def _no_child_left():
    before = set(CONTEXT.active_children())         # warm pools of other tests may be up
    yield
    assert not set(CONTEXT.active_children()) - before, "a test left a child running"
