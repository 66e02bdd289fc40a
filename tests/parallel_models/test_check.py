"""Lesson 02's checks accept the solution and reject the stub and plausible wrong answers."""
import textwrap

import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed


def notebook_function(source: str, name: str):
    """Define a function as a notebook cell does: in __main__, by value for dill."""
    ns = {"__name__": "__main__"}
    exec(textwrap.dedent("import threading\nimport numpy as np\n" + source), ns)
    return ns[name]


STUB = "def {name}(*args):\n    raise NotImplementedError('replace this line with your code')"

SUM = """
def threaded_sum(x, num_threads):
    n = len(x)
    partials = [0.0] * num_threads
    def work(t):
        partials[t] = x[t * n // num_threads:(t + 1) * n // num_threads].sum()
    team = [threading.Thread(target=work, args=(t,)) for t in range(num_threads)]
    for th in team:
        th.start()
    for th in team:
        th.join()
    return float(sum(partials))
"""


def test_threaded_sum_accepts_the_solution(capsys):
    check.threaded_sum(notebook_function(SUM, "threaded_sum"))
    assert "✔ threaded_sum: passed" in capsys.readouterr().out


def test_threaded_sum_rejects_the_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.threaded_sum(notebook_function(STUB.format(name="threaded_sum"), "threaded_sum"))


@pytest.mark.parametrize("update", ["total[0] += x[lo:hi].sum()", "total[0] = total[0] + x[lo:hi].sum()"])
def test_threaded_sum_catches_the_lost_update(update):
    racy = SUM.replace("partials = [0.0] * num_threads", "total = np.zeros(1)").replace(
        "partials[t] = x[t * n // num_threads:(t + 1) * n // num_threads].sum()",
        "lo, hi = t * n // num_threads, (t + 1) * n // num_threads\n        " + update).replace(
        "return float(sum(partials))", "return float(total[0])")
    for _ in range(3):                       # reliably, not once in a while
        with pytest.raises(CheckFailed, match="lost update"):
            check.threaded_sum(notebook_function(racy, "threaded_sum"))


def test_threaded_sum_rejects_no_threads_and_wrong_blocks():
    serial = "def threaded_sum(x, num_threads):\n    return float(x.sum())"
    with pytest.raises(CheckFailed, match="started 0 thread"):
        check.threaded_sum(notebook_function(serial, "threaded_sum"))
    gap = SUM.replace("x[t * n // num_threads:(t + 1) * n // num_threads]",
                      "x[t * n // num_threads:(t + 1) * n // num_threads - 1]")
    with pytest.raises(CheckFailed, match="cover x exactly once"):
        check.threaded_sum(notebook_function(gap, "threaded_sum"))


CHUNK = """
def next_chunk(next_iter, lock, chunk, stop):
    with lock:
        lo = int(next_iter[0])
        if lo >= stop:
            return None
        hi = min(lo + chunk, stop)
        next_iter[0] = hi
    return range(lo, hi)
"""


def test_dynamic_chunk_accepts_the_solution(capsys):
    check.dynamic_chunk(notebook_function(CHUNK, "next_chunk"))
    assert "✔ dynamic_chunk: passed" in capsys.readouterr().out


def test_dynamic_chunk_rejects_the_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.dynamic_chunk(notebook_function(STUB.format(name="next_chunk"), "next_chunk"))


def test_dynamic_chunk_rejects_a_dispenser_without_the_lock():
    nolock = CHUNK.replace("    with lock:\n", "    if True:\n")
    with pytest.raises(CheckFailed, match="never took the lock"):
        check.dynamic_chunk(notebook_function(nolock, "next_chunk"))


def test_dynamic_chunk_catches_the_race_of_a_read_outside_the_lock():
    half = """
def next_chunk(next_iter, lock, chunk, stop):
    lo = int(next_iter[0])
    if lo >= stop:
        return None
    hi = min(lo + chunk, stop)
    with lock:
        next_iter[0] = hi
    return range(lo, hi)
"""
    for _ in range(2):                       # reliably, on real processes
        with pytest.raises(CheckFailed, match="race: 2 processes claimed"):
            check.dynamic_chunk(notebook_function(half, "next_chunk"))


def test_dynamic_chunk_rejects_a_last_chunk_past_stop():
    past = CHUNK.replace("hi = min(lo + chunk, stop)", "hi = lo + chunk")
    with pytest.raises(CheckFailed, match=r"range\(8, 10\)"):
        check.dynamic_chunk(notebook_function(past, "next_chunk"))
