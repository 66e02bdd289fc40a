"""The site's pages, written as Sphinx sources: one per lesson (its executed copy, made
static), one per exercise (no solution: the generated notebook, with what each check judges),
and the landing, instructors', runtime and bring-your-own-code pages (from the README).

Lessons and exercises are found in their folders (``NN_<slug>.ipynb``), never listed here.
"""
from __future__ import annotations

import copy
import itertools
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path

from ddl_lab.tools.site.panels import SiteError, without_widgets
from ddl_lab.tools.times import GLANCE_STATED   # the line `ddl-lab times --write` states

NOTEBOOK = re.compile(r"^\d\d_[a-z0-9_]+$")
TASK = re.compile(r"^## Task \d+ · .*~(\d+) min", re.M)
REFERS = re.compile(r"\b[Ll]essons? (\d\d)(?:\s*[–-]\s*(\d\d))?((?:(?:,| and) \d\d)*)")
REVEAL = re.compile(r"\b\w+\.reveal\(")
CHECK_CALL = re.compile(r"\bcheck\.(\w+)\(")
GLANCE_PRE = re.compile(r"\*Prerequisites:\*\s*(.+?)(?=\n\s*\n|\s\*\w|\n#|\Z)", re.S)
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)")
WORDS_PER_MIN, MIN_PER_CODE_CELL = 150, 0.5
_IDS = itertools.count()
SEALED = ("🔒 _Sealed on the website: in the live notebook this cell shows your prediction "
          "beside the measurement, and why. Predict first, then run it._")


@dataclass(frozen=True)
class Lesson:
    """One lesson as the landing page's map shows it: the time and prerequisites its "At a
    glance" cell states, else an estimate and the earlier lessons it names."""
    name: str                      # "06_ring_allreduce"
    title: str                     # "06 · Ring allreduce"
    minutes: int                   # the lesson itself
    stated: bool                   # minutes and prerequisites come from the lesson's own text
    exercise_min: int              # the sum of its exercise's tasks' "~N min"
    prerequisites: str             # "lessons 04 (send/recv) and 05 (...)", or "04, 05"
    has_exercise: bool


def stems(folder: Path) -> list[str]:
    """The ``NN_<slug>`` notebooks of ``folder``, in order."""
    return sorted(p.stem for p in folder.glob("*.ipynb") if NOTEBOOK.match(p.stem))


def _md_cell(text: str) -> dict:
    return {"cell_type": "markdown", "id": f"site-{next(_IDS)}", "metadata": {}, "source": text}


def _src(cell: dict) -> str:
    s = cell.get("source", "")
    return "".join(s) if isinstance(s, list) else s


