"""The process layer (lesson 00): spawn, error replies, bounded stops, ending with the
parent, and one pickling policy for what travels by value."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddl_lab.runtime import pickling
from ddl_lab.runtime.process import (SPAWN, ByValue, Child, Raised, answer, exit_text,
                                     stop_all)

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


def test_the_spawn_context_is_spawn():
    assert SPAWN.get_start_method() == "spawn"


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
    assert took < 2 * 0.5 + 1.0, f"stopping took {took:.1f} s"
    assert not any(c.alive for c in children)
    assert [exit_text(c.exitcode) for c in children] == ["exit code -9 (SIGKILL)"] * 2
    assert all(c.conn.closed for c in children)


def test_a_child_that_ends_on_sigterm_is_not_killed():
    child = Child.start(_sleeper)
    child.stop(grace=5.0)
    assert exit_text(child.exitcode) == "exit code -15 (SIGTERM)"


def test_a_child_ends_when_its_parent_dies_and_cleans_up(tmp_path):
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
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        assert line.startswith("PID"), line
        pid = int(line.split()[1])
        assert _alive(pid)
    finally:
        parent.kill()
        parent.wait(10)
    assert _within(5.0, lambda: not _alive(pid)), "the child outlived its parent"
    assert _within(5.0, lambda: not left.exists()), "the child did not clean up"


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
    before = set(SPAWN.active_children())         # warm pools of other tests may be up
    yield
    assert not set(SPAWN.active_children()) - before, "a test left a child running"
