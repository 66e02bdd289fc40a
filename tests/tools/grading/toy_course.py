"""A toy course for the grading suites, written at test time: the grader's plumbing
(gradebook, limits, kernel death, forgeries, tampering) is tested on checks that take
milliseconds, while one real class (test_real_class.py) grades the course's own checks
end to end.

``write_course(folder)`` writes ``folder/course`` (solutions/ and the exercises/ the
generator makes of them) and ``folder/checks/toy_checks.py``, a checks module declared with
``@task`` as the course's checks are and registered beside them in ``ddl_lab.check`` when
it is imported. ``grade(..., checks=("toy_checks",))`` has each judge import it (and send
its code to the sandbox by value, as the course's checks are); the module's folder goes on
PYTHONPATH (the ``toy_course`` fixture, conftest.py).

The exercises play the parts the course's exercises 01, 00, 03 and 15 played: ``01_toy`` six
tasks in numpy (the last one asks for a justification), ``00_toy`` three tasks on two
workers (the second forbids ``dist.all_reduce``), ``03_toy`` an exercise no class is asked
for, ``15_toy`` the capstone: a plan whose run its check measures, recording the figures
lesson 15's check records for the class's leaderboard.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat

from ddl_lab.tools.notebooks import make_exercises

MODULE = "toy_checks"
NUMPY, WORKERS, SPARE, CAPSTONE = "01_toy", "00_toy", "03_toy", "15_toy"

CHECKS = '''
"""The toy course's checks (tests/tools/grading/toy_course.py): milliseconds each."""
import sys

import numpy as np

import ddl_lab.check as check
from ddl_lab.check._core import call_local, fail, name_of, passed, run_cases, task
from ddl_lab.runtime.worlds import WorldFailed

CASES = [np.arange(1.0, 6.0), np.array([-2.0, 0.5, 4.0])]


def _compare(name, fn, reference, cases):
    __tracebackhide__ = True
    for args in cases:
        got, want = call_local(fn, *args), reference(*args)
        if not np.allclose(np.asarray(got, dtype=float), want):
            ratio = np.asarray(got, dtype=float) / want if np.all(want) else None
            hint = " (twice too large)" if ratio is not None and np.allclose(ratio, 2) else ""
            fail(f"{name} returned {got}, expected {want}{hint}")
    passed(name.removeprefix("my_"), f"{len(cases)} cases")


@task("toy")
def toy_mean(fn):
    """Task 1: the mean of an array."""
    _compare("my_toy_mean", fn, np.mean, [(x,) for x in CASES])


@task("toy")
def toy_square(fn):
    """Task 2: the squares of an array."""
    _compare("my_toy_square", fn, np.square, [(x,) for x in CASES])


@task("toy")
def toy_accumulate(fn):
    """Task 3: a running sum of squares, ``(total + x², x)``."""
    _compare("my_toy_accumulate", fn, lambda total, x: total + x * x,
             [(x, x + 1) for x in CASES])


@task("toy")
def toy_norm(fn):
    """Task 4: the Euclidean norm."""
    _compare("my_toy_norm", fn, np.linalg.norm, [(x,) for x in CASES])


@task("toy")
def toy_pick(fn):
    """Task 5: the largest value."""
    _compare("my_toy_pick", fn, np.max, [(x,) for x in CASES])


@task("toy")
def toy_plan(fn):
    """Task 6: a plan ``(a, b)`` with ``a · b == budget`` and ``a <= b``."""
    __tracebackhide__ = True
    for budget in (12, 36):
        a, b = call_local(fn, budget)
        if a * b != budget or a > b:
            fail(f"my_toy_plan({budget}) returned ({a}, {b}): a · b must be {budget}, a <= b")
    passed("toy_plan", "two budgets")


