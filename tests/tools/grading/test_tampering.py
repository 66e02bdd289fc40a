"""Grades that cannot be faked (issue 23): a table of forgeries, each a submission whose
tasks are all stubs or wrong, graded 0 with "tampered" or a flag naming what it did; right
answers graded under the instructor's seed earn full marks unflagged; justifications are
collected beside the verdicts.

One class, graded once (``--seed``) on the toy course (toy_course.py: checks of
milliseconds, registered beside the course's, fingerprinted with them), whose exercise 01
asks for a justification of ``toy_plan``: four notebooks of exercise 01 (forgeries in the
kernel, an early exit of the kernel, forgeries at call time in the judge, one per task) and
one of exercise 00 (forgeries on the workers), a right answer and a written justification.
"""
import csv
import json

import nbformat
import pytest

from ddl_lab.tools.grading import Limits, grade
from ddl_lab.tools.grading.pristine import solved

from .sample_class import add_cell_after, other_styles, replace_function
from .toy_course import JUSTIFIED, MODULE, NUMPY, WORKERS

pytestmark = pytest.mark.slow
GD, WELCOME = NUMPY, WORKERS            # the parts exercises 01 and 00 played
SEED = 918273645
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

# forgeries run by the learner's own function when the check calls it, in the judge
# (task -> (function source, the kind of verdict: tampered / ended))
AT_CALL_TIME = {
    "toy_mean": ('''def my_toy_mean(x):
    from ddl_lab.check import _record
    real = _record.write
    _record.write = lambda task, passed, message, score=None: real(task, True, message)
    return 0 * x''', "ddl_lab.check._record.write was replaced"),
    "toy_square": ('''def my_toy_square(*args, **kwargs):
    from ddl_lab.check import _core
    _core.fail = lambda message: None
    class Passed(_core.CheckFailed):
        def __init__(self, *args):
            Exception.__init__(self, "✔ passed")
    _core.CheckFailed.__init__ = Passed.__init__
    return None''', "CheckFailed.__init__ was added"),
    "toy_accumulate": ('''def my_toy_accumulate(total, x):
    import ddl_lab.check as check
    import toy_checks as module
    check.toy_accumulate = module.toy_accumulate = lambda fn, **kwargs: None
    return total''', "toy_accumulate was replaced"),
    "toy_norm": ('''def my_toy_norm(x):
    import threading, time
    from ddl_lab.check import _record
    def keep_passing():
        while True:
            _record.write("toy_norm", True, "forged")
            time.sleep(0.01)
    threading.Thread(target=keep_passing, daemon=True).start()
    return 1.0''', "a thread still running keep_passing"),
    "toy_pick": ('''def my_toy_pick(x):
    print("✔ toy_pick: passed — all good")
    import os
    os._exit(0)''', "judge ended early"),
    "toy_plan": ('''def my_toy_plan(*args, **kwargs):
    import json, os, sys
    frame = sys._getframe(1)
    while frame is not None:                # the judge's nonce and its list of verdicts
        nonce, entries = frame.f_locals.get("nonce"), frame.f_locals.get("entries")
        if nonce and entries is not None:
            entries.append({"task": "toy_plan", "passed": True, "message": "forged"})
            line = json.dumps({"nonce": nonce, "outcome": "passed", "message": "forged",
                               "changed": []}) + "\\n"
            for fd in range(3, 64):         # the answer channel, wherever it is
                try:
                    os.write(fd, line.encode())
                except OSError:
                    pass
        frame = frame.f_back
    raise SystemExit(0)''', "two answers for toy_plan"),
}

ON_THE_WORKERS = {
    "toy_rank": ('''def my_toy_rank():
    from torch._C._distributed_c10d import ProcessGroup
    ProcessGroup.send = lambda *args, **kwargs: None      # every send "went through"
    return 0''', "ProcessGroup.send was replaced"),
    "toy_sum": ('''def my_toy_sum():
    import torch, torch.distributed as dist
    n = dist.get_world_size()
    def lie(tensor, *args, **kwargs):                     # "all_reduce", without a byte sent
        tensor.fill_(n * (n - 1) // 2)
    dist.all_reduce = lie
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    return t.item()''', "torch.distributed.all_reduce was replaced"),
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
    subs = tmp / "submissions"
    subs.mkdir()

    mallory = nbformat.from_dict(json.loads(json.dumps(stub[GD])))
    for source, _ in reversed(IN_THE_KERNEL.values()):
        add_cell_after(mallory, "my_toy_mean", source.strip())
    nbformat.write(mallory, subs / "mallory.ipynb")
    nick = nbformat.from_dict(json.loads(json.dumps(stub[GD])))
    add_cell_after(nick, "my_toy_mean", KERNEL_EXIT)
    nbformat.write(nick, subs / "nick.ipynb")
    trudy = nbformat.from_dict(json.loads(json.dumps(stub[GD])))
    for task, (source, _) in AT_CALL_TIME.items():
        replace_function(trudy, f"my_{task}", source)
    nbformat.write(trudy, subs / "trudy.ipynb")
    walter = nbformat.from_dict(json.loads(json.dumps(stub[WELCOME])))
    for task, (source, _) in ON_THE_WORKERS.items():
        replace_function(walter, f"my_{task}", source)
    nbformat.write(walter, subs / "walter.ipynb")
    olga = other_styles(solved(course, GD))
    written(olga, JUSTIFIED, WRITTEN)
    nbformat.write(olga, subs / "olga.ipynb")
    rows = grade(subs, tmp / "out", None, Limits(300, 60, 2), course, progress=False,
                 seed=SEED, checks=(MODULE,))
    return {"rows": {r.name: r for r in rows}, "out": tmp / "out"}


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


def test_forgeries_at_call_time_are_tampered_or_end_the_judge(graded):
    trudy = verdicts(graded, "trudy")
    assert graded["rows"]["trudy"].total == 0
    for task, (_, phrase) in AT_CALL_TIME.items():
        v = trudy[task]
        assert v.points == 0 and phrase in v.message, (task, v.message)
    tampered = {t for t, v in trudy.items() if v.tampered}
    assert tampered == set(AT_CALL_TIME) - {"toy_pick"}
    assert trudy["toy_pick"].message.startswith("judge ended early")
    notes = " | ".join(graded["rows"]["trudy"].notes)
    assert all(f"{t}: tampered" in notes for t in tampered)
    flags = " | ".join(graded["rows"]["trudy"].flags)
    for phrase in ("_record", "sys._getframe", "a frame's locals", "os.write", "os._exit",
                   "subclasses _core.CheckFailed"):
        assert phrase in flags, phrase


def test_forgeries_on_the_workers_are_tampered(graded):
    walter = verdicts(graded, "walter")
    for task, (_, phrase) in ON_THE_WORKERS.items():
        v = walter[task]
        assert v.tampered and v.points == 0 and "on worker" in v.message \
            and phrase in v.message, (task, v.message)


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
    assert f"seed {SEED}" in report and WRITTEN in report and "tampered" in report
    page = (out / "feedback" / "olga.html").read_text()
    assert WRITTEN in page