def read_nb(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SiteError(f"{path}: not a readable notebook ({e})") from e


def same_cells(a: dict, b: dict) -> bool:
    """Do two notebooks hold the same cells (an executed copy and its lesson)?"""
    return [(c["cell_type"], _src(c)) for c in a["cells"]] == \
        [(c["cell_type"], _src(c)) for c in b["cells"]]


def launch_links(path: str, repository: str, ref: str, hub: str) -> str:
    """The launch box of a page: Binder / JupyterHub links built from the repository URL,
    and the two commands for a laptop."""
    live = []
    repo = repository.rstrip("/").removesuffix(".git")
    gh = re.match(r"https://github\.com/([^/]+/[^/]+)$", repo)
    if gh:
        live.append(f"[Binder](https://mybinder.org/v2/gh/{gh.group(1)}/{ref}?labpath={path}) "
                    "(repo2docker reads `environment.yml`)")
    if repo and hub:
        name = repo.rsplit("/", 1)[-1]
        live.append(f"[JupyterHub]({hub.rstrip('/')}/hub/user-redirect/git-pull?repo={repo}"
                    f"&branch={ref}&urlpath=lab/tree/{name}/{path})")
    online = " · ".join(live) if live else (
        "Binder and JupyterHub links appear once the site is built with the repository's URL "
        "(`make site REPO=https://github.com/<owner>/<repo>`).")
    return (f"```{{admonition}} Run it live\n:class: tip\n{online}\n\n"
            f"On a laptop, in a clone of the course: `make lab` opens it in JupyterLab "
            f"(`{path}`); `make test` runs everything the course checks.\n```")


def _prerequisites(text: str, number: str) -> tuple[str, ...]:
    found: set[int] = set()
    for a, b, rest in REFERS.findall(text):
        found.update(range(int(a), int(b or a) + 1))
        found.update(int(n) for n in re.findall(r"\d\d", rest))
    return tuple(f"{n:02d}" for n in sorted(found) if n < int(number))


def describe(root: Path, name: str) -> Lesson:
    """The map entry of lesson ``name``: its title, time and prerequisites."""
    nb = read_nb(root / "lessons" / f"{name}.ipynb")
    md = "\n".join(_src(c) for c in nb["cells"] if c["cell_type"] == "markdown")
    title = next((ln[2:].strip() for ln in md.splitlines() if ln.startswith("# ")), name)
    ex = root / "exercises" / f"{name}.ipynb"
    ex_md = "\n".join(_src(c) for c in read_nb(ex)["cells"]) if ex.exists() else ""
    exercise_min = sum(int(m) for m in TASK.findall(ex_md))
    time, pre = GLANCE_STATED.search(md), GLANCE_PRE.search(md)
    if time and pre:
        return Lesson(name, title, int(time.group(1)), True, exercise_min,
                      " ".join(pre.group(1).split()), ex.exists())
    code = sum(c["cell_type"] == "code" for c in nb["cells"])
    estimate = round(len(md.split()) / WORDS_PER_MIN + code * MIN_PER_CODE_CELL)
    return Lesson(name, title, estimate, False, exercise_min,
                  ", ".join(_prerequisites(md, name[:2])) or "none", ex.exists())


def _check_outputs(nb: dict, where: str) -> None:
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        if _src(cell).strip() and cell.get("execution_count") is None:
            raise SiteError(f"{where}, cell {i}: not executed (a notebook that stopped early?)")
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error" and "raises-exception" not in tags:
                raise SiteError(f"{where}, cell {i}: the lesson failed there: "
                                f"{o.get('ename')}: {o.get('evalue')}")


def _check_figures(nb: dict, folder: Path, where: str) -> None:
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "markdown":
            for ref in IMAGE.findall(_src(cell)):
                if not re.match(r"[a-z]+:", ref) and not (folder / ref).is_file():
                    raise SiteError(f"{where}, cell {i}: missing figure {ref}")
        for o in cell.get("outputs", []):
            if "image/png" in o.get("data", {}) and len(o["data"]["image/png"]) < 100:
                raise SiteError(f"{where}, cell {i}: an empty figure")


def lesson_page(root: Path, executed: Path, name: str, links: str) -> dict:
    """The executed lesson ``name`` as a page: checked (ran to the end, no error, no missing
    figure, executed from the lesson as it is now), widgets static, predictions sealed."""
    source = read_nb(root / "lessons" / f"{name}.ipynb")
    run_path = executed / f"{name}.ipynb"
    if not run_path.exists():
        raise SiteError(f"{run_path}: no executed copy of lessons/{name}.ipynb (`make lessons`, "
                        "or the test suite's lesson run, writes it)")
    nb = read_nb(run_path)
    if not same_cells(nb, source):
        raise SiteError(f"{run_path} was executed from another version of "
                        f"lessons/{name}.ipynb: execute it again (`make lessons`)")
    _check_outputs(nb, str(run_path))
    _check_figures(nb, root / "lessons", str(run_path))
    nb = without_widgets(nb, str(run_path))
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and REVEAL.search(_src(cell)):
            cells.append(_md_cell(SEALED))
        else:
            cells.append(cell)
    nb["cells"] = cells[:1] + [_md_cell(links)] + cells[1:]
    return nb


def judges(name: str) -> str:
    """What ``check.<name>`` judges: the first paragraph of its docstring."""
    import ddl_lab.check as check
    fn = getattr(check, name, None)
    if fn is None:
        raise SiteError(f"check.{name} does not exist")
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n")[0].replace("\n", " ")


def exercise_page(root: Path, name: str, links: str) -> dict:
    """The exercise ``name`` as learners get it (generated from its solution, stubs in place
    of answers), with what each check judges after its check cell."""
    nb = copy.deepcopy(read_nb(root / "exercises" / f"{name}.ipynb"))
    cells = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cells.append(cell)
        tags = cell.get("metadata", {}).get("tags", [])
        for task in CHECK_CALL.findall(_src(cell)) if "check" in tags else []:
            cells.append(_md_cell(f"**What `check.{task}` judges** — {judges(task)}"))
    nb["cells"] = cells[:1] + [_md_cell(links)] + cells[1:]
    return nb


def readme_section(readme: str, heading: str) -> str:
    """The README's ``## heading`` section, its sub-sections included."""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    if m is None:
        raise SiteError(f"README.md: no section '## {heading}' for the site")
    return m.group(1).strip()
