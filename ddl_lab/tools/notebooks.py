"""Course notebooks: exercises generated from solutions, and headless execution.

``solutions/NN_topic.ipynb`` is the single source of each graded exercise. In its
code cells, the lines from ``### BEGIN SOLUTION`` to ``### END SOLUTION`` become a
stub that raises ``NotImplementedError`` (nbgrader's convention). Cells tagged
``check`` (they call the learner's code) are tagged ``raises-exception`` in the
exercise, so nbval accepts the failure a stub produces; cells tagged
``solution-only`` are left out of the exercise. A markdown cell tagged ``hint`` is collapsed
in the exercise (JupyterLab's ``source_hidden``: a learner opens it on purpose); in a markdown
cell tagged ``justification`` (a design task's written reasoning, collected by the grader) the
lines from ``<!-- BEGIN SOLUTION -->`` to ``<!-- END SOLUTION -->`` become a prompt line.
"""
from __future__ import annotations

import copy
import hashlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Callable

import nbformat

ROOT = Path(__file__).resolve().parents[2]
BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
STUB = '{indent}# YOUR CODE HERE\n{indent}raise NotImplementedError("replace this line with your code")'
MD_BEGIN = re.compile(r"^\s*<!-- BEGIN SOLUTION -->\s*$")
MD_END = re.compile(r"^\s*<!-- END SOLUTION -->\s*$")
JUSTIFY = "_Your justification here (3–5 sentences)._"


def stub_source(source: str) -> str:
    """Replace every solution region of one code cell's source by a stub."""
    return _replace_regions(source, BEGIN, END, "### BEGIN SOLUTION", "### END SOLUTION",
                            lambda m: STUB.format(indent=m.group(1)))


def stub_justification(source: str) -> str:
    """Replace every solution region of a justification cell by the learner's prompt line."""
    return _replace_regions(source, MD_BEGIN, MD_END, "<!-- BEGIN SOLUTION -->",
                            "<!-- END SOLUTION -->", lambda m: JUSTIFY)


def _replace_regions(source: str, begin: re.Pattern, end: re.Pattern, b: str, e: str,
                     stub: Callable[[re.Match], str]) -> str:
    out, inside = [], False
    for line in source.split("\n"):
        m = begin.match(line)
        if m:
            if inside:
                raise ValueError(f"nested {b}")
            inside = True
            out.append(stub(m))
        elif end.match(line):
            if not inside:
                raise ValueError(f"{e} without {b}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{b} without {e}")
    return "\n".join(out)


def exercise_version(nb: nbformat.NotebookNode) -> str:
    """A short hash of what grading depends on: the code cells' sources and tags."""
    code = [[c.source, c.get("metadata", {}).get("tags", [])] for c in nb.cells
            if c.cell_type == "code"]
    return hashlib.sha256(json.dumps(code).encode()).hexdigest()[:12]


def make_exercise(solution: nbformat.NotebookNode, name: str = "") -> nbformat.NotebookNode:
    """The exercise twin of a solution notebook, without outputs; its metadata ``ddl_lab``
    names the exercise (``name``, e.g. "06_ring_allreduce") and its version, for grading."""
    nb = copy.deepcopy(solution)
    cells = []
    for cell in nb.cells:
        tags = list(cell.get("metadata", {}).get("tags", []))
        if "solution-only" in tags:
            continue
        if cell.cell_type == "code":
            cell.source = stub_source(cell.source)
            cell.outputs, cell.execution_count = [], None
            if "check" in tags and "raises-exception" not in tags:
                tags.append("raises-exception")
        elif "justification" in tags:
            cell.source = stub_justification(cell.source)
        if "hint" in tags:
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
        if tags:
            cell.metadata["tags"] = tags
        cells.append(cell)
    nb.cells = cells
    nb.metadata["ddl_lab"] = {"exercise": name, "version": exercise_version(nb)}
    return nb


def exercise_pairs(root: Path = ROOT) -> list[tuple[Path, Path]]:
    return [(s, root / "exercises" / s.name)
            for s in sorted((root / "solutions").glob("*.ipynb"))]


def render(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def make_exercises(root: Path = ROOT, check: bool = False) -> list[Path]:
    """Write exercises/ from solutions/; with ``check``, only list the stale ones."""
    stale = []
    for sol, ex in exercise_pairs(root):
        text = render(make_exercise(nbformat.read(sol, as_version=4), sol.stem))
        if not ex.exists() or ex.read_text() != text:
            stale.append(ex)
            if not check:
                ex.parent.mkdir(exist_ok=True)
                ex.write_text(text)
    return stale


def _quiet_output_widgets() -> None:
    """nbclient (0.11) echoes every Output-widget update back to the kernel on the shell
    channel while it awaits the cell's reply on that same socket; with pyzmq 27 that echo
    can swallow the reply, and a widget cell then stalls until its timeout. A headless run
    needs no echo (the outputs are still recorded), so it is switched off here."""
    from nbclient.output_widget import OutputWidget
    OutputWidget._publish_msg = lambda self, *args, **kwargs: None


def notebooks_at(path: Path) -> list[Path]:
    """The notebooks ``path`` names: itself, or every ``*.ipynb`` of a folder, sorted.

    Raises ``FileNotFoundError`` with what to pass instead when there are none."""
    path = Path(path)
    if path.is_file() and path.suffix == ".ipynb":
        return [path]
    found = sorted(path.glob("*.ipynb")) if path.is_dir() else []
    if not found:
        what = "does not exist" if not path.exists() else "holds no notebook"
        raise FileNotFoundError(f"{path} {what}: pass a .ipynb file or a folder of them "
                                "(e.g. lessons)")
    return found


def execute(path: Path, out: Path, timeout: int = 600) -> int:
    """Run the notebook ``path`` (or every notebook of a folder) top to bottom; write the
    executed copies to ``out``; return how many failed."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    paths = notebooks_at(path)
    _quiet_output_widgets()
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(path.parent)}}).execute()
            status = "ok"
        except CellExecutionError as e:
            failed += 1
            status = f"FAILED\n{e}"
        nbformat.write(nb, out / path.name)
        print(f"{path.name}: {status} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"executed notebooks are in {out}", file=sys.stderr)
    return failed
