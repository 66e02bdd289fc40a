"""nbgrader, for real: ``ddl-lab nbgrader-export`` gives a course folder from which
``nbgrader generate_assignment`` makes the notebooks of exercises/, and ``nbgrader autograde``
scores submissions as ``ddl-lab grade`` does, leaving each justification to be marked by
hand (worth its rubric's points); the manual scores a grader gives in nbgrader's gradebook
fold into ``ddl-lab grade``'s totals (``--marks gradebook.db``).

nbgrader (the ``instructor`` extra of pyproject.toml) is installed on first use into
build/nbgrader-env, a virtual environment beside the course's that sees the course's
packages through a .pth file: the learner's environment stays without nbgrader and its
JupyterLab extension. The test is skipped, saying why, only where that install fails.
"""
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import nbformat
import pytest

from ddl_lab.__main__ import main
from ddl_lab.tools.grading import Limits, grade, rubrics
from ddl_lab.tools.grading.discover import course_exercises
from ddl_lab.tools.grading.marks import attach, fold, read_marks
from ddl_lab.tools.grading.record import Learner, Verdict
from ddl_lab.tools.notebooks import exercise_pairs, make_exercise

from .sample_class import (GD, ROOT, defining_cell, exercise, replace_function, solved,
                           tasks_of, written)

pytestmark = pytest.mark.slow
ENV = ROOT / "build" / "nbgrader-env"
SCORES = """
import json, sys
from nbgrader.api import Gradebook
with Gradebook("sqlite:///gradebook.db") as gb:
    out = {s: {g.name: [g.score, g.max_score, g.needs_manual_grade] for g in
               gb.find_submission_notebook(sys.argv[1], sys.argv[1], s).grades}
           for s in sys.argv[2:]}
print(json.dumps(out))
"""