def _on_two_workers(name, fn, body, *args):
    __tracebackhide__ = True
    try:
        outcome = run_cases(body, [(2, args)], fn=fn, timeout=30)[0]
    except WorldFailed as e:
        outcome = e
    if outcome.failure is not None:
        fail(outcome.failure.line if outcome.failure.kind == "stub" else
             f"{name} failed on the workers: {outcome.failure.line}")
    return outcome.results


@task("toy")
def toy_rank(fn):
    """Task 1 on workers: each worker returns its rank."""
    __tracebackhide__ = True
    got = _on_two_workers("my_toy_rank", fn, fn)
    if got != [0, 1]:
        fail(f"my_toy_rank returned {got} on two workers, expected [0, 1]")
    passed("toy_rank", "two workers")


@task("toy")
def toy_sum(fn):
    """Task 2 on workers: the sum of the ranks, on every rank."""
    __tracebackhide__ = True
    got = _on_two_workers("my_toy_sum", fn, fn)
    if got != [1, 1]:
        fail(f"my_toy_sum returned {got} on two workers, expected [1, 1]")
    passed("toy_sum", "two workers")


def counted(fn, value):
    """Worker: ``fn`` on a tensor, counting its calls of dist.all_reduce."""
    import torch
    import torch.distributed as dist
    calls, real = [], dist.all_reduce
    dist.all_reduce = lambda *args, **kwargs: (calls.append(1), real(*args, **kwargs))[1]
    try:
        out = fn(torch.tensor([float(value + dist.get_rank())]))
    finally:
        dist.all_reduce = real
    return float(out.item()), len(calls)


@task("toy")
def toy_ring(fn):
    """Task 3 on workers: a sum over two ranks by send and receive, no dist.all_reduce."""
    __tracebackhide__ = True
    got = _on_two_workers("my_toy_ring", fn, counted, fn, 3)
    if any(n for _, n in got):
        fail("my_toy_ring called dist.all_reduce, the one thing this task forbids")
    if [v for v, _ in got] != [7.0, 7.0]:
        fail(f"my_toy_ring gave {[v for v, _ in got]}, expected [7.0, 7.0]")
    passed("toy_ring", "two workers")


EXAMPLES, MIB = 960, 1 << 20


