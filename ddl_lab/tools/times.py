"""Every lesson's and exercise's stated time, from a timed run-through (issue 35, item 8).

``python -m ddl_lab times`` prints the table; ``--measure`` first executes the lessons and the
solutions headlessly and records their cells' wall times in ``lessons/timings.json``; ``--write``
puts the figures into the notebooks (a lesson's At-a-glance line, each task heading's "~N min").
``tests/tools/test_times.py`` recomputes them from the notebooks and that file and fails on drift.

How a time is made (the same rule for every notebook; nothing is a guess per lesson). The
machine's part is measured; the learner's part — reading, trying, writing, thinking — is no
stopwatch on a person but these stated rates applied to what each notebook asks of them:

- **Reading** — every word of the markdown and of the code a learner reads, at ``READ_WPM`` =
  200 words a minute (a careful reading pace for technical prose; the code counted as words too).
- **Running** — the measured wall time of every code cell, from a real headless execution of
  the notebook on this machine (nbclient's ``metadata.execution`` timestamps: from the cell's
  ``execute_input`` to its ``execute_reply``), valid while the notebook's code is the code that
  ran (a hash of it is kept). The timings file says the machine (cores, load average before and
  after) and the date; the figures are this machine's, a faster one runs less.
- **Trying** — ``TRY_MIN`` = 3 minutes for each code cell that builds a control a learner moves
  (a slider, a dropdown, toggle buttons, a button, ``experiment(...)``): one or two settings tried
  and the change read off the plot; ``ASK_MIN`` = 2 minutes for each prediction (``predict(...)``:
  read, think, choose, then read the reveal) and for each question of the lesson's quiz
  (``load_quiz(slug)``; its text lives in ``ddl_lab/<slug>/quiz.py``, not in the notebook).
- **A task** (``## Task K · …``), solved from its prompt alone:
  reading its prompt, hints included, and every lesson section its prompt points to ("§K",
  "lesson NN §K") at 200 words a minute; writing the solution's code — its lines between
  ``### BEGIN SOLUTION`` and ``### END SOLUTION``, blank and comment lines left out — at
  ``LINES_PER_MIN`` = 1 line a minute (typing, running, reading the verdict, fixing: a learner's
  pace on new code, not a typist's); writing a justification's words at ``WRITE_WPM`` = 20
  words a minute (a written task's model answer, a solution-only markdown cell, counts the
  same); running its cells twice (a first failing try and the passing one); and a
  thinking allowance by difficulty, ``THINK_MIN`` ★ 5, ★★ 10, ★★★ 20 minutes — the time to
  find the idea before any line is written: ★ tasks are one step from the lesson, ★★ put two
  of its ideas together, ★★★ are design tasks that need a cost model derived or measured first.
  A task's figure is rounded to 5 minutes; the exercise's is the sum of its tasks.
- **The lesson's figure** is reading + running + trying, rounded to 5 minutes.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
TIMINGS = ROOT / "lessons" / "timings.json"
READ_WPM, WRITE_WPM, LINES_PER_MIN, TRY_MIN, ASK_MIN = 200, 20, 1.0, 3, 2
THINK_MIN = {1: 5, 2: 10, 3: 20}
PREDICT = re.compile(r"\bpredict\(")
QUIZ = re.compile(r"\bload_quiz\(\s*[\"'](\w+)[\"']")
CONTROL = re.compile(r"\bwidgets\.(?:\w*Slider|Dropdown|ToggleButtons|Checkbox|Button|RadioButtons)"
                     r"\(|\bexperiment\(")
TASK_HEAD = re.compile(r"^## Task (\d+) · .*?difficulty (★+)☆*.*?~(\d+) min", re.M)
SECTION = re.compile(r"^## (\d+) · ", re.M)
POINTS = re.compile(r"(?:[Ll]esson (\d\d)(?:'s|,)? )?§(\d+)")
GLANCE = re.compile(r"\*Estimated time:\*.*?(?=\n\s*\n|\Z)", re.S)     # within one cell
GLANCE_STATED = re.compile(r"\*Estimated time:\*\s*about (\d+) min")


def _src(cell) -> str:
    s = cell["source"]
    return s if isinstance(s, str) else "".join(s)


def words(text: str) -> int:
    return len(text.split())


def round5(minutes: float) -> int:
    """Minutes rounded to 5 (never below 5)."""
    return max(5, int(5 * math.floor(minutes / 5 + 0.5)))


# -- measuring ------------------------------------------------------------------------------

def cell_seconds(nb: nbformat.NotebookNode) -> list[float]:
    """The wall time of each code cell of an executed notebook, in order (0 for a cell that
    did not run)."""
    out = []
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        ex = c.get("metadata", {}).get("execution", {})
        a, b = ex.get("iopub.execute_input"), ex.get("shell.execute_reply")
        out.append(round((_t(b) - _t(a)), 2) if a and b else 0.0)
    return out


def code_hash(nb) -> str:
    """A short hash of a notebook's code cells: the code its measured times belong to."""
    code = [_src(c) for c in nb["cells"] if c["cell_type"] == "code"]
    return hashlib.sha256(json.dumps(code).encode()).hexdigest()[:12]