def nbgrader_env() -> Path:
    """build/nbgrader-env/bin with nbgrader in it, installed on first use."""
    bin_ = ENV / "bin"
    if (bin_ / "nbgrader").exists():
        return bin_
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = spec["project"]["optional-dependencies"]["instructor"]
    shutil.rmtree(ENV, ignore_errors=True)
    steps = [[sys._base_executable, "-m", "venv", str(ENV)]]
    made = subprocess.run(steps[0], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"no virtual environment for nbgrader ({made.stderr.strip()[-300:]})")
    site = subprocess.run([str(bin_ / "python"), "-c", "import sysconfig; print("
                           "sysconfig.get_paths()['purelib'])"], capture_output=True, text=True)
    Path(site.stdout.strip(), "ddl_lab_course.pth").write_text(
        f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
    uv = Path(sys.executable).with_name("uv")          # `make setup` installs it: faster
    # compiled at install, as pip does and `make setup` asks of uv: where
    # PYTHONDONTWRITEBYTECODE is set, each of nbgrader's processes (the command, its
    # kernels, alembic) would otherwise compile all it imports, 2-3 CPU-s each
    installer = [str(uv), "pip", "install", "--compile-bytecode", "--python",
                 str(bin_ / "python")] \
        if uv.exists() else [str(bin_ / "python"), "-m", "pip", "install"]
    pip = subprocess.run([*installer, "-q", *wanted], capture_output=True, text=True,
                         timeout=600)
    if pip.returncode or not (bin_ / "nbgrader").exists():
        shutil.rmtree(ENV, ignore_errors=True)
        pytest.skip(f"nbgrader could not be installed with pip ({pip.stderr.strip()[-300:]}); "
                    "`pip install -e '.[instructor]'` needs PyPI")
    return bin_


def nbgrader(bin_: Path, course: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run([str(bin_ / "nbgrader"), *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=300)


REASONS = "b from the two budgets, γ from the flattest curvature and the steps."
ADAGRAD_FORGETS_HISTORY = '''def {}(theta, g, G, lr, eps):
    G = g * g                       # forgot to accumulate: G + g²
    return theta - lr * g / (np.sqrt(G) + eps), G'''


def three_learners() -> dict[str, tuple[nbformat.NotebookNode, dict[str, int]]]:
    """Exercise 01 as three learners hand it in, and the points each must get: all right,
    the plan justified; a renamed function and a wrong Adagrad; the untouched stubs."""
    gd = tasks_of(GD)
    bob = solved(GD)
    first = gd[0][1]
    defining_cell(bob, first).source = defining_cell(bob, first).source.replace(
        f"def {first}(", "def renamed_by_bob(")
    replace_function(bob, gd[2][1], ADAGRAD_FORGETS_HISTORY.format(gd[2][1]))
    alice = written(solved(GD), next(t for s, t in rubrics.load(ROOT) if s == GD), REASONS)
    return {"alice": (alice, {t: 1 for t, _ in gd}),
            "bob": (bob, {**{t: 1 for t, _ in gd}, gd[0][0]: 0, gd[2][0]: 0}),
            "carol": (exercise(GD), {t: 0 for t, _ in gd})}


def same_cells(a: nbformat.NotebookNode, b: nbformat.NotebookNode) -> list[str]:
    """How two notebooks differ in what a learner sees: cells, sources, tags, metadata."""
    diff = [] if len(a.cells) == len(b.cells) else [f"{len(a.cells)} vs {len(b.cells)} cells"]
    for i, (x, y) in enumerate(zip(a.cells, b.cells)):
        if (x.cell_type, x.source, x.metadata.get("tags")) != \
                (y.cell_type, y.source, y.metadata.get("tags")):
            diff.append(f"cell {i}: {x.source[:60]!r} vs {y.source[:60]!r}")
    if a.metadata.get("ddl_lab") != b.metadata.get("ddl_lab"):
        diff.append("notebook metadata ddl_lab differs")
    return diff


def test_nbgrader_makes_the_exercises_and_scores_as_ddl_lab_grade(tmp_path):
    bin_ = nbgrader_env()
    course = tmp_path / "course"
    assert main(["nbgrader-export", str(course)]) == 0
    made = nbgrader(bin_, course, "generate_assignment", "*", "--force")
    assert made.returncode == 0, made.stderr[-2000:]
    for sol, ex in exercise_pairs():        # exercises/ as `make exercises` writes them
        released = nbformat.read(course / "release" / ex.stem / ex.name, as_version=4)
        exercise = make_exercise(nbformat.read(sol, as_version=4), sol.stem)
        assert not same_cells(released, exercise), ex.name

    # three learners, handed in through nbgrader's released notebook
    learners = three_learners()
    release = nbformat.read(course / "release" / GD / f"{GD}.ipynb", as_version=4)
    for name, (handed_in, _) in learners.items():
        theirs = {c.id: c.source for c in handed_in.cells}
        nb = nbformat.from_dict(json.loads(json.dumps(release)))
        for cell in nb.cells:
            cell.source = theirs.get(cell.id, cell.source)
        for where in (course / "submitted" / name / GD / f"{GD}.ipynb",
                      tmp_path / "handed_in" / f"{name}.ipynb"):
            where.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, where)
    graded = nbgrader(bin_, course, "autograde", GD, "--create", "--force")
    assert graded.returncode == 0, graded.stderr[-2000:]
    scores = subprocess.run([str(bin_ / "python"), "-c", SCORES, GD, *learners], cwd=course,
                            capture_output=True, text=True, check=True)
    by_nbgrader = json.loads(scores.stdout.strip().splitlines()[-1])

    rows = grade(tmp_path / "handed_in", tmp_path / "out", [GD], Limits(300, 120, 2),
                 progress=False)
    by_hand = {f"justify-{t}": p.points for (s, t), p in rubrics.load(ROOT).items() if s == GD}
    assert by_hand
    for row in rows:
        ours = {v.task: v.points for v in row.verdicts}
        theirs = {task: score for task, (score, _, _) in by_nbgrader[row.name].items()
                  if task not in by_hand}
        expected = learners[row.name][1]
        assert ours == theirs == expected and len(ours) == len(tasks_of(GD)), row.name
        # a justification written waits for a grader, worth its rubric's points in both; one
        # left as released is marked 0 at once, by both
        assert {t: (most, manual) for t, (_, most, manual) in by_nbgrader[row.name].items()
                if t in by_hand} == {t: (p, row.name == "alice") for t, p in by_hand.items()}
        assert {f"justify-{v.task}": (v.mark_max, v.mark) for v in row.verdicts if v.mark_max} \
            == {t: (p, None if row.name == "alice" else 0) for t, p in by_hand.items()}


MARK = """
import sys
from nbgrader.api import Gradebook
assignment, task = sys.argv[1:3]
with Gradebook("sqlite:///gradebook.db") as gb:
    for student in ("alice", "bob"):
        gb.add_student(student)
        gb.add_submission(assignment, student)
    grade = gb.find_grade(f"justify-{task}", assignment, assignment, "alice")
    grade.manual_score = 2.5
    gb.find_comment(f"justify-{task}", assignment, assignment, "alice").manual_comment = "γ?"
    gb.db.commit()
"""


def test_a_graders_scores_in_nbgraders_gradebook_fold_into_the_totals(tmp_path):
    """Marked in nbgrader (its own API writes the gradebook, as formgrader does): alice's
    justification is marked, bob's not yet; ``--marks gradebook.db`` reads exactly that."""
    bin_ = nbgrader_env()
    course = tmp_path / "course"
    assert main(["nbgrader-export", str(course), "--exercise", GD]) == 0
    made = nbgrader(bin_, course, "generate_assignment", GD, "--force")
    assert made.returncode == 0, made.stderr[-2000:]
    task = next(t for s, t in rubrics.load(ROOT) if s == GD)
    marked = subprocess.run([str(bin_ / "python"), "-c", MARK, GD, task], cwd=course,
                            capture_output=True, text=True)
    assert marked.returncode == 0, marked.stderr[-2000:]
    marks = read_marks(course / "gradebook.db")
    assert [(m.learner, m.exercise, m.task, m.points, m.comment) for m in marks] == \
        [("alice", GD, task, 2.5, "γ?")]
    ex = course_exercises(ROOT)[GD]
    rows = [Learner(name, [Verdict(GD, t, 1.0, 1.0, True, "", "text" if t == task else None)
                           for t in ex.tasks]) for name in ("alice", "bob")]
    found = rubrics.load(ROOT)
    attach(rows, found)
    fold(rows, found, marks)
    assert [(r.auto, r.manual) for r in rows] == [(len(ex.tasks), 2.5), (len(ex.tasks), 0)]
