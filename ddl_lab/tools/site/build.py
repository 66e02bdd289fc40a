"""``python -m ddl_lab site``: the course as a static website in ``build/site/``.

Sphinx with myst-nb renders the pages (``pages.py``) with sphinx-book-theme; all three
install from PyPI with their assets inside the wheels, so the build fetches nothing (see
CONTRIBUTING.md, "The website"). MathJax comes from the ``jupyter-server-mathjax`` wheel and
is served by the site itself, so a page with math loads nothing from the internet either.
Lessons are never executed here unless their executed copy is missing or stale.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ddl_lab.tools.site import pages
from ddl_lab.tools.site.panels import SiteError

ROOT = Path(__file__).resolve().parents[3]

CONF = '''\
project = "ddl_lab"
author = "the ddl_lab authors"
smartquotes = False
html_title = "ddl_lab — distributed deep learning, run for real"
extensions = ["myst_nb"]
nb_execution_mode = "off"
nb_output_stderr = "show"
myst_enable_extensions = ["dollarmath"]
html_theme = "sphinx_book_theme"
html_theme_options = {{"show_toc_level": 2, "home_page_in_toc": True,
                       "repository_url": {repo!r}, "use_repository_button": {use_repo!r},
                       "search_bar_text": "Search the course…",
                       "use_download_button": False}}
html_context = {{"default_mode": "light"}}
html_favicon = "_static/favicon.svg"
html_static_path = ["_static"]
html_show_sourcelink = False
html_copy_source = False
mathjax_path = "mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full"
mathjax2_config = {{"HTML-CSS": {{"availableFonts": ["STIX-Web"], "preferredFont": "STIX-Web",
                                "webFont": "STIX-Web", "imageFont": None}}}}  # the wheel's font
exclude_patterns = []
'''
FAVICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
           '<circle cx="8" cy="3" r="2.5" fill="#1f77b4"/><circle cx="3" cy="12" r="2.5" '
           'fill="#ff7f0e"/><circle cx="13" cy="12" r="2.5" fill="#2ca02c"/></svg>')


@dataclass(frozen=True)
class Launch:
    """Where the launch links point: a repository URL (Binder, nbgitpuller), its branch, and
    a JupyterHub's URL."""
    repository: str = ""
    ref: str = "main"
    hub: str = ""

    def links(self, path: str) -> str:
        return pages.launch_links(path, self.repository, self.ref, self.hub)


# The key of an executed copy's ``metadata.ddl_lab`` that says the tests ran its longest
# experiments smaller (tests/browser writes it, with the replacements made).
SMALLER = "smaller"


def stale_lessons(root: Path, executed: Path, smaller_ok: bool = False) -> list[str]:
    """The lessons whose executed copy under ``executed`` is missing or from another version.

    A copy the tests ran with smaller experiments (``metadata.ddl_lab``'s ``SMALLER``: the browser
    suite's, tests/browser) is stale too, so ``ddl-lab site`` runs the lesson whole; the
    tests' own website (``smaller_ok``) is built from it."""
    def current(name: str) -> bool:
        run = executed / f"{name}.ipynb"
        if not run.exists():
            return False
        nb = pages.read_nb(run)
        return pages.same_cells(nb, pages.read_nb(root / "lessons" / f"{name}.ipynb")) and \
            (smaller_ok or not nb.get("metadata", {}).get("ddl_lab", {}).get(SMALLER))
    return [name for name in pages.stems(root / "lessons") if not current(name)]


def _write_nb(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, ensure_ascii=False))


def _linked(text: str, lessons: list[pages.Lesson]) -> str:
    """``text`` with each lesson number ("04") linked to its page."""
    by_number = {le.name[:2]: le.name for le in lessons}
    return re.sub(r"\b(\d\d)\b", lambda m: f"[{m.group(1)}](lessons/{by_number[m.group(1)]})"
                  if m.group(1) in by_number else m.group(1), text)


