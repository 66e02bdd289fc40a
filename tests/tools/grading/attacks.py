"""The attackers of test_tampering.py: learners who try to earn marks they did not, one
attack after another, on the toy course (toy_course.py). ``write_attackers(folder, course,
out, marker)`` hands their notebooks in beside the sample class (sample_class.py); every
task of every one must earn 0.

Forgeries in the kernel (flagged for the instructor too), an early exit, forgeries at call
time and on the workers, and more than one attack of each kind that once earned marks
(issue 34): changing the judge's machinery, code that runs when the judge loads an answer,
the answer looked for where the check keeps it, values that lie, writing the installation,
a process left to rewrite the gradebook.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat

from .sample_class import add_cell_after, replace_function
from .toy_course import NUMPY, WORKERS

ATTACKERS = ("jack", "una", "rita", "liam")   # one learner per kind of attack, in KINDS' order


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
    import glob, os
    import ddl_lab
    beside = os.path.join(os.path.dirname(ddl_lab.__file__), os.pardir, "solutions")
    for path in glob.glob("/tmp/**/solutions/*.ipynb", recursive=True) + \\
            glob.glob(os.path.join(beside, "*.ipynb")):  # where courses lie: a solution
        return open(path).read()
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
# (the writer, in a session of its own with a clean environment, waits for the gradebook to
# append a row to every file of the grader's outputs)
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
later = "import os, time, glob\\n" \\
    "for _ in range(6000):\\n" \\
    "    if os.path.exists({book!r}): break\\n" \\
    "    time.sleep(0.1)\\n" \\
    "for p in glob.glob({out!r} + '/**', recursive=True):\\n" \\
    "    try: open(p, 'a').write('cleo,9,9,9')\\n    except OSError: pass\\n"
writer = subprocess.Popen([sys.executable, "-c", later], start_new_session=True, env={},
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(tried, "a writer waits for the gradebook:", writer.pid)'''

ON_THE_WORKERS = {
    "toy_rank": '''def my_toy_rank():
    from torch._C._distributed_c10d import ProcessGroup
    ProcessGroup.send = lambda *args, **kwargs: None      # every send "went through"
    return 0''',
}



def write_attackers(folder: Path, course: Path, out: Path, marker: Path) -> list[str]:
    """Hand in every attacker's notebook of the toy ``course`` into ``folder`` (the grader
    writes to ``out``; ``marker`` is made only by learner code run outside the sandbox);
    their names."""
    stub = {s: nbformat.read(course / "exercises" / f"{s}.ipynb", as_version=4)
            for s in (NUMPY, WORKERS)}

    def copy(stem):
        return nbformat.from_dict(json.loads(json.dumps(stub[stem])))

    handed: dict[str, nbformat.NotebookNode] = {}
    handed["mallory"] = copy(NUMPY)
    for source, _ in reversed(IN_THE_KERNEL.values()):
        add_cell_after(handed["mallory"], "my_toy_mean", source.strip())
    handed["nick"] = copy(NUMPY)
    add_cell_after(handed["nick"], "my_toy_mean", KERNEL_EXIT)
    handed["trudy"] = copy(NUMPY)
    for task, source in AT_CALL_TIME.items():
        replace_function(handed["trudy"], f"my_{task}", source)
    handed["walter"] = copy(WORKERS)
    for task, source in ON_THE_WORKERS.items():
        replace_function(handed["walter"], f"my_{task}", source)
    for learner, kind in zip(ATTACKERS, KINDS):
        nb = handed[learner] = copy(NUMPY)
        for task, source in KINDS[kind].items():
            replace_function(nb, f"my_{task}", source.replace("{marker!r}", repr(str(marker))))
    handed["ivy"] = copy(NUMPY)
    add_cell_after(handed["ivy"], "my_toy_mean", INSTALLATION.replace(
        "{out!r}", repr(str(out))).replace("{book!r}", repr(str(out / "gradebook.csv"))))
    for learner, nb in handed.items():
        nbformat.write(nb, folder / f"{learner}.ipynb")
    return list(handed)
