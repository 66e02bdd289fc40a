"""The sample class for ``ddl-lab grade``, generated at test time from a course's solutions/
and exercises/: the toy course's (toy_course.py) for the grader's plumbing, the course's own
for the real class and the pieces.

Each learner's notebook is an exercise as they hand it in: the stubs replaced by the
solution's code (or by wrong code), cells added, check cells tampered with, or no notebook
at all. ``write_class(folder, course)`` writes the class the grading tests use and returns
what each learner must get.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

from ddl_lab.tools.grading import sandbox
from ddl_lab.tools.grading.pristine import solved as solved_exercise

from .toy_course import CAPSTONE, JUSTIFIED, NUMPY, SPARE, WORKERS

ROOT = Path(__file__).resolve().parents[3]
# Where no sandbox can be made (no bubblewrap), the class is graded without one: the tests'
# own notebooks are trusted (the attackers of attacks.py are left out of the class there).
UNSANDBOXED = sandbox.why_not() is not None


def exercise(stem: str, course: Path = ROOT) -> nbformat.NotebookNode:
    return nbformat.read(course / "exercises" / f"{stem}.ipynb", as_version=4)


def tasks_of(stem: str, course: Path = ROOT) -> list[tuple[str, str]]:
    """``(task, function)`` for every graded check cell ``check.<task>(<function>)``."""
    return [m for c in exercise(stem, course).cells if "check" in c.metadata.get("tags", [])
            for m in re.findall(r"\bcheck\.(\w+)\((\w+)\)", c.source)]


def solved(stem: str, course: Path = ROOT) -> nbformat.NotebookNode:
    """The exercise with every stub replaced by the solution's code."""
    return solved_exercise(course, stem)


def defining_cell(nb: nbformat.NotebookNode, function: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.cell_type == "code" and f"def {function}(" in c.source)


def replace_function(nb: nbformat.NotebookNode, function: str, source: str) -> None:
    """The learner wrote ``source`` (a whole ``def``) in ``function``'s cell."""
    defining_cell(nb, function).source = source


def add_cell_after(nb: nbformat.NotebookNode, function: str, source: str) -> None:
    """A cell of the learner's own, right after the cell defining ``function``."""
    at = nb.cells.index(defining_cell(nb, function)) + 1
    nb.cells.insert(at, nbformat.v4.new_code_cell(source))