def _landing(root: Path, lessons: list[pages.Lesson], readme: str) -> str:
    rows = []
    for le in lessons:
        time = f"~{le.minutes} min" + ("" if le.stated else " (estimated)")
        ex = (f"[exercise](exercises/{le.name}): ~{le.exercise_min} min" if le.has_exercise
              else "—")
        pre = _linked(le.prerequisites.replace("|", "/"), lessons)
        rows.append(f"| [{le.title}](lessons/{le.name}) | {time} | {ex} | {pre} |")
    toc = "\n".join(f"lessons/{le.name}" for le in lessons)
    extoc = "\n".join(f"exercises/{name}" for name in pages.stems(root / "exercises"))
    return f"""# ddl_lab — distributed deep learning, run for real

{pages.readme_section(readme, "What this is")}

**Who it is for.** Learners who know Python and a little PyTorch and want to see what
distributed training really does — and instructors who want a course whose every claim is
measured in front of the class. No cluster and no GPU are needed.

**What runs on a laptop.** Everything: every lesson starts real worker processes that talk
through `torch.distributed` (gloo on the CPU) and runs top to bottom on a 2-core laptop in a
few minutes. The same worker code runs under `torchrun` on a real cluster (lesson 11's two
hosts). The pages here show each lesson as it ran when this site was built; the widget panels
show their default run — launch a lesson to move their controls.

```bash
make lab     # sets up if needed (~1 min the first time), then opens the course in JupyterLab
make test    # runs the whole test suite
```

## The lessons

Each lesson's time and prerequisites are the ones its *At a glance* paragraph states (where
a lesson has none yet: {pages.WORDS_PER_MIN} words and {pages.MIN_PER_CODE_CELL} min per code
cell, and the earlier lessons it names); an exercise's time adds up its tasks' estimates.

| lesson | time | exercise | prerequisites |
| --- | --- | --- | --- |
{chr(10).join(rows)}

Also: [grading, for instructors](instructors) · [the worker runtime](runtime) ·
[bring your own code](byo).

```{{toctree}}
:hidden:
:caption: Lessons

{toc}
```

```{{toctree}}
:hidden:
:caption: Exercises

{extoc}
```

```{{toctree}}
:hidden:
:caption: Reference

instructors
runtime
byo
```
"""


def _instructors(readme: str, root: Path = ROOT) -> str:
    """The instructors' page: the README's grading section, learners' progress, what each
    check judges, and the rubric of every written justification (solutions/rubrics.toml)."""
    from ddl_lab.tools.grading.rubrics import load, markdown_all
    from ddl_lab.tools.progress import course_tasks
    rows = [f"| {lesson} | `check.{t}` | {pages.judges(t)} |"
            for lesson, tasks in course_tasks().items() for t in tasks]
    return ("# For instructors: grading a class\n\n"
            f"{pages.readme_section(readme, 'Grading a class')}"
            f"\n\n## Learners' progress\n\n{pages.readme_section(readme, 'Your progress')}"
            "\n\n## How each check judges\n\nEvery graded task, its check, and what the check "
            "judges (the first paragraph of its docstring):\n\n| lesson | check | judges |\n"
            "| --- | --- | --- |\n" + "\n".join(rows) + "\n"
            "\n## How the justifications are marked\n\nEvery written justification is marked "
            "by a person against its rubric (`solutions/rubrics.toml`): its points, what a "
            "full-mark answer says and two typical partial answers. `ddl-lab grade` lists the "
            "justifications still to mark and folds the marks in (`--marks`).\n\n"
            + markdown_all(load(root)))


def write_sources(root: Path, executed: Path, src: Path, launch: Launch) -> list[str]:
    """Write the Sphinx sources of the whole site into ``src``; return the lessons shown."""
    if src.exists():
        shutil.rmtree(src)
    readme = (root / "README.md").read_text()
    names = pages.stems(root / "lessons")
    if not names:
        raise SiteError(f"{root / 'lessons'}: no lesson to publish")
    for name in names:
        _write_nb(pages.lesson_page(root, executed, name, launch.links(f"lessons/{name}.ipynb")),
                  src / "lessons" / f"{name}.ipynb")
    for name in pages.stems(root / "exercises"):
        _write_nb(pages.exercise_page(root, name, launch.links(f"exercises/{name}.ipynb")),
                  src / "exercises" / f"{name}.ipynb")
    lessons = [pages.describe(root, n) for n in names]
    (src / "index.md").write_text(_landing(root, lessons, readme))
    (src / "instructors.md").write_text(_instructors(readme, root))
    (src / "runtime.md").write_text(
        "# The worker runtime\n\n" + pages.readme_section(readme, "The worker runtime in one cell")
        + "\n\n## Setting up\n\n" + pages.readme_section(readme, "Set-up details") + "\n")
    (src / "byo.md").write_text("# Bring your own code\n\n"
                                + pages.readme_section(readme, "Bring your own code") + "\n")
    import jupyter_server_mathjax
    shutil.copytree(Path(jupyter_server_mathjax.__file__).parent / "static",
                    src / "_static" / "mathjax")
    (src / "_static" / "favicon.svg").write_text(FAVICON)
    (src / "conf.py").write_text(CONF.format(repo=launch.repository or None,
                                             use_repo=bool(launch.repository)))
    return names


def build(root: Path = ROOT, executed: Path | None = None, out: Path | None = None,
          launch: Launch = Launch()) -> Path:
    """Build the site from the executed lessons; raise ``SiteError`` naming the file at
    fault (a lesson that failed or is stale, a missing figure, a Sphinx warning)."""
    executed = executed or root / "build" / "lessons"
    out = out or root / "build" / "site"
    src = out.parent / (out.name + "-src")
    write_sources(root, executed, src, launch)
    if out.exists():
        shutil.rmtree(out)
    r = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", "-W", "--keep-going",
                        "-E", "-d", str(out.parent / (out.name + "-doctrees")), str(src), str(out)],
                       capture_output=True, text=True)
    if r.returncode:
        raise SiteError(f"sphinx failed on {src}:\n{r.stderr.strip() or r.stdout.strip()}")
    return out
