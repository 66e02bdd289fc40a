"""Lesson 03's checks: right updates and loops in several styles pass; copies, missing
factors, hard-coded rates, a lock around the write only and the other real mistakes fail
with a message naming the fault — the same verdict every run."""
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.hogwild import engine

NB = "03_hogwild"
IMPORTS = "import math\nimport numpy as np\nimport torch\n"

UPDATE_NUMPY = """
def my_hogwild_update(theta, idx, val, y, lr):
    z = theta[idx] @ val
    theta[idx] -= lr * (1 / (1 + np.exp(-z)) - y) * val
"""

UPDATE_TORCH_AT = """
def my_hogwild_update(theta, idx, val, y, lr):
    z = torch.from_numpy(theta[idx].astype(np.float64)) @ torch.from_numpy(val)
    step = lr * (torch.sigmoid(z).item() - y) * val
    np.subtract.at(theta, idx, step.astype(theta.dtype))
"""


@pytest.fixture
def define(cell):
    return lambda source, name="my_hogwild_update": cell(IMPORTS + source)[name]


def update(body):
    return f"def my_hogwild_update(theta, idx, val, y, lr):\n    {body}\n"


@pytest.mark.parametrize("source", [UPDATE_NUMPY, UPDATE_TORCH_AT])
def test_update_right_answers_pass(source, define, solution, capsys):
    check.hogwild_update(solution(NB, "my_hogwild_update"))
    check.hogwild_update(define(source))
    assert capsys.readouterr().out.count("✔ hogwild_update: passed") == 2


SIG = "1 / (1 + math.exp(-float(theta[idx] @ val)))"


@pytest.mark.parametrize("body, hint", [
    ("raise NotImplementedError('replace this line with your code')", "not implemented yet"),
    (f"w = theta[idx]\n    w -= lr * ({SIG} - y) * val", "updated a copy"),
    (f"theta = theta.copy()\n    theta[idx] -= lr * ({SIG} - y) * val\n    return theta",
     "returned the new θ"),
    (f"theta[idx] += lr * ({SIG} - y) * val", "the step has the wrong sign"),
    (f"theta[idx] -= lr * ({SIG} - y)", "missing the factor val"),
    ("theta[idx] -= lr * (1 / (1 + math.exp(-float(theta[idx].sum()))) - y) * val",
     r"z must be θ\[idx\]·val"),
    (f"theta[idx] -= 0.2 * ({SIG} - y) * val", r"the step is [\d.]+ × lr·\(σ\(z\) − y\)·val: use the lr"),
    (f"theta[idx] -= ({SIG} - y) * val", "lr is missing"),
    (f"val *= lr * ({SIG} - y)\n    theta[idx] -= val", "changed its argument `val` in place"),
    (f"g = np.zeros_like(theta)\n    g[idx] = ({SIG} - y) * val\n    theta -= lr * (g + 0.01 * theta)",
     "coordinate .* changed too"),
])
def test_update_wrong_answers_are_named(body, hint, define):
    with pytest.raises(CheckFailed, match=hint):
        check.hogwild_update(define(update(body)))


def test_update_refuses_the_package_s_update():
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.hogwild_update(engine.sgd_update)


# ------------------------------------------------------------------ task 2: the worker loop

LOOP = "def my_hogwild_worker(theta, problem, rows, lr, lock, locked):\n    {}\n"
CALL = "my_hogwild_update(theta, problem.idx[i], problem.val[i], problem.y[i], {lr})"

WORKER_ACQUIRE = LOOP.format(f"""for i in rows:
        if locked:
            lock.acquire()
        try:
            {CALL.format(lr="lr")}
        finally:
            if locked:
                lock.release()""")

WORKER_CONTEXT = LOOP.format(f"""import contextlib
    guard = lock if locked else contextlib.nullcontext()
    for i in list(rows):
        with guard:
            {CALL.format(lr="lr")}""")

LOCK_AROUND_WRITE_ONLY = LOOP.format("""for i in rows:
        idx, val = problem.idx[i], problem.val[i]
        z = float(theta[idx] @ val)
        step = lr * (1 / (1 + math.exp(-z)) - problem.y[i]) * val
        if locked:
            with lock:
                theta[idx] -= step
        else:
            theta[idx] -= step""")


@pytest.fixture
def worker(define, solution):
    """A loop defined in a cell, next to the notebook's own my_hogwild_update."""
    def make(source):
        fn = define(source, "my_hogwild_worker")
        fn.__globals__["my_hogwild_update"] = solution(NB, "my_hogwild_update")
        return fn
    return make


@pytest.fixture
def solution_worker(solution):
    fn = solution(NB, "my_hogwild_worker")
    fn.__globals__["my_hogwild_update"] = solution(NB, "my_hogwild_update")
    return fn


@pytest.mark.parametrize("source", [WORKER_ACQUIRE, WORKER_CONTEXT])
def test_worker_right_answers_pass(source, worker, solution_worker, capsys):
    check.hogwild_worker(solution_worker)
    check.hogwild_worker(worker(source))
    assert capsys.readouterr().out.count("✔ hogwild_worker: passed") == 2


@pytest.mark.parametrize("loop, hint", [
    ("raise NotImplementedError('replace this line with your code')", "not implemented yet"),
    (f"theta = theta.copy()\n    for i in rows:\n        {CALL.format(lr='lr')}", "theta is unchanged"),
    (f"for i in rows:\n        with lock:\n            {CALL.format(lr='lr')}", "lock-free mode .* took the lock"),
    (f"with lock:\n        for i in rows:\n            {CALL.format(lr='lr')}", "took the lock"),
    (f"for i in rows:\n        {CALL.format(lr='lr')}", "the lock was taken 0 times"),
    (f"for i in rows[::2]:\n        {CALL.format(lr='lr')}", "differs from plain SGD"),
    (f"for i in sorted(rows):\n        {CALL.format(lr='lr')}", "keep the order of `rows`"),
    (f"for i in range(len(rows)):\n        {CALL.format(lr='lr')}", "use the example numbers in `rows`"),
    (f"for i in rows:\n        {CALL.format(lr='problem.lr')}", "use the lr argument"),
])
def test_worker_wrong_answers_are_named(loop, hint, worker):
    with pytest.raises(CheckFailed, match=hint):
        check.hogwild_worker(worker(LOOP.format(loop)))


def test_worker_lock_around_the_write_only_is_seen_every_time(worker, solution_worker):
    """The locked baseline that reads θ outside the lock trains fine on one process; the
    check sees the reads outside the lock — and judges the same way 20 times."""
    wrong = worker(LOCK_AROUND_WRITE_ONLY)
    for _ in range(20):
        with pytest.raises(CheckFailed, match=r"reads .* happened while the lock was NOT held"):
            check.hogwild_worker(wrong)
        check.hogwild_worker(solution_worker)


def test_worker_refuses_the_package_s_loop():
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.hogwild_worker(engine.hogwild_loop)
