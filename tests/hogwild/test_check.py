"""Lesson 03's checks: right updates and loops in several styles pass; copies, missing
factors, hard-coded rates, a lock around the write only and the other real mistakes fail
with a message naming the fault — the same verdict every run. The overlap reasoning names the
uniform approximation, counting oneself and counting all pairs; the plan names too small and
too large a rate, too few epochs and a worker over its budget."""
import numpy as np
import pytest
import torch

from ddl_lab import check
from ddl_lab.check import CheckFailed
from tests.learner_types import STYLES, in_learner_types

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
    check.hogwild_update(define(source))
    assert capsys.readouterr().out.count("✔ hogwild_update: passed") == 1


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


# ------------------------------------------------------------------ task 3: expected overlap

def overlap_loop(freq, workers):
    total = 0.0
    for f in freq:                            # per coordinate: both touch it
        total += f * f
    return total * (workers - 1)


def overlap_torch(freq, workers):
    f = torch.as_tensor(freq)
    return (workers - 1) * (f @ f)            # a 0-d tensor


def overlap_in_float32(freq, workers):
    f = np.asarray(freq, dtype=np.float32)
    return np.float32(workers - 1) * np.sum(f * f)


@pytest.mark.parametrize("right", [overlap_loop, overlap_torch, overlap_in_float32])
def test_overlap_right_answers_pass(right, solution, capsys):
    check.expected_overlap(right)
    assert capsys.readouterr().out.count("✔ expected_overlap: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (lambda f, w: (w - 1) * np.sum(f), "counts the coordinates the other updates touch"),
    (lambda f, w: (w - 1) * np.sum(f) ** 2 / len(f), "assumes every feature equally frequent"),
    (lambda f, w: w * np.sum(f ** 2), "your own update is no clash"),
    (lambda f, w: w * (w - 1) / 2 * np.sum(f ** 2), "every pair of workers"),
    (lambda f, w: (w - 1) * (1 - np.prod(1 - f ** 2)), "the chance that an update shares at least"),
    (lambda f, w: [1.0, 2.0], "return one number"),
    (lambda f, w: None, "returned None"),
])
def test_overlap_wrong_answers_are_named(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.expected_overlap(wrong)


# ------------------------------------------------------------------ task 4: a Hogwild! plan

def plan(workers, epochs, lr):
    return lambda examples, max_updates, max_workers: {"workers": workers, "epochs": epochs,
                                                       "lr": lr}


def plan_by_capacity(examples, max_updates_per_worker, max_workers):
    """All the workers, as many epochs as fit, at a more cautious rate."""
    epochs = min(6, max_updates_per_worker * max_workers // examples)
    return {"workers": max_workers, "epochs": epochs, "lr": 0.3}


def test_plan_right_answers_pass(solution, capsys):
    check.hogwild_plan(solution(NB, "my_hogwild_plan"))
    check.hogwild_plan(plan_by_capacity)
    check.hogwild_plan(solution(NB, "my_hogwild_plan"), seed=2)     # another drawn budget
    out = capsys.readouterr().out
    assert out.count("✔ hogwild_plan: passed — lock-free on real processes sharing θ") == 3


def divides_only(examples, max_updates_per_worker, max_workers):
    """Counts a worker's share of an epoch as ⌊examples/workers⌋: right at the prompt's
    2,000 examples on 3 workers, over budget where the workers do not divide the examples."""
    epochs = max_updates_per_worker // (examples // max_workers)
    return {"workers": max_workers, "epochs": epochs, "lr": 0.4}


LOOKED_UP = {(2000, 3000, 3): {"workers": 3, "epochs": 4, "lr": 0.4}}


@pytest.mark.parametrize("wrong, hint", [
    (plan(3, 4, 0.05), "too small a rate: serial SGD at γ = 0.05 also stops"),
    (plan(3, 4, 3.0), "too large a rate.*hottest feature is in \\d+% of the examples"),
    (plan(3, 1, 0.3), "1 epoch\\(s\\) are not enough at any rate"),
    (plan(1, 4, 0.3), "busiest worker would do 8,000 updates, but there is time for 3,000"),
    # issue 26: plans that ignore their inputs — each passes the prompt's budgets
    (plan(3, 4, 0.3), "the same plan, \\(3, 4, 0.3\\), for all \\d budgets.*must be a "
                      "function of its inputs"),
    (lambda e, u, w: LOOKED_UP[(e, u, w)], "raised KeyError.*budgets the prompt never showed"),
    (divides_only, "integer arithmetic that rounds down is right only when they divide evenly"),
    (plan(4, 4, 0.3), "lends you 3 processes"),
    (plan(3, 2.5, 0.3), "epochs = 2.5: a whole number"),
    (lambda e, u, w: (3, 4, 0.3), "return a dict"),
])
def test_plan_wrong_answers_are_named(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.hogwild_plan(wrong)


@pytest.mark.parametrize("task, args", [("expected_overlap", "freq, workers"),
                                        ("hogwild_plan", "examples, max_updates, max_workers")])
def test_reasoning_and_design_reject_the_stub(task, args, define):
    stub = define(f"def my_{task}({args}):\n"
                  "    raise NotImplementedError('replace this line with your code')\n",
                  f"my_{task}")
    with pytest.raises(CheckFailed, match="not implemented yet"):
        getattr(check, task)(stub)


# ------------------------------------------------------------------ one rule for numbers (issue 26)

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task, name", [("expected_overlap", "my_expected_overlap"),
                                        ("hogwild_plan", "my_hogwild_plan")])
def test_solutions_pass_in_the_learner_s_number_types(task, name, style, solution, capsys):
    """hogwild_update and hogwild_worker return nothing (they write θ in place): no number
    of theirs to convert."""
    getattr(check, task)(in_learner_types(solution(NB, name), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