def check_cells(nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [c for c in nb.cells if "check" in c.metadata.get("tags", [])
            and re.search(r"\bcheck\.\w+\(", c.source)]


GD, RING = "01_gradient_descent", "06_ring_allreduce"     # the course's own: the real class
ACCUMULATE_FORGETS_HISTORY = '''def {}(total, x):
    return x * x                    # forgot the running total: total + x²'''
RING_WITH_ALLREDUCE = '''def {}(tensor):
    dist.all_reduce(tensor)         # the one thing the exercise forbids
    return tensor'''
LEAVES_A_CLUSTER = '''import subprocess
from ddl_lab import Cluster
mine = Cluster(2, timeout=30).__enter__()          # started, never closed
print(mine.run(lambda: 1))
helper = subprocess.Popen(["sleep", "600.5"], start_new_session=True)  # escapes the group
for _ in range(3):                                  # 3 MB of output, nearly three times
    print("x" * 1_000_000)                          # what the grader keeps'''


OTHER_STYLES = {  # (function, its cell) for right answers written unlike the solution
    "my_toy_mean": '''import functools
SCALE = 1.0

def total(x):                               # a helper of the learner's own
    return np.sum(x)

def traced(f):                              # a decorator, as learners write them
    @functools.wraps(f)
    def inner(*args, **kwargs):
        return f(*args, **kwargs)
    return inner

@traced
def my_toy_mean(x):
    return SCALE * total(x) / x.shape[0]''',
    "my_toy_accumulate": '''class Accumulator:
    def step(self, total, x):
        return total + np.square(x)

_accumulator = Accumulator()

def my_toy_accumulate(total, x):
    return _accumulator.step(total, x)''',
    "my_toy_norm": "my_toy_norm = lambda x: float(np.linalg.norm(x))",
}


RACE = {"alice": "", "bob": "4, 128"}   # "": the solution's plan, (4, 32)
BOB_MISSED = ("memory 4.0 MiB > 2.0 MiB budget", "held-out loss 3.000 > 2.500 target")


WRITTEN = "Batch 64 halves the steps of batch 32 at the same examples; γ = 0.5 stays stable."


def written(nb: nbformat.NotebookNode, task: str, text: str) -> nbformat.NotebookNode:
    """The learner wrote ``text`` as the justification ``task`` asks for."""
    cell = next(c for c in nb.cells if (c.metadata.get("ddl_lab") or {}).get("task") == task)
    cell.source = cell.source.replace("_Your justification here (3–5 sentences)._", text)
    return nb


def other_styles(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The toy exercise 01 solved, three of its answers written in other styles."""
    for function, source in OTHER_STYLES.items():
        replace_function(nb, function, source)
    return nb


def write_class(folder: Path, course: Path) -> dict[str, dict]:
    """Write the sample class of the toy ``course`` into ``folder``; return, per learner,
    the points expected per task (``{task: points}``) and phrases their notes must contain."""
    def exercise_(stem):
        return exercise(stem, course)

    def solved_(stem):
        return solved(stem, course)

    gd, ring = [t for t, _ in tasks_of(NUMPY, course)], \
        [t for t, _ in tasks_of(WORKERS, course)]
    fn = dict(tasks_of(NUMPY, course) + tasks_of(WORKERS, course))
    race = [t for t, _ in tasks_of(CAPSTONE, course)]
    everything = {t: 1 for t in gd + ring + race}
    want: dict[str, dict] = {}

    def hand_in(learner: str, nb, name: str, points: dict, notes=()):
        path = folder / learner / name if name else folder / f"{learner}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
        entry = want.setdefault(learner, {"points": {}, "notes": []})
        entry["points"].update(points)
        entry["notes"] += list(notes)

    # all right, in a folder of their own with both exercises
    hand_in("alice", solved_(NUMPY), f"{NUMPY}.ipynb", {t: 1 for t in gd})
    hand_in("alice", solved_(WORKERS), "my ring.ipynb", {t: 1 for t in ring})
    # partially wrong: a renamed function, a running sum that forgets; a ring made of
    # dist.all_reduce
    bob = solved_(NUMPY)
    first = fn[gd[0]]
    defining_cell(bob, first).source = defining_cell(bob, first).source.replace(
        f"def {first}(", "def renamed_by_bob(")
    replace_function(bob, fn[gd[2]], ACCUMULATE_FORGETS_HISTORY.format(fn[gd[2]]))
    hand_in("bob", bob, f"{NUMPY}.ipynb", {**{t: 1 for t in gd}, gd[0]: 0, gd[2]: 0})
    bob_ring = solved_(WORKERS)
    replace_function(bob_ring, fn[ring[1]], RING_WITH_ALLREDUCE.format(fn[ring[1]]))
    hand_in("bob", bob_ring, f"{WORKERS}.ipynb", {**{t: 1 for t in ring}, ring[1]: 0})
    # untouched stubs
    hand_in("carol", exercise_(NUMPY), "", {t: 0 for t in gd})
    # a hang in a cell of the learner's own: interrupted at the per-cell limit, then graded
    # (it sleeps: a busy loop is interrupted alike, and would only burn a core meanwhile)
    dave = solved_(NUMPY)
    add_cell_after(dave, fn[gd[0]], "while True:      # watching the loss forever\n"
                   "    import time\n    time.sleep(1)")
    hand_in("dave", dave, "", {t: 1 for t in gd}, ["per-cell limit"])
    # the kernel dies between the two tasks: the first is graded, the second is lost
    erin = solved_(WORKERS)
    erin.cells.insert(erin.cells.index(check_cells(erin)[0]) + 1,
                      nbformat.v4.new_code_cell("import os\nos._exit(3)"))
    hand_in("erin", erin, "", {ring[0]: 1, **{t: 0 for t in ring[1:]}},
            ["kernel died", "exit code 3"])
    # stubs, with the check cells tampered with and a fake pass line
    frank = exercise_(NUMPY)
    checks = check_cells(frank)
    checks[0].source = f'print("✔ {gd[0]}: passed — all good")'
    checks[1].source = "# " + checks[1].source.replace("\n", "\n# ")
    checks[2].metadata["tags"] = []
    checks[2].source = "pass"
    frank.cells.remove(checks[3])
    frank.cells.append(nbformat.v4.new_code_cell(     # a right answer, in a cell of his own
        f"check.{gd[3]}(lambda x: np.sqrt(x @ x))"))
    hand_in("frank", frank, "", {t: 0 for t in gd})
    # not a notebook at all
    folder.joinpath("grace.ipynb").write_text(nbformat.writes(solved_(NUMPY))[:700])
    want["grace"] = {"points": {}, "notes": ["not a readable notebook"]}
    folder.joinpath("kim.ipynb").write_text("")
    want["kim"] = {"points": {}, "notes": ["an empty file"]}
    # the exercise of another lesson
    hand_in("heidi", exercise_(SPARE), "", {}, [f"is exercise {SPARE}", "wrong exercise"])
    # a cluster and a process in a session of its own left running, 3 MB of output
    ivan = solved_(NUMPY)
    add_cell_after(ivan, fn[gd[0]], LEAVES_A_CLUSTER)
    hand_in("ivan", ivan, f"{NUMPY}.ipynb", {t: 1 for t in gd})
    # a stale copy: an older version of the exercise, its check cell as it was then
    judy = solved_(NUMPY)
    judy.metadata["ddl_lab"]["version"] = "0" * 12
    check_cells(judy)[0].source += "  # v1: checked 3 cases"
    hand_in("judy", judy, "", {t: 1 for t in gd}, ["older version"])
    # a segfault right after the imports
    leo = solved_(NUMPY)
    leo.cells.insert(2, nbformat.v4.new_code_cell("import ctypes\nctypes.string_at(0)"))
    hand_in("leo", leo, "", {t: 0 for t in gd}, ["SIGSEGV"])
    # right answers in other styles (a decorator, a helper, a class, a lambda), and the
    # justification the exercise asks for
    hand_in("olga", written(other_styles(solved_(NUMPY)), JUSTIFIED, WRITTEN), "",
            {t: 1 for t in gd})
    # the toy capstone, measured (RACE): alice's plan runs within every budget; bob's is
    # faster, over the memory budget and the target (the order of several ranked runs:
    # test_leaderboard.py)
    for learner, plan in RACE.items():
        nb = solved_(CAPSTONE)
        if plan:
            replace_function(nb, "my_toy_race", f"def my_toy_race():\n    return {plan}")
        hand_in(learner, nb, f"{CAPSTONE}.ipynb", {t: int(learner != "bob") for t in race})
    for entry in want.values():
        entry["columns"] = everything
    return want
