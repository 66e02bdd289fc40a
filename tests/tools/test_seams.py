"""The seams between lessons stay closed: each lesson numbers its sections 1..k once each, in
order, and every cross-reference — "lesson NN", "lesson NN §K", a bare "§K" inside a lesson
or its exercise, "exercise NN task K" — in the lessons, exercises, solutions, quizzes, checks
(their docstrings reach the website) and the README names a place that exists.

A "§K" counts as the course's own only when the nearest mention before it, in the same
stretch of text, is a lesson ("lesson 06 §4", "the lesson's §2", "lesson §7") or nothing at
all inside a lesson's own files; after an author and a year ("Abadi et al., OSDI 2016, §4.3")
it is a paper's section and is left alone."""
import re
from functools import lru_cache
from pathlib import Path

import nbformat
import pytest

from ddl_lab.tools.notebooks import ROOT

SECTION = re.compile(r"^##\s+(\d+)\s+·\s+(.+)$", re.M)
TASK = re.compile(r"^##\s+Task\s+(\d+)\s+·", re.M)
MARK = re.compile(r"§\s?(\d+)(?:\s?[–-]\s?(\d+))?")
# what may stand before a "§K": a lesson (with its number or not), or a paper's year/authors
CONTEXT = re.compile(r"(?i)\blessons?(?:'s)?\s+(\d\d)\b|\b(?:the\s+)?lesson(?:'s)?\b|"
                     r"\b(?:19|20)\d\d\b|\bet al\b")
CHAIN = re.compile(r"^\s*(?:,|and|or|&)?\s*$")
LESSON_REF = re.compile(r"(?i)\blessons?\s+(\d\d)\b")
EXERCISE_TASK = re.compile(r"(?i)\bexercise\s+(\d\d)(?:'s|,)?\s+task\s+(\d+)")


def _stem(kind: str, number: str) -> Path | None:
    found = sorted((ROOT / kind).glob(f"{number}_*.ipynb"))
    return found[0] if found else None


def _markdown(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


@lru_cache(maxsize=None)
def sections(number: str) -> dict[int, str]:
    path = _stem("lessons", number)
    return {int(k): t for k, t in SECTION.findall(_markdown(path))} if path else {}


@lru_cache(maxsize=None)
def tasks(number: str) -> set[int]:
    path = _stem("exercises", number)
    return {int(k) for k in TASK.findall(_markdown(path))} if path else set()


def texts() -> list[tuple[str, str | None, str]]:
    """(where, the lesson number its bare "§K" means or None, the text) for every place a
    learner reads the course's references."""
    out = []
    for kind in ("lessons", "solutions", "exercises"):
        for path in sorted((ROOT / kind).glob("[0-9][0-9]_*.ipynb")):
            nb = nbformat.read(path, as_version=4)
            for i, cell in enumerate(nb.cells):
                out.append((f"{kind}/{path.name} cell {i}", path.name[:2], cell.source))
    numbers = {p.stem[3:]: p.stem[:2] for p in (ROOT / "lessons").glob("[0-9][0-9]_*.ipynb")}
    for path in sorted((ROOT / "ddl_lab").glob("*/quiz.py")):
        out.append((str(path.relative_to(ROOT)), numbers.get(path.parent.name), path.read_text()))
    for path in sorted((ROOT / "ddl_lab" / "check").glob("*.py")):
        slug = path.stem.lstrip("_")
        number = next((n for s, n in numbers.items() if slug.startswith(s)), None)
        out.append((str(path.relative_to(ROOT)), number, path.read_text()))
    out.append(("README.md", None, (ROOT / "README.md").read_text()))
    return out


def dangling(where: str, own: str | None, text: str) -> list[str]:
    """Every reference in ``text`` that names no existing place."""
    bad = []
    lessons = {p.name[:2] for p in (ROOT / "lessons").glob("[0-9][0-9]_*.ipynb")}
    for m in LESSON_REF.finditer(text):
        if m.group(1) not in lessons:
            bad.append(f"{where}: {m.group(0)!r} — there is no lesson {m.group(1)}")
    for m in EXERCISE_TASK.finditer(text):
        if int(m.group(2)) not in tasks(m.group(1)):
            bad.append(f"{where}: {m.group(0)!r} — exercise {m.group(1)} has tasks "
                       f"{sorted(tasks(m.group(1)))}")
    previous_end, previous_lesson = None, None
    for m in MARK.finditer(text):
        gap = text[previous_end:m.start()] if previous_end is not None else None
        if gap is not None and CHAIN.match(gap):
            lesson = previous_lesson
        else:
            before = text[max(0, m.start() - 80):m.start()].split("\n\n")[-1]
            hits = list(CONTEXT.finditer(before))
            if hits:
                last = hits[-1]
                lesson = (last.group(1) or own) if "esson" in last.group(0) else "paper"
            else:
                lesson = own
        previous_end, previous_lesson = m.end(), lesson
        if lesson in (None, "paper"):
            continue
        first, last_ = int(m.group(1)), int(m.group(2) or m.group(1))
        missing = [k for k in range(first, last_ + 1) if k not in sections(lesson)]
        if missing:
            bad.append(f"{where}: {text[max(0, m.start() - 40):m.end()]!r} — lesson {lesson} "
                       f"has sections {sorted(sections(lesson))}")
    return bad


@pytest.mark.parametrize("lesson", sorted(p.name for p in (ROOT / "lessons").glob("*.ipynb")))
def test_sections_are_numbered_one_to_k_once_each(lesson):
    found = [int(k) for k, _ in SECTION.findall(_markdown(ROOT / "lessons" / lesson))]
    assert found == list(range(1, len(found) + 1)), f"{lesson} numbers its sections {found}"


def test_every_reference_names_a_place_that_exists():
    bad = [line for where, own, text in texts() for line in dangling(where, own, text)]
    assert not bad, "references to nothing:\n" + "\n".join(bad)


def test_the_reader_finds_what_it_should():
    """The reader itself: a dangling section, lesson and task are found; a paper's is not."""
    assert dangling("t", "06", "as lesson 06 §9 shows")
    assert dangling("t", "06", "see §1 and §12")
    assert dangling("t", "06", "lesson 42 says")
    assert dangling("t", "06", "exercise 06 task 99")
    assert not dangling("t", "06", "Abadi et al., OSDI 2016, §4.3, and lesson 06 §1–2")
    assert not dangling("t", None, "the README's §4")