def _t(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def machine() -> dict:
    return {"cores": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "platform": platform.platform(), "python": platform.python_version()}


def measure(paths: list[Path], timings: Path = TIMINGS, timeout: int = 900) -> dict:
    """Execute each notebook (a lesson or a solution) headlessly and record its cells' wall
    times in ``timings`` (other notebooks' entries are kept)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    from ddl_lab.tools.notebooks import _quiet_output_widgets
    _quiet_output_widgets()
    data = json.loads(timings.read_text()) if timings.exists() else {"notebooks": {}}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        before = machine()
        failed = ""
        try:
            NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=True,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        except CellExecutionError as e:
            failed = str(e).strip().splitlines()[-1][:200]
            print(f"{path.name}: FAILED {failed}", flush=True)
        secs = cell_seconds(nb)
        key = f"{path.parent.name}/{path.name}"
        data["notebooks"][key] = {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": before, "load_average_after": machine()["load_average"],
            "seconds": round(sum(secs), 1), "cells": secs, "code": code_hash(nb)}
        if failed:
            data["notebooks"][key]["failed"] = failed
        print(f"{key}: {sum(secs):.0f} s over {len(secs)} code cells "
              f"(load {before['load_average'][0]})", flush=True)
        timings.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return data


# -- estimating -----------------------------------------------------------------------------

class StaleTimings(Exception):
    """The timings file lacks a notebook, or its cells no longer match the notebook's."""


@dataclass(frozen=True)
class Task:
    number: int
    stars: int
    stated: int                 # the "~N min" its heading states now
    read_words: int             # its prompt, hints included, and the lesson sections it points to
    lines: int                  # solution lines to write (no blank or comment line)
    justify_words: int          # a justification's words, if it asks for one
    run_s: float                # its cells' measured wall time, one run

    @property
    def exact(self) -> float:
        return (self.read_words / READ_WPM + self.lines / LINES_PER_MIN
                + self.justify_words / WRITE_WPM + 2 * self.run_s / 60 + THINK_MIN[self.stars])

    @property
    def minutes(self) -> int:
        return round5(self.exact)


@dataclass(frozen=True)
class Lesson:
    name: str
    read_words: int
    run_s: float
    controls: int
    asks: int                   # predictions and quiz questions
    stated: int | None          # the "*Estimated time:* about N min" its At-a-glance cell states
    tasks: tuple[Task, ...]

    @property
    def parts(self) -> tuple[float, float, float]:
        """Reading, running and trying minutes."""
        return (self.read_words / READ_WPM, self.run_s / 60,
                self.controls * TRY_MIN + self.asks * ASK_MIN)

    @property
    def minutes(self) -> int:
        return round5(sum(self.parts))

    @property
    def exercise_minutes(self) -> int:
        return sum(t.minutes for t in self.tasks)


def load_timings(timings: Path = TIMINGS) -> dict:
    if not timings.exists():
        raise StaleTimings(f"no {timings.name}: run `python -m ddl_lab times --measure`")
    return json.loads(timings.read_text())["notebooks"]


def run_seconds(nb: nbformat.NotebookNode, key: str, timings: dict) -> list[float]:
    """The measured seconds of each code cell of ``nb`` (``key``: "lessons/NN_x.ipynb"), as
    long as its code is the code that was measured."""
    entry = timings.get(key)
    code = sum(c.cell_type == "code" for c in nb.cells)
    if entry is None:
        why = "not measured"
    elif entry.get("failed"):
        why = f"failed: {entry['failed']}"
    elif len(entry["cells"]) != code:
        why = f"{len(entry['cells'])} cells measured, {code} now"
    elif entry.get("code") != code_hash(nb):
        why = "its code changed since it was measured"
    else:
        return entry["cells"]
    raise StaleTimings(f"{key}: {why}; run `python -m ddl_lab times --measure {key}`")


def _reading(text: str) -> int:
    return words(GLANCE.sub("", text))


def sections(nb: nbformat.NotebookNode) -> dict[int, int]:
    """The words of each numbered section ("## K · …") of a lesson, up to the next "## "."""
    out: dict[int, int] = {}
    current = None
    for c in nb.cells:
        src = _src(c)
        m = SECTION.match(src) if c.cell_type == "markdown" else None
        if c.cell_type == "markdown" and src.startswith("## "):
            current = int(m.group(1)) if m else None
        if current is not None:
            out[current] = out.get(current, 0) + _reading(src)
    return out


def _solution_lines(source: str) -> int:
    n, inside = 0, False
    for line in source.split("\n"):
        if line.strip() == "### BEGIN SOLUTION":
            inside = True
        elif line.strip() == "### END SOLUTION":
            inside = False
        elif inside and line.strip() and not line.strip().startswith("#"):
            n += 1
    return n


def _justification_words(source: str) -> int:
    m = re.search(r"<!-- BEGIN SOLUTION -->(.*?)<!-- END SOLUTION -->", source, re.S)
    return words(m.group(1)) if m else 0


def tasks(solution: nbformat.NotebookNode, lesson_no: str, seconds: list[float],
          lesson_sections: dict[str, dict[int, int]]) -> tuple[Task, ...]:
    """The tasks of one solution notebook, each with what its learner reads, writes and runs.
    ``seconds``: the solution's measured code-cell times; ``lesson_sections``: each lesson's
    section words, by lesson number."""
    from ddl_lab.tools.notebooks import stub_justification, stub_source
    found: list[dict] = []
    code_i = -1
    for c in solution.cells:
        src = _src(c)
        code_i += c.cell_type == "code"
        head = TASK_HEAD.match(src) if c.cell_type == "markdown" else None
        if head:
            found.append({"number": int(head.group(1)), "stars": len(head.group(2)),
                          "stated": int(head.group(3)), "text": [], "lines": 0, "justify": 0,
                          "run": 0.0})
        elif c.cell_type == "markdown" and src.startswith("## "):
            found.append({})                      # a closing section: no task's
        if not found or not found[-1]:
            continue
        t = found[-1]
        tags = c.get("metadata", {}).get("tags", [])
        if "solution-only" in tags:
            t["justify"] += words(src) if c.cell_type == "markdown" else 0
            continue
        if c.cell_type == "code":
            t["text"].append(stub_source(src))
            t["lines"] += _solution_lines(src)
            t["run"] += seconds[code_i]
        elif "justification" in tags:
            t["text"].append(stub_justification(src))
            t["justify"] += _justification_words(src)
        else:
            t["text"].append(src)
    out = []
    for t in (t for t in found if t):
        prompt = "\n".join(t["text"])
        pointed = {(m.group(1) or lesson_no, int(m.group(2))) for m in POINTS.finditer(prompt)}
        extra = sum(lesson_sections.get(n, {}).get(k, 0) for n, k in pointed)
        out.append(Task(t["number"], t["stars"], t["stated"], words(prompt) + extra, t["lines"],
                        t["justify"], round(t["run"], 2)))
    return tuple(out)


def course(root: Path = ROOT, timings: dict | None = None) -> list[Lesson]:
    """Every lesson's time and its exercise's tasks' times, from the notebooks and the
    committed timings (raises ``StaleTimings`` when they no longer match)."""
    from ddl_lab.active import load_quiz
    timings = load_timings(root / "lessons" / "timings.json") if timings is None else timings
    lessons = {p.stem: nbformat.read(p, as_version=4)
               for p in sorted((root / "lessons").glob("*.ipynb"))}
    secs = {name[:2]: sections(nb) for name, nb in lessons.items()}
    out = []
    for name, nb in lessons.items():
        run = run_seconds(nb, f"lessons/{name}.ipynb", timings)
        text = "\n".join(_src(c) for c in nb.cells)
        controls = sum(bool(CONTROL.search(_src(c))) for c in nb.cells if c.cell_type == "code")
        glance = GLANCE_STATED.search(text)
        sol_path = root / "solutions" / f"{name}.ipynb"
        found: tuple[Task, ...] = ()
        if sol_path.exists():
            sol = nbformat.read(sol_path, as_version=4)
            found = tasks(sol, name[:2], run_seconds(sol, f"solutions/{name}.ipynb", timings),
                          secs)
        read = sum(_reading(_src(c)) for c in nb.cells)
        code = "\n".join(_src(c) for c in nb.cells if c.cell_type == "code")
        asks = len(PREDICT.findall(code)) + sum(len(load_quiz(slug)) for slug in QUIZ.findall(code))
        out.append(Lesson(name, read, round(sum(run), 1), controls, asks,
                          int(glance.group(1)) if glance else None, found))
    return out



# -- stating --------------------------------------------------------------------------------

def _min(x: float) -> str:
    return "under 1" if x < 1 else f"{x:.0f}"


def glance_sentence(lesson: Lesson) -> str:
    """The At-a-glance cell's time line of ``lesson``."""
    read, run, tried = lesson.parts
    ex = ""
    if lesson.tasks:
        each = " + ".join(str(t.minutes) for t in lesson.tasks)
        ex = (f" and about {lesson.exercise_minutes} for the exercise (its {len(lesson.tasks)} "
              f"tasks: {each} minutes)")
    return (f"*Estimated time:* about {lesson.minutes} minutes for the lesson ({_min(read)} "
            f"reading, {_min(run)} running its cells, {tried} trying its controls, predictions "
            f"and quiz){ex}; from a "
            "timed run-through, `python -m ddl_lab times` (README, *How long each lesson "
            "takes*).")


def write(root: Path = ROOT, lessons: list[Lesson] | None = None) -> list[Path]:
    """State the tool's figures in the notebooks: each lesson's At-a-glance time line, each
    solution task heading's "~N min" (regenerate exercises/ after). Edits only those lines
    (the JSON as committed, one-space indent), and returns the files changed."""
    lessons = course(root) if lessons is None else lessons
    changed = []
    for lesson in lessons:
        line = glance_sentence(lesson)
        changed += _edit(root / "lessons" / f"{lesson.name}.ipynb",
                         lambda src: GLANCE.sub(lambda m: line, src, count=1))
        minutes = {t.number: t.minutes for t in lesson.tasks}
        if minutes:
            changed += _edit(root / "solutions" / f"{lesson.name}.ipynb",
                             lambda src: TASK_HEAD.sub(lambda m: _heading(m, minutes), src))
    return changed


def _heading(m: re.Match, minutes: dict[int, int]) -> str:
    a, b = m.span(3)
    return m.group(0)[:a - m.start()] + str(minutes[int(m.group(1))]) + m.group(0)[b - m.start():]


def _edit(path: Path, change) -> list[Path]:
    """Apply ``change`` to each markdown cell's source of the notebook at ``path``."""
    text = path.read_text()
    nb = json.loads(text)
    for c in nb["cells"]:
        if c["cell_type"] != "markdown":
            continue
        new = change(_src(c))
        if new != _src(c):
            c["source"] = new if isinstance(c["source"], str) else new.splitlines(keepends=True)
    out = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if out == text:
        return []
    path.write_text(out)
    return [path]


def table(lessons: list[Lesson]) -> str:
    """The lessons' and exercises' minutes, computed and stated, with their parts."""
    rows = [f"{'lesson':<22}{'read':>6}{'run':>6}{'try':>5}{'min':>6}{'stated':>8}"
            f"{'exercise':>10}{'stated':>8}  tasks (min: read words, lines, run s, stars)"]
    for s in lessons:
        read, run, tried = s.parts
        stated_ex = sum(t.stated for t in s.tasks)
        each = "; ".join(f"{t.number}: {t.minutes} ({t.read_words} w, {t.lines} l, "
                         f"{t.run_s:.0f} s, {'★' * t.stars})" for t in s.tasks)
        rows.append(f"{s.name:<22}{read:>6.1f}{run:>6.1f}{tried:>5}{s.minutes:>6}"
                    f"{s.stated if s.stated is not None else '-':>8}{s.exercise_minutes:>10}"
                    f"{stated_ex:>8}  {each}")
    total = sum(s.minutes + s.exercise_minutes for s in lessons)
    rows.append(f"the course: {total} min (about {total / 60:.1f} h)")
    return "\n".join(rows)
