"""Grades that cannot be faked, by design (issues 23 and 34): learner code runs only in the
sandbox and the judge reads plain data back, so every forgery below earns 0 — forgeries in
the kernel (also flagged for the instructor), an early exit, forgeries at call time, on the
workers, and more than one attack of each kind that once earned marks: changing the judge's
machinery, code that runs when the judge loads an answer, the answer looked for where the
check keeps it, values that lie, writing the installation, a process left to rewrite the
gradebook. Right answers graded under the instructor's seed earn full marks unflagged;
justifications are collected beside the verdicts; the grader's outputs agree.

One class, graded once (``--seed``) on the toy course (toy_course.py: checks of
milliseconds, registered beside the course's), whose exercise 01 asks for a justification
of ``toy_plan``.
"""
import csv
import json
import site
import time
from pathlib import Path

import nbformat
import pytest

from ddl_lab.tools import grading
from ddl_lab.tools.grading import Limits, grade
from ddl_lab.tools.grading.pristine import solved

from .sample_class import UNSANDBOXED, add_cell_after, other_styles, replace_function
from .toy_course import JUSTIFIED, MODULE, NUMPY, WORKERS

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(UNSANDBOXED, reason="no sandbox can be made here (install "
                                 "bubblewrap: make sandbox): the attacks need one")]
GD, WELCOME = NUMPY, WORKERS            # the parts exercises 01 and 00 played
SEED = 918273645
ATTACKERS = ("jack", "una", "rita", "liam")   # one learner per kind of attack, in KINDS' order
WRITTEN = "Batch 64 halves the steps of batch 32 at the same examples; γ = 0.5 stays stable."

# forgeries run in the learner's kernel, from cells of their own (attack -> phrase of a flag)
IN_THE_KERNEL = {
    "replaces the recording function from an early cell": ('''
from ddl_lab.check import _record, _core
_write = _record.write
_record.write = lambda task, passed, message, score=None: _write(task, True, "all good")
_core.CheckFailed.__init__ = lambda self, *args: Exception.__init__(self, "fine")''',
        "assigns _record.write"),
    "replaces every check in the package namespace": ('''
from ddl_lab import check
for _name in check.__all__:
    setattr(check, _name, lambda *args, **kwargs: print("✔ passed"))''', "setattr"),
    "writes passing lines into the record file from a cell": ('''
import json, os
TASKS = ["toy_mean", "toy_square", "toy_accumulate", "toy_norm", "toy_pick", "toy_plan"]
RECORD = os.path.abspath(os.environ.get("DDL_LAB_GRADE_RECORD", "record.jsonl"))
def forge(pid=None):
    with open(RECORD, "a") as f:
        for t in TASKS:
            f.write(json.dumps({"task": t, "passed": True, "message": "forged",
                                "pid": pid or os.getpid()}) + "\\n")
forge()''', "DDL_LAB_GRADE_RECORD"),
    "writes them from a thread that keeps writing": ('''
import threading, time
def keep_forging():
    while True:
        forge()
        time.sleep(0.05)
threading.Thread(target=keep_forging, daemon=True).start()''', "'record.jsonl'"),
    "writes them from a worker process": ('''
from ddl_lab import shared_cluster
kernel = os.getpid()
shared_cluster(2).run(forge, kernel)''', "'record.jsonl'"),
    "patches torch.distributed.all_reduce in the kernel": ('''
import torch.distributed as dist
dist.all_reduce = lambda tensor, *args, **kwargs: None''', "assigns dist.all_reduce"),
    "reads the instructor's seed from the environment": ('''
print(dict(os.environ))
print([open(f"/proc/{pid}/cmdline", "rb").read() for pid in (os.getpid(), os.getppid())])''',
        "'/proc/"),
}

KERNEL_EXIT = '''print("✔ toy_mean: passed — all good")
import os
os._exit(0)'''

