"""The judge's parts without a class: plain data is all the judge reads (lying values made
plain, no code run while reading), the sandbox hides and forbids what it should, the
grader refuses to grade unsandboxed without the flag, the instructor's seed gives other
cases (only under grading), the scan flags forgeries, the nbgrader round trip reaches the
check's verdict in a judge, a learner's function that never returns ends its task at
the limit, and a check's own run on the judge's workers works run after run."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import torch

from ddl_lab.check import _diagnose
from ddl_lab.tools.grading import Limits, grade, sandbox
from ddl_lab.tools.grading.handover import judged
from ddl_lab.tools.grading.plain import NotPlain, Opaque, State, decode, dumps, loads
from ddl_lab.tools.grading.scan import cell_flags, flags

from .sample_class import GD, ROOT, solved, tasks_of
from .test_pieces import COURSE

needs_sandbox = pytest.mark.skipif(sandbox.why_not() is not None,
                                   reason=f"no sandbox here: {sandbox.why_not()}")


class LiesAboutEverything(np.ndarray):
    """An array that equals anything and claims to be a torch tensor."""
    __module__ = "torch"

    def __eq__(self, other):
        return True

    def numpy(self):
        return self


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_plain_data_is_all_the_judge_reads():
    lie = np.arange(3.0).view(LiesAboutEverything)
    got = loads(dumps(lie))
    assert type(got) is np.ndarray and got.tolist() == [0.0, 1.0, 2.0]
    class Yes(float):
        def __eq__(self, other):
            return True
    assert type(loads(dumps(Yes(2.5)))) is float and loads(dumps(Yes(2.5))) != 3
    same = [1, 2.5, "s", None, True, (1, 2), {"a": [1]}, b"x", 2 ** 80, float("inf"),
            torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), np.float32(1.5)]
    for value in same:
        back = loads(dumps(value))
        assert type(back) is type(value) and repr(back) == repr(value), value
    assert isinstance(loads(dumps(Evil())), Opaque)         # never rebuilt, never run
    assert isinstance(loads(dumps(lambda: 1)), Opaque)
    for forged in ({"__pickle__": "gASV"}, {"__array__": "|O", "shape": [1], "data": ""},
                   {"__tensor__": "Tensor", "shape": [1], "data": ""}):
        with pytest.raises(NotPlain):
            decode(forged)
    outside = decode({"__dataclass__": "subprocess:Popen", "fields": {"args": ["true"]}})
    assert isinstance(outside, Opaque)                       # only the course's dataclasses
    assert isinstance(decode({"__state__": "ddl_lab.x:Y", "vars": {"calls": [1]}}), State)


@needs_sandbox
def test_the_sandbox_hides_forbids_and_takes_everything_with_it(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    course_file = ROOT / "README.md"
    probe = textwrap.dedent(f"""
        import json, os, socket, subprocess
        out = {{}}
        try:
            open({str(course_file)!r}, "a").write("x")
            out["course"] = "written"
        except OSError as e:
            out["course"] = type(e).__name__
        import importlib.util
        import ddl_lab.check as c
        out["checks"] = importlib.util.find_spec("ddl_lab.check.gradient_descent") is not None \
            or os.path.exists(
            os.path.join(os.path.dirname(c.__file__), "gradient_descent.py"))
        out["solutions"] = os.listdir({str(ROOT / "solutions")!r})
        out["env"] = sorted(os.environ)
        out["interfaces"] = sorted(name for _, name in socket.if_nameindex())
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("1.1.1.1", 53))
            out["net"] = "connected"
        except OSError as e:
            out["net"] = type(e).__name__
        import sys
        from ddl_lab.ml.data import digits
        digits()
        out["sklearn"] = "sklearn" in sys.modules       # the grader's cached split came in
        subprocess.Popen(["sleep", "600.25"], start_new_session=True)
        out["pid"] = os.getpid()
        open("probe.json", "w").write(json.dumps(out))
    """)
    box = sandbox.Box(work, sandbox.hidden_from_learners(ROOT))
    from ddl_lab.ml.data import digits
    digits()                                        # the grader's cache holds the split
    env = sandbox.environment(work, "DDL_LAB_GRADE_JOB", "t")
    subprocess.run(sandbox.command(box, [sys.executable, "-c", probe], env), env=env,
                   timeout=120, check=True)
    out = json.loads((work / "probe.json").read_text())
    assert out["course"] in ("OSError", "PermissionError")
    assert out["checks"] is False and out["solutions"] == []
    assert "DDL_LAB_GRADE_SEED" not in out["env"] and "HOME" in out["env"]
    assert out["interfaces"] == ["lo"] and out["net"] != "connected"
    assert out["sklearn"] is False
    assert out["pid"] < 10                          # its own PID namespace …
    assert _gone_within(10.0, "sleep 600.25")       # … whose processes died with it


def _gone_within(seconds: float, pattern: str) -> bool:
    """No process matches ``pattern`` any more, within ``seconds`` (the kernel ends a PID
    namespace's processes as its first one exits; a loaded machine reaps them a little later)."""
    deadline = time.monotonic() + seconds
    while subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_without_a_sandbox_grading_refuses_unless_told(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "why_not", lambda: "bubblewrap (bwrap) is not installed")
    with pytest.raises(sandbox.NoSandbox, match="--trust-learner-code"):
        grade(tmp_path, tmp_path / "out", progress=False)
    rows = grade(tmp_path, tmp_path / "out", progress=False,
                 limits=Limits(trust_learner_code=True))
    assert rows == [] and (tmp_path / "out" / "gradebook.csv").exists()


def test_the_instructors_seed_draws_other_cases_only_when_grading(monkeypatch):
    def drawn():
        return [c.rng.random() for c in _diagnose.Cases("t", 0, draws=3,
                                                        draw=lambda rng: {"x": rng.random()})]
    home = drawn()
    assert drawn() == home                          # the same cases every run at home
    monkeypatch.setattr(_diagnose, "GRADING_SEED", 918273645)
    graded = drawn()
    assert graded == drawn() and not set(graded) & set(home)
    monkeypatch.setattr(_diagnose, "GRADING_SEED", 7)
    assert drawn() != graded


def test_the_scan_flags_forgeries_and_no_solution():
    for stem in COURSE:
        assert flags(solved(stem)) == [], stem
    forged = '''import sys, gc
from ddl_lab.check import _record
import torch.distributed as dist
dist.all_reduce = print
f = sys._getframe(1).f_back
gc.get_referrers(_record)
open("/proc/1/environ").read()
import importlib
package = importlib.import_module("ddl_" + "lab.welcome")
answer = getattr(package, "sum_of" + "_ranks")'''
    said = " | ".join(what for _, what in cell_flags(forged, set()))
    for phrase in ("imports ddl_lab.check _record", "assigns dist.all_reduce",
                   "sys._getframe", "f_back", "gc referrers", "'/proc/1/environ'",
                   "looks a module up by a name built at run time",
                   "looks a name up by a name built at run time"):
        assert phrase in said, phrase
    assert cell_flags("import numpy as np\ntheta = np.zeros(3)\ntheta[0] = 1", set()) == []


@pytest.mark.slow
def test_a_judged_check_passes_a_right_answer_and_fails_a_wrong_one(solution, capsys):
    task, fn = tasks_of(GD)[0]
    judged(task, solution(GD, fn))
    assert f"✔ {task}: judged — passed" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="twice too large"):
        judged(task, lambda theta, X, y: 2 * X.T @ (X @ theta - y) / len(y))

    def stub(theta, X, y):
        raise NotImplementedError("replace this line with your code")
    with pytest.raises(AssertionError, match="not implemented yet"):
        judged(task, stub)