@task("toy")
def toy_race(fn):
    """The toy capstone: a plan ``(workers, batch)`` for 960 examples, its run "measured"
    (figures computed from the plan) as lesson 15's check measures one."""
    __tracebackhide__ = True
    workers, batch = (int(x) for x in call_local(fn))
    steps = -(-EXAMPLES // (workers * batch))
    loss = round(2.0 + 2.0 / steps, 3)
    figures = {"board": "toy_race", "wall_s": round(steps * (0.1 + batch / 100 / workers), 3),
               "peak_bytes": batch * MIB / 32, "memory_budget": 2 * MIB,
               "bytes_per_step": (workers - 1) * MIB / 16, "bytes_budget": MIB / 4,
               "steps": steps, "steps_budget": 40, "loss": loss, "target": 2.5,
               "curve": [[s, round(loss + 2.0 / s, 3)] for s in range(1, steps + 1)],
               "plan": name_of(fn)}
    figures["within"] = all(figures[k] <= figures[b] for k, b in (
        ("peak_bytes", "memory_budget"), ("bytes_per_step", "bytes_budget"),
        ("steps", "steps_budget"), ("loss", "target")))
    if not figures["within"]:
        fail(f"my_toy_race's plan ({workers}, {batch}) missed a budget", figures=figures)
    passed("toy_race", f"{steps} steps in {figures['wall_s']} s", figures=figures)


TOY = ["toy_mean", "toy_square", "toy_accumulate", "toy_norm", "toy_pick", "toy_plan",
       "toy_rank", "toy_sum", "toy_ring", "toy_race"]
for _name in TOY:                         # registered beside the course's checks
    setattr(check, _name, globals()[_name])
    check.__all__.append(_name)
sys.modules["ddl_lab.check.toy"] = sys.modules[__name__]
'''

IMPORTS = "import numpy as np\nimport torch\nimport torch.distributed as dist\nfrom ddl_lab import check"
TASKS = {  # exercise -> [(task, the learner's function, its solution), ...]
    NUMPY: [("toy_mean", "my_toy_mean(x)", "return x.sum() / len(x)"),
            ("toy_square", "my_toy_square(x)", "return x * x"),
            ("toy_accumulate", "my_toy_accumulate(total, x)", "return total + x * x"),
            ("toy_norm", "my_toy_norm(x)", "return np.sqrt(np.sum(x * x))"),
            ("toy_pick", "my_toy_pick(x)", "return max(x)"),
            ("toy_plan", "my_toy_plan(budget)",
             "a = max(d for d in range(1, int(budget ** 0.5) + 1) if budget % d == 0)\n"
             "return a, budget // a")],
    WORKERS: [("toy_rank", "my_toy_rank()", "return dist.get_rank()"),
              ("toy_ring", "my_toy_ring(tensor)",
               "other = torch.empty_like(tensor)\npeer = 1 - dist.get_rank()\n"
               "if dist.get_rank() == 0:\n    dist.send(tensor, peer)\n    dist.recv(other, peer)\n"
               "else:\n    dist.recv(other, peer)\n    dist.send(tensor, peer)\n"
               "return tensor + other"),
              ("toy_sum", "my_toy_sum()",
               "t = torch.tensor([dist.get_rank()])\ndist.all_reduce(t)\nreturn int(t.item())")],
    SPARE: [("toy_pick", "my_toy_pick(x)", "return max(x)")],
    CAPSTONE: [("toy_race", "my_toy_race()", "return 4, 32")],
}
JUSTIFIED = "toy_plan"
RUBRICS = f'''
["{NUMPY}".{JUSTIFIED}]
points = 2
full = "The plan's two factors are the divisors of the budget nearest its square root."
[["{NUMPY}".{JUSTIFIED}.partial]]
points = 1.5
says = "Divisors of the budget, without saying why the nearest to its root."
[["{NUMPY}".{JUSTIFIED}.partial]]
points = 0.5
says = "A plan that fits the budget, with no reason."
'''


def solution(stem: str) -> nbformat.NotebookNode:
    """A toy solution notebook: imports, then per task a prompt, its function, its check."""
    v4 = nbformat.v4
    cells = [v4.new_markdown_cell(f"# Toy exercise {stem}"), v4.new_code_cell(IMPORTS)]
    for k, (task, signature, body) in enumerate(TASKS[stem], 1):
        inner = textwrap.indent(f"### BEGIN SOLUTION\n{body}\n### END SOLUTION", "    ")
        cells += [v4.new_markdown_cell(f"## Task {k}: {task} (~1 min)"),
                  v4.new_code_cell(f"def {signature}:\n{inner}"),
                  v4.new_code_cell(f"check.{task}({signature.split('(')[0]})",
                                   metadata={"tags": ["check"]})]
        if task == JUSTIFIED:
            cells.insert(-1, v4.new_markdown_cell(
                "Justify your plan.\n<!-- BEGIN SOLUTION -->\nThe worked justification.\n"
                "<!-- END SOLUTION -->", metadata={"tags": ["justification"],
                                                   "ddl_lab": {"task": task}}))
    for i, cell in enumerate(cells):
        cell.id = f"{stem}-{i}"
    return v4.new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})


def write_course(folder: Path) -> Path:
    """``folder/course`` (solutions/ with the rubric of the justification, exercises/) and
    ``folder/checks/toy_checks.py``."""
    course = folder / "course"
    (course / "solutions").mkdir(parents=True)
    for stem in TASKS:
        nbformat.write(solution(stem), course / "solutions" / f"{stem}.ipynb")
    (course / "solutions" / "rubrics.toml").write_text(RUBRICS)
    make_exercises(course)
    (folder / "checks").mkdir()
    (folder / "checks" / f"{MODULE}.py").write_text(CHECKS)
    return course