# forgeries run by the learner's own function when the check calls it — in the sandbox, where
# they reach no judge (task -> function source; every one earns 0)
AT_CALL_TIME = {
    "toy_mean": '''def my_toy_mean(x):
    from ddl_lab.check import _record
    real = _record.write
    _record.write = lambda task, passed, message, score=None: real(task, True, message)
    return 0 * x''',
    "toy_square": '''def my_toy_square(*args, **kwargs):
    from ddl_lab.check import _core
    _core.fail = lambda message: None
    return None''',
    "toy_accumulate": '''def my_toy_accumulate(total, x):
    import ddl_lab.check as check
    check.toy_accumulate = lambda fn, **kwargs: None
    return total''',
    "toy_norm": '''def my_toy_norm(x):
    import threading, time
    def keep_passing():
        while True:
            print("✔ toy_norm: passed — all good")
            time.sleep(0.01)
    threading.Thread(target=keep_passing, daemon=True).start()
    return 1.0''',
    "toy_pick": '''def my_toy_pick(x):
    print("✔ toy_pick: passed — all good")
    import os
    os._exit(0)''',
    "toy_plan": '''def my_toy_plan(*args, **kwargs):
    import json, os
    line = json.dumps({"outcome": "passed", "message": "forged", "value": [1, 12]}) + "\\n"
    for fd in range(3, 64):                 # the link to the judge, wherever it is
        try:
            os.write(fd, line.encode())
        except OSError:
            pass
    raise SystemExit(0)''',
}

# The kinds of attack that once earned marks (issue 34), more than one of each; every task
# of every one earns 0. (kind -> {task: function source})
KINDS = {
    # learner code that changes the judge's own machinery, as if it ran in the judge
    "in the judge": {
        "toy_mean": '''def my_toy_mean(x):
    import json
    real = json.dumps
    json.dumps = lambda obj, *a, **k: real({**obj, "outcome": "passed"}) \\
        if isinstance(obj, dict) and "outcome" in obj else real(obj, *a, **k)
    return 0 * x''',
        "toy_square": '''def my_toy_square(x):
    import numpy as np
    np.allclose = np.isclose = lambda *a, **k: True
    vars(np)["allclose"] = lambda *a, **k: True
    return x''',
        "toy_norm": '''def my_toy_norm(x):
    import sys
    for name, module in list(sys.modules.items()):
        table = getattr(module, "_RTOL", None)
        if isinstance(table, dict):
            for k in table:
                table[k] = 1e30
    return 1.0''',
        "toy_accumulate": '''def my_toy_accumulate(total, x):
    import sys
    for module in list(sys.modules.values()):
        if hasattr(module, "fail") and hasattr(module, "passed"):
            vars(module)["fail"] = lambda message: None
    return total''',
    },
    # code that runs when the judge loads what the learner's side sends
    "loading runs code": {
        "toy_mean": '''class Bomb:
    def __reduce__(self):
        return (exec, ("open({marker!r}, 'w').write('ran')",))

trigger = Bomb()

def my_toy_mean(x):
    return [trigger, 0.0]''',
        "toy_square": '''def my_toy_square(x):
    class Bomb(float):
        def __reduce__(self):
            return (exec, ("open({marker!r}, 'w').write('ran')",))
    return Bomb(1.0)''',
        "toy_norm": '''def my_toy_norm(x):
    return lambda *args: 0.0''',
    },
    # the answer looked for where the check keeps it
    "the answer in reach": {
        "toy_mean": '''def my_toy_mean(x):
    import sys
    frame = sys._getframe(1)
    while frame is not None:                # the check's expected value, from its frame
        for name in ("want", "expected", "reference"):
            if name in frame.f_locals:
                return frame.f_locals[name]
        frame = frame.f_back
    return 0.0''',
        "toy_square": '''def my_toy_square(x):
    import toy_checks                       # the checks' own module
    return toy_checks.CASES[0] ** 2''',
        "toy_norm": '''def my_toy_norm(x):
    import importlib
    module = importlib.import_module("ddl_" + "lab.check.gradient" + "_descent")
    return getattr(module, "_reference" + "_gradient")''',
        "toy_pick": '''def my_toy_pick(x):
    import glob
    for path in glob.glob("/**/solutions/*.ipynb", recursive=True):
        return open(path).read()            # a solution notebook
    return None''',
    },
    # values that lie about themselves
    "lying values": {
        "toy_mean": '''import numpy as np

class Anything(np.ndarray):
    __module__ = "torch"
    def __eq__(self, other):
        return True
    def numpy(self):
        return self

def my_toy_mean(x):
    return np.zeros(1).view(Anything)''',
        "toy_square": '''class Same(float):
    def __eq__(self, other):
        return True
    __ne__ = lambda self, other: False
    def __array__(self, *args, **kwargs):
        import numpy as np
        return np.square(np.arange(1.0, 6.0))

def my_toy_square(x):
    return Same(0.0)''',
        "toy_norm": '''class Close(dict):
    def __float__(self):
        return 7.416198487095663

def my_toy_norm(x):
    return Close()''',
    },
}