@pytest.mark.slow
def test_a_function_that_never_returns_ends_its_task_at_the_limit(tmp_path):
    """The learner's function loops forever in its kernel: the judge's call gives up at the
    per-cell limit, the task ends with a message naming it, and the judge is gone."""
    from ddl_lab.tools.grading.judge import Judge
    task, _ = tasks_of(GD)[0]
    link, key = str(tmp_path / "link.sock"), "k" * 32
    kernel = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from ddl_lab.tools.grading import handover
        def forever(theta, X, y):
            import time
            while True:                         # waits for a message that never comes
                time.sleep(1)
        handover.take({task!r}, forever)
        handover.save({str(tmp_path / 'manifest-0.json')!r})
        handover.serve({link!r}, {key!r}, accept=120)
    """)])
    try:
        for _ in range(1200):
            if os.path.exists(link + ".ready"):
                break
            time.sleep(0.1)
        judge = Judge(None, tmp_path / "judge.log")
        judge.start()
        answer = judge.judge_all([(tmp_path / "manifest-0.json", 0, task)], 2.0, link=link,
                                 key=key, work=tmp_path)[task]
        assert answer["outcome"] == "ended", answer
        assert "did not answer within 2 s" in answer["message"]
        process = judge.proc                    # the judge outlives the task, and stops
        judge.stop()
        assert process.poll() is not None
    finally:
        kernel.kill()
        kernel.wait()


def test_a_change_to_the_installation_stops_the_grading(tmp_path):
    """Files of the course changed while a submission ran (something escaped the sandbox,
    or ran without one): the grader stops, naming them."""
    from ddl_lab.tools.grading.grade import Installation, InstallationChanged
    for sub in ("exercises", "solutions"):
        (tmp_path / sub).mkdir()
    (tmp_path / "exercises" / "00_x.ipynb").write_text("{}")
    installed = Installation(tmp_path)
    installed.same_as_before("nobody.ipynb")                # nothing changed: goes on
    (tmp_path / "solutions" / "zz_forged.py").write_text("x = 1\n")
    with pytest.raises(InstallationChanged, match="while alice.ipynb was graded.*zz_forged.py"):
        installed.same_as_before("alice.ipynb")


def test_the_graders_processes_leave_out_the_iri_parser_and_still_validate_notebooks():
    """Each runner, judge and grading kernel imports nbformat: without jsonschema's optional
    IRI check (``tools.skip_iri_check``) that costs 0.1 s, not a second; validation stays."""
    probe = textwrap.dedent("""
        import sys
        import ddl_lab.tools.grading.handover
        import nbformat
        nbformat.validate(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]))
        print(sys.modules["rfc3987_syntax"], "jsonschema" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "True"]


