"""Lesson 03's checks accept the solution and reject the stub and plausible wrong answers."""
import textwrap

import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed

UPDATE = """
def hogwild_update(theta, idx, val, y, lr):
    z = float(theta[idx] @ val)
    p = 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))
    theta[idx] -= (lr * (p - y)) * val
"""

WORKER = UPDATE + """
def hogwild_worker(theta, problem, rows, lr, lock, locked):
    for i in rows:
        if locked:
            with lock:
                hogwild_update(theta, problem.idx[i], problem.val[i], problem.y[i], lr)
        else:
            hogwild_update(theta, problem.idx[i], problem.val[i], problem.y[i], lr)
"""


def notebook_function(source: str, name: str):
    """Define a function as a notebook cell does: in __main__, by value for dill."""
    ns = {"__name__": "__main__"}
    exec(textwrap.dedent("import math\nimport numpy as np\n" + source), ns)
    return ns[name]


def test_hogwild_update_accepts_the_solution(capsys):
    check.hogwild_update(notebook_function(UPDATE, "hogwild_update"))
    assert "✔ hogwild_update: passed" in capsys.readouterr().out


@pytest.mark.parametrize("body,message", [
    ("raise NotImplementedError('replace this line with your code')", "not implemented yet"),
    ("w = theta[idx]\n    w -= lr * (1 / (1 + math.exp(-float(w @ val))) - y) * val",
     "updated a copy"),
    ("theta = theta.copy()\n    theta[idx] -= lr * (1 / (1 + math.exp(-float(theta[idx] @ val))) - y) * val\n    return theta",
     "returned the new θ"),
    ("theta[idx] += lr * (1 / (1 + math.exp(-float(theta[idx] @ val))) - y) * val",
     "wrong sign"),
    ("g = np.zeros_like(theta)\n    g[idx] = (1 / (1 + math.exp(-float(theta[idx] @ val))) - y) * val\n    theta -= lr * (g + 0.01 * theta)",
     "coordinate .* changed too"),
])
def test_hogwild_update_rejects(body, message):
    fn = notebook_function(f"def hogwild_update(theta, idx, val, y, lr):\n    {body}\n",
                           "hogwild_update")
    with pytest.raises(CheckFailed, match=message):
        check.hogwild_update(fn)


def test_hogwild_worker_accepts_the_solution(capsys):
    check.hogwild_worker(notebook_function(WORKER, "hogwild_worker"))
    assert "✔ hogwild_worker: passed" in capsys.readouterr().out


@pytest.mark.parametrize("loop,message", [
    ("raise NotImplementedError('replace this line with your code')", "not implemented yet"),
    ("theta = theta.copy()\n    for i in rows:\n        hogwild_update(theta, problem.idx[i], problem.val[i], problem.y[i], lr)",
     "still all zeros"),
    ("for i in rows:\n        with lock:\n            hogwild_update(theta, problem.idx[i], problem.val[i], problem.y[i], lr)",
     "took the lock"),
    ("with lock:\n        for i in rows:\n            hogwild_update(theta, problem.idx[i], problem.val[i], problem.y[i], lr)",
     "took the lock"),
    ("for i in rows:\n        hogwild_update(theta, problem.idx[i], problem.val[i], problem.y[i], lr)",
     "lock was taken 0 times"),
    ("for i in rows[::2]:\n        hogwild_update(theta, problem.idx[i], problem.val[i], problem.y[i], lr)",
     "differs from plain SGD"),
])
def test_hogwild_worker_rejects(loop, message):
    src = UPDATE + f"\ndef hogwild_worker(theta, problem, rows, lr, lock, locked):\n    {loop}\n"
    with pytest.raises(CheckFailed, match=message):
        check.hogwild_worker(notebook_function(src, "hogwild_worker"))
