"""The course's notebooks: committed clean, exercises generated from solutions, complete."""
import ast
import json
import re
import subprocess
import sys

import nbformat
import pytest

from ddl_lab.tools import notebooks
from ddl_lab.tools.notebooks import ROOT, make_exercise, stub_source

ALL = sorted(p for d in ("lessons", "solutions", "exercises") for p in (ROOT / d).glob("*.ipynb"))


def test_there_are_notebooks():
    assert (ROOT / "lessons" / "00_welcome.ipynb") in ALL


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    dirty = [i for i, c in enumerate(nb["cells"])
             if c.get("outputs") or c.get("execution_count")]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; clear them before committing"


def test_exercises_match_their_solutions():
    stale = notebooks.make_exercises(check=True)
    assert not stale, f"exercises are stale, run `make exercises`: {stale}"


def test_every_solution_has_an_exercise_a_lesson_and_two_graded_checks():
    for sol, ex in notebooks.exercise_pairs():
        assert ex.exists(), f"missing {ex}"
        assert list((ROOT / "lessons").glob(sol.name[:3] + "*.ipynb")), f"no lesson for {sol}"
        nb = nbformat.read(sol, as_version=4)
        checks = [c for c in nb.cells if "check" in c.metadata.get("tags", [])
                  and re.search(r"\bcheck\.\w+\(", c.source)]
        assert len(checks) >= 2, f"{sol.name} has {len(checks)} graded checks, needs 2"
        assert "### BEGIN SOLUTION" in "".join(c.source for c in nb.cells)


@pytest.mark.parametrize("path", sorted((ROOT / "lessons").glob("*.ipynb")), ids=lambda p: p.name)
def test_every_lesson_has_a_widget_that_reruns_an_experiment(path):
    src = "".join(c.source for c in nbformat.read(path, as_version=4).cells)
    assert "experiment(" in src or "widgets." in src, f"{path.name} has no widget"


def test_stub_keeps_indentation_and_the_rest_of_the_cell():
    src = "def f(x):\n    y = 1\n    ### BEGIN SOLUTION\n    return x + y\n    ### END SOLUTION\n\nprint(2)"
    out = stub_source(src)
    assert "return x + y" not in out
    assert '    raise NotImplementedError("replace this line with your code")' in out
    assert out.startswith("def f(x):\n    y = 1\n") and out.endswith("\n\nprint(2)")
    compile(out, "<cell>", "exec")


@pytest.mark.parametrize("bad", ["### BEGIN SOLUTION\nx", "x\n### END SOLUTION",
                                 "### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION"])
def test_unbalanced_markers_are_errors(bad):
    with pytest.raises(ValueError, match="SOLUTION"):
        stub_source(bad)


def test_check_cells_are_tagged_to_raise_and_solution_only_cells_dropped():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
        nbformat.v4.new_code_cell("check.x(f)", metadata={"tags": ["check"]}),
        nbformat.v4.new_code_cell("print('answer')", metadata={"tags": ["solution-only"]}),
    ])
    ex = make_exercise(nb)
    assert len(ex.cells) == 2
    assert ex.cells[1].metadata["tags"] == ["check", "raises-exception"]
    assert "NotImplementedError" in ex.cells[0].source


def test_make_exercises_cli_reports_drift(tmp_path):
    (tmp_path / "solutions").mkdir()
    sol = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(sol, tmp_path / "solutions" / "99_t.ipynb")
    assert notebooks.make_exercises(tmp_path, check=True) == [tmp_path / "exercises" / "99_t.ipynb"]
    notebooks.make_exercises(tmp_path)
    assert notebooks.make_exercises(tmp_path, check=True) == []
    (tmp_path / "exercises" / "99_t.ipynb").write_text("{}")
    assert notebooks.make_exercises(tmp_path, check=True)