OWN_RUN = '''
"""A check that runs its own code on workers in the judge, as a design check runs its
reference (memory_plan, fedavg_plan)."""
import torch
import torch.distributed as dist

import ddl_lab.check as check
from ddl_lab.check._core import fail, on_workers, passed, task


def _sum_of_ones():
    t = torch.ones(1)
    dist.all_reduce(t)                      # in the case's own group, made on the store
    return t.item()


@task("toy")
def own_run(n):
    """The check's own code on ``n`` workers."""
    got = on_workers(_sum_of_ones, n, fn=_sum_of_ones)
    if got != [float(n)] * n:
        fail(f"{n} workers summed {got}")
    passed("own_run", f"{n} workers")


check.own_run = own_run
check.__all__.append("own_run")
'''


def test_a_judge_runs_a_checks_own_code_on_workers_in_one_run_after_another(tmp_path,
                                                                         monkeypatch):
    """One judge serves a class run after run, and the grader removes each run's folder (its
    temporary folder) as the run ends: a check that runs its own code on the judge's warm
    workers passes in every run, not only in the first, whose folder held the workers' file
    store and their forkserver's socket (grading several notebooks failed memory_plan and
    fedavg_plan with DistStoreError)."""
    from ddl_lab.tools.grading.judge import Judge, tail
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "own_run_check.py").write_text(OWN_RUN)
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "checks"), *path]))
    judge = Judge(None, tmp_path / "judge.log", ("own_run_check",))
    judge.start()
    try:
        for learner in ("first", "second"):
            work = tmp_path / learner
            work.mkdir()
            manifest = work / "manifest-0.json"
            manifest.write_text(json.dumps([{"task": "own_run", "args": [{"plain": 2}]}]))
            answer = judge.judge_all([(manifest, 0, "own_run")], 60.0, key="k" * 32,
                                     link=str(work / "link.sock"), work=work)["own_run"]
            assert answer["outcome"] == "passed", (learner, answer, tail(judge.log, 3000))
            shutil.rmtree(work)                 # the run ended (grade.grade_one)
    finally:
        judge.stop()