# the installation and the grader's outputs, from a cell: nothing changes, nothing survives
INSTALLATION = '''import os, site, glob, subprocess, sys
import ddl_lab
tried = []
for folder in site.getsitepackages():
    try:
        open(os.path.join(folder, "zz_forged.pth"), "w").write("import os\\n")
    except OSError as e:
        tried.append(type(e).__name__)
judge = os.path.join(os.path.dirname(ddl_lab.__file__), "tools", "grading", "judge.py")
try:
    open(judge, "a").write("\\n# edited\\n")
except OSError as e:
    tried.append(type(e).__name__)
later = "import time, glob\\ntime.sleep(4)\\n" \\
    "for p in glob.glob({out!r} + '/**', recursive=True):\\n" \\
    "    try: open(p, 'a').write('cleo,9,9,9')\\n    except OSError: pass\\n"
subprocess.Popen([sys.executable, "-c", later], start_new_session=True, env={{}},
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(tried)'''

ON_THE_WORKERS = {
    "toy_rank": '''def my_toy_rank():
    from torch._C._distributed_c10d import ProcessGroup
    ProcessGroup.send = lambda *args, **kwargs: None      # every send "went through"
    return 0''',
}


def written(nb, task: str, text: str) -> None:
    cell = next(c for c in nb.cells if (c.metadata.get("ddl_lab") or {}).get("task") == task)
    cell.source = cell.source.replace("_Your justification here (3–5 sentences)._", text)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, toy_course):
    tmp = tmp_path_factory.mktemp("forgeries")
    course = toy_course
    stub = {s: nbformat.read(course / "exercises" / f"{s}.ipynb", as_version=4)
            for s in (GD, WELCOME)}
    subs, out, marker = tmp / "submissions", tmp / "out", tmp / "pwned"
    subs.mkdir()

    def copy(stem):
        return nbformat.from_dict(json.loads(json.dumps(stub[stem])))

    mallory = copy(GD)
    for source, _ in reversed(IN_THE_KERNEL.values()):
        add_cell_after(mallory, "my_toy_mean", source.strip())
    nbformat.write(mallory, subs / "mallory.ipynb")
    nick = copy(GD)
    add_cell_after(nick, "my_toy_mean", KERNEL_EXIT)
    nbformat.write(nick, subs / "nick.ipynb")
    trudy = copy(GD)
    for task, source in AT_CALL_TIME.items():
        replace_function(trudy, f"my_{task}", source)
    nbformat.write(trudy, subs / "trudy.ipynb")
    walter = copy(WELCOME)
    for task, source in ON_THE_WORKERS.items():
        replace_function(walter, f"my_{task}", source)
    nbformat.write(walter, subs / "walter.ipynb")
    for learner, kind in zip(ATTACKERS, KINDS):
        nb = copy(GD)
        for task, source in KINDS[kind].items():
            replace_function(nb, f"my_{task}", source.replace("{marker!r}", repr(str(marker))))
        nbformat.write(nb, subs / f"{learner}.ipynb")
    ivy = copy(GD)
    add_cell_after(ivy, "my_toy_mean", INSTALLATION.replace("{out!r}", repr(str(out))))
    nbformat.write(ivy, subs / "ivy.ipynb")
    olga = other_styles(solved(course, GD))
    written(olga, JUSTIFIED, WRITTEN)
    nbformat.write(olga, subs / "olga.ipynb")
    judge_py = Path(grading.__file__).with_name("judge.py")
    before = judge_py.read_bytes()
    rows = grade(subs, out, None, Limits(300, 60, 2), course, progress=False,
                 seed=SEED, checks=(MODULE,))
    book = (out / "gradebook.csv").read_text()
    time.sleep(6)                        # ivy's late writer would have woken by now
    return {"rows": {r.name: r for r in rows}, "out": out, "marker": marker, "book": book,
            "judge": (judge_py, before)}


