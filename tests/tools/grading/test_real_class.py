"""One real class through ``ddl-lab grade``: the course's own exercises 01 and 06 and their
checks, end to end (the grader's plumbing is tested on the toy course, test_tampering.py)."""
import nbformat

from ddl_lab.tools.grading import Limits, grade

from .sample_class import (GD, RING, RING_WITH_ALLREDUCE, UNSANDBOXED, replace_function, solved,
                           tasks_of)

REFERENCE = '''def {}(theta, X, y):
    from ddl_lab.check.gradient_descent import _reference_gradient
    return _reference_gradient(theta, X, y)'''
BY_NAME = '''def {}(theta, X, y):
    import importlib
    package = importlib.import_module("ddl_" + "lab.ml.models")
    return getattr(package, "linreg" + "_grad")(theta, X, y)'''
REAL = Limits(timeout=600, cell_timeout=120, jobs=2, trust_learner_code=UNSANDBOXED)    # real checks, on a busy machine too


def test_a_real_class_end_to_end(tmp_path):
    """The course's own exercises and checks through the whole grader, one submission of
    each, graded side by side (every solution is graded alone by test_solution_notebooks.py):
    a real check's verdict on a wrong answer (a ring made of dist.all_reduce) reaches the
    gradebook, the other answers earn every point, and the check's own reference is out of
    a learner's reach (the checks are not in the sandbox), and the package's own answer,
    looked up by a name built at run time, is refused."""
    subs = tmp_path / "submissions"
    subs.mkdir()
    ring = tasks_of(RING)
    bob = solved(RING)
    replace_function(bob, ring[1][1], RING_WITH_ALLREDUCE.format(ring[1][1]))
    nbformat.write(bob, subs / "bob.ipynb")
    gd = tasks_of(GD)
    rita = solved(GD)                       # the check's own reference, imported plainly
    replace_function(rita, gd[0][1], REFERENCE.format(gd[0][1]))
    nbformat.write(rita, subs / "rita.ipynb")
    sam = solved(GD)                        # the package's own answer, by a built-up name
    replace_function(sam, gd[0][1], BY_NAME.format(gd[0][1]))
    nbformat.write(sam, subs / "sam.ipynb")
    rows = {r.name: r for r in grade(subs, tmp_path / "out", ["01", "06"], REAL,
                                     progress=False)}
    bob = {v.task: v for v in rows["bob"].verdicts}
    assert list(bob) == [t for t, _ in ring]
    failed = [f"{t}: {v.message}" for t, v in bob.items() if not v.passed]
    assert len(failed) == 1 and failed[0].startswith(f"{ring[1][0]}: "), failed
    assert "dist.all_reduce" in bob[ring[1][0]].message
    rita = {v.task: v for v in rows["rita"].verdicts}
    assert list(rita) == [t for t, _ in gd]
    if UNSANDBOXED:                             # without a sandbox the checks are in reach
        return
    assert not rita[gd[0][0]].passed and "ModuleNotFoundError" in rita[gd[0][0]].message, \
        rita[gd[0][0]].message                  # the checks are not in the sandbox
    assert all(v.passed for t, v in rita.items() if t != gd[0][0]), rita
    assert not rows["rita"].notes
    sam = {v.task: v for v in rows["sam"].verdicts}
    assert not sam[gd[0][0]].passed and "package's own implementation" in \
        sam[gd[0][0]].message, sam[gd[0][0]].message    # wired while the task is judged
    assert "looks a module up by a name built at run time" in " ".join(rows["sam"].flags)