def test_cli_check_passes_on_the_committed_tree():
    out = subprocess.run([sys.executable, "-m", "ddl_lab", "make-exercises", "--check"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_execute_runs_one_notebook_and_writes_it(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nbformat.write(nb, tmp_path / "one.ipynb")
    out = subprocess.run([sys.executable, "-m", "ddl_lab", "execute", str(tmp_path / "one.ipynb"),
                          "--out", str(tmp_path / "built")], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    ran = nbformat.read(tmp_path / "built" / "one.ipynb", as_version=4)
    assert ran.cells[0].outputs[0]["text"] == "42\n"


@pytest.mark.parametrize("what", ["missing.ipynb", "empty_dir", "notes.txt"])
def test_execute_without_a_notebook_is_an_error(tmp_path, what):
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "notes.txt").write_text("no notebook")
    out = subprocess.run([sys.executable, "-m", "ddl_lab", "execute", str(tmp_path / what),
                          "--out", str(tmp_path / "built")], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0
    assert "pass a .ipynb file or a folder" in out.stderr
    assert not (tmp_path / "built").exists()


def test_hint_cells_are_collapsed_and_justifications_become_a_prompt():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("**Hint** — look at the ends.", metadata={"tags": ["hint"]}),
        nbformat.v4.new_markdown_cell(
            "Why this plan?\n<!-- BEGIN SOLUTION -->\nBecause it spends both budgets.\n"
            "<!-- END SOLUTION -->", metadata={"tags": ["justification"],
                                               "ddl_lab": {"task": "sgd_plan"}}),
    ])
    ex = make_exercise(nb)
    assert ex.cells[0].metadata["jupyter"]["source_hidden"] is True
    assert ex.cells[1].source == f"Why this plan?\n{notebooks.JUSTIFY}"
    assert ex.cells[1].metadata["ddl_lab"] == {"task": "sgd_plan"}
    with pytest.raises(ValueError, match="END SOLUTION"):
        notebooks.stub_justification("<!-- BEGIN SOLUTION -->\nx")


@pytest.mark.parametrize("path", sorted((ROOT / "solutions").glob("*.ipynb")), ids=lambda p: p.name)
def test_hints_stand_in_their_own_tagged_cells(path):
    nb = nbformat.read(path, as_version=4)
    for i, c in enumerate(nb.cells):
        tagged = "hint" in c.metadata.get("tags", [])
        starts = c.cell_type == "markdown" and c.source.lstrip().startswith("**Hint**")
        inline = c.cell_type == "markdown" and not tagged and re.search(r"\*\*?Hint", c.source)
        assert tagged == starts, f"{path.name} cell {i}: a hint cell is tagged `hint` and starts **Hint**"
        assert not inline, f"{path.name} cell {i}: a hint inside a prompt; give it its own `hint` cell"


def test_every_design_task_asks_for_a_written_justification():
    from ddl_lab.check._core import TASKS
    justified = {c.metadata.get("ddl_lab", {}).get("task")
                 for sol, _ in notebooks.exercise_pairs()
                 for c in nbformat.read(sol, as_version=4).cells
                 if "justification" in c.metadata.get("tags", [])}
    plans = {name for name in TASKS if name.endswith("_plan")}
    assert plans <= justified, f"design tasks without a justification cell: {plans - justified}"
    assert justified <= set(TASKS), f"justification cells naming no task: {justified - set(TASKS)}"



def _run_when_the_cell_runs(tree: ast.AST) -> list[ast.AST]:
    """The nodes a cell executes when it runs (not the bodies of functions it defines)."""
    found, todo = [], [tree]
    while todo:
        for child in ast.iter_child_nodes(todo.pop()):
            if isinstance(child, ast.Lambda):
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                todo += child.decorator_list + child.args.defaults + child.args.kw_defaults
                continue
            found.append(child)
            todo.append(child)
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "exercises").glob("*.ipynb")), ids=lambda p: p.name)
def test_run_all_on_an_exercise_stops_only_at_cells_tagged_to_raise(path):
    """The suite runs an exercise solved (tests/tools/test_solution_notebooks.py), never
    fresh: what would make Run All on the fresh exercise fail outside a check or "try it"
    cell is found here instead — a stub that raises as its cell runs, or an untagged cell
    that uses what a stub cell defines."""
    stubbed: set[str] = set()
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        tree = ast.parse(cell.source)
        runs = [n for n in _run_when_the_cell_runs(tree) if not isinstance(n, ast.Lambda)]
        if "raises-exception" not in cell.metadata.get("tags", []):
            used = {n.id for n in runs if isinstance(n, ast.Name)
                    and isinstance(n.ctx, ast.Load)} & stubbed
            assert not used, (f"{path.name} cell {i} uses {sorted(used)}, which the learner "
                              "writes: tag the cell `check` in the solution")
            assert not [n for n in runs if isinstance(n, ast.Raise)
                        and "NotImplementedError" in ast.unparse(n)], \
                f"{path.name} cell {i}: a stub outside a function raises as the cell runs"
        if "NotImplementedError(" in cell.source:
            stubbed |= {n.name for n in ast.walk(tree)
                        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            stubbed |= {n.id for n in runs if isinstance(n, ast.Name)
                        and isinstance(n.ctx, ast.Store)}
