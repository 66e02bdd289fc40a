"""The notebook that is actually run to grade a submission: the learner's code cells with
the course's own (pristine) check cells put back in their places (``ddl-lab grade``).

Whatever the learner did to a check cell — deleted it, edited it, commented it out,
untagged it, replaced it by ``print("✔ passed")`` — the graded run holds the check cell of
exercises/ instead. Each pristine check cell goes where the submission's cell of the same
id sits; if that cell is gone, just before the first cell that comes after it in the
exercise; else at the end. Markdown and the learner's copies of check cells are left out.

In the learner's kernel a pristine check cell does not check: each ``check.<task>(…)``
call in it becomes ``handover.take("<task>", …)`` and the cell ends by writing the
manifest of what was taken to ``manifest-<k>.json`` for the judge (``handover.py``,
``judge.py``), where the verdict is reached. Everything else in the cell runs as written.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

from .discover import Exercise

ROLE = "ddl_lab_grade"          # cell metadata key: {"check": k} marks pristine check k
HANDOVER = "__ddl_lab_handover"
PREAMBLE = (f"from ddl_lab import check  # ddl-lab grade: the course's own checks, judged "
            f"elsewhere\nfrom ddl_lab.tools.grading import handover as {HANDOVER}\n")
MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)


def payload_name(k: int) -> str:
    return f"manifest-{k}.json"


class _Take(ast.NodeTransformer):
    """``check.<task>(args…)`` -> ``<module>.<function>("<task>", args…)``."""

    def __init__(self, module: str, function: str):
        self.module, self.function = module, function

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                and f.value.id == "check":
            take = ast.Attribute(ast.Name(self.module, ast.Load()), self.function, ast.Load())
            return ast.Call(take, [ast.Constant(f.attr), *node.args], node.keywords)
        return node


def retarget(source: str, module: str, function: str) -> str:
    """``source`` with every ``check.<task>(…)`` made ``module.function("<task>", …)``."""
    return ast.unparse(ast.fix_missing_locations(_Take(module, function).visit(
        ast.parse(source))))


def handover_source(source: str, k: int) -> str:
    """The kernel's version of pristine check cell ``k``: it takes the checks' arguments
    and saves them for the judge."""
    return f"{PREAMBLE}{retarget(source, HANDOVER, 'take')}\n" \
           f"{HANDOVER}.save({payload_name(k)!r})\n"


def pristine_cell(ex: Exercise, k: int) -> nbformat.NotebookNode:
    check = ex.checks[k]
    return nbformat.v4.new_code_cell(handover_source(check.source, k),
                                     metadata={ROLE: {"check": k, "tasks": check.tasks,
                                                           "line": first_line(check.source)}})


def first_line(source: str) -> str:
    return next((ln for ln in source.splitlines() if ln.strip()), "")[:120]


def check_index(cell: nbformat.NotebookNode) -> int | None:
    """k for the pristine check cell k of a grading notebook, None for a learner's cell."""
    role = cell.get("metadata", {}).get(ROLE)
    return role.get("check") if isinstance(role, dict) else None


def cell_line(cell: nbformat.NotebookNode) -> str:
    """The first line of a cell as the learner sees it (a check cell's, not its handover)."""
    role = cell.get("metadata", {}).get(ROLE)
    return role["line"] if isinstance(role, dict) else first_line(cell.source)


def grading_notebook(sub: nbformat.NotebookNode, ex: Exercise) -> nbformat.NotebookNode:
    """The learner's code cells of ``sub`` in order, with ``ex``'s graded check cells."""
    slot = {c.cell_id: c.index for c in ex.checks}
    check_ids = {c.get("id") for c in ex.nb.cells if "check" in c.metadata.get("tags", [])}
    cells: list[tuple[int | None, nbformat.NotebookNode]] = []    # (exercise position, cell)
    placed: set[int] = set()
    for cell in sub.cells:
        cid = cell.get("id")
        if cid in slot and slot[cid] not in placed:
            placed.add(slot[cid])
            cells.append((ex.positions[cid], pristine_cell(ex, slot[cid])))
        elif cell.cell_type == "code" and cid not in check_ids \
                and "check" not in cell.get("metadata", {}).get("tags", []):
            learner = nbformat.v4.new_code_cell(cell.source)
            learner.id = cid or learner.id
            cells.append((ex.positions.get(cid), learner))
    for check in ex.checks:
        if check.index in placed:
            continue
        where = ex.positions[check.cell_id]
        at = next((i for i, (pos, _) in enumerate(cells) if pos is not None and pos > where),
                  len(cells))
        cells.insert(at, (where, pristine_cell(ex, check.index)))
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": ex.nb.metadata.get("kernelspec", {})})
    nb.cells = [c for _, c in cells]
    return nb


def solved(course: Path, stem: str) -> nbformat.NotebookNode:
    """exercises/<stem> as a learner who wrote the solution hands it in: every stub cell
    holds the solution's code (without the markers). For tests and benchmarks."""
    nb = nbformat.read(Path(course) / "exercises" / f"{stem}.ipynb", as_version=4)
    answers = {c.get("id"): c.source for c in
               nbformat.read(Path(course) / "solutions" / f"{stem}.ipynb", as_version=4).cells}
    for cell in nb.cells:
        if cell.cell_type == "code" and "NotImplementedError" in cell.source \
                and cell.get("id") in answers:
            cell.source = MARKER.sub("", answers[cell.get("id")])
    return nb