def verdicts(graded, learner):
    return {v.task: v for v in graded["rows"][learner].verdicts}


def test_forgeries_in_the_kernel_earn_nothing_and_are_flagged(graded):
    mallory = graded["rows"]["mallory"]
    assert mallory.total == 0
    assert all("not implemented yet" in v.message for v in mallory.verdicts), mallory.verdicts
    flags = " | ".join(mallory.flags)
    for attack, (_, flag) in IN_THE_KERNEL.items():
        assert flag in flags, f"{attack}: no flag naming {flag!r} in {flags}"
    nick = graded["rows"]["nick"]
    assert nick.total == 0 and all("kernel died" in v.message for v in nick.verdicts)
    assert any("os._exit" in f for f in nick.flags)


def test_the_instructors_seed_never_reaches_the_kernel(graded):
    executed = (graded["out"] / "executed" / f"mallory--{GD}.ipynb").read_text()
    assert "DDL_LAB_PROGRESS" in executed          # the environment was printed …
    assert str(SEED) not in executed                # … without the seed


def test_forgeries_at_call_time_earn_nothing(graded):
    trudy = verdicts(graded, "trudy")
    assert graded["rows"]["trudy"].total == 0, trudy
    assert not any(v.passed for v in trudy.values())
    for task in ("toy_pick", "toy_plan"):           # the kernel ended: the rest ends too
        assert "kernel ended" in trudy[task].message, trudy[task].message
    flags = " | ".join(graded["rows"]["trudy"].flags)
    for phrase in ("_record", "os.write", "os._exit"):
        assert phrase in flags, phrase


def test_forgeries_on_the_workers_earn_nothing(graded):
    walter = verdicts(graded, "walter")
    for task in ON_THE_WORKERS:
        assert not walter[task].passed and walter[task].points == 0, walter[task].message


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_attack_earns_nothing(graded, kind):
    learner = ATTACKERS[list(KINDS).index(kind)]
    mine = verdicts(graded, learner)
    assert graded["rows"][learner].total == 0, {t: v.message for t, v in mine.items()}
    assert not any(v.passed for v in mine.values())
    assert not graded["marker"].exists(), "learner code ran outside the sandbox"


def test_the_installation_and_the_outputs_survive_the_class(graded):
    judge_py, before = graded["judge"]
    assert judge_py.read_bytes() == before
    assert not [p for folder in site.getsitepackages()
                for p in Path(folder).glob("zz_forged.pth")]
    executed = (graded["out"] / "executed" / f"ivy--{GD}.ipynb").read_text()
    assert "Error" in executed                   # each write was refused in the sandbox
    out = graded["out"]
    assert (out / "gradebook.csv").read_text() == graded["book"]
    with open(out / "gradebook.csv", newline="") as f:
        book = {row["learner"]: float(row["total"]) for row in csv.DictReader(f)}
    results = json.loads((out / "results.json").read_text())
    assert {r["learner"]: float(r["total"]) for r in results["learners"]} == book
    for learner, total in book.items():
        page = (out / "feedback" / f"{learner}.html").read_text()
        assert f"Total: {total:g} /" in page, learner


def test_right_answers_under_the_seed_earn_full_marks_unflagged(graded):
    olga = graded["rows"]["olga"]
    assert all(v.passed for v in olga.verdicts), [v.message for v in olga.verdicts]
    assert not olga.flags and not olga.notes


def test_justifications_beside_the_verdicts(graded):
    out = graded["out"]
    with open(out / "gradebook.csv", newline="") as f:
        table = {row["learner"]: row for row in csv.DictReader(f)}
    column = f"justification: {JUSTIFIED}"
    assert table["olga"][column] == WRITTEN
    assert table["trudy"][column] == "(not written)"
    assert table["walter"][column] == ""            # exercise 00 asks for none
    results = json.loads((out / "results.json").read_text())
    assert results["seed"] == SEED
    report = (out / "report.html").read_text()
    assert f"seed {SEED}" in report and WRITTEN in report
    page = (out / "feedback" / "olga.html").read_text()
    assert WRITTEN in page
