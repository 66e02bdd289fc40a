"""``ddl-lab grade`` over one class of the toy course (toy_course.py: checks of
milliseconds, registered beside the course's), graded once under the instructor's seed:
the sample class (sample_class.py) and, where a sandbox can be made, the attackers
(attacks.py). The course's own checks go through the grader in test_real_class.py.

The grader's plumbing: the exact gradebook, feedback pages and class report, reasons that
name what happened (a renamed function, a forbidden call, a dead kernel, a segfault), a
hang interrupted at the per-cell limit, truncated output, no process or private copy left
behind.

Grades that cannot be faked, by design (issues 23 and 34): learner code runs only in the
sandbox and the judge reads plain data back, so every forgery earns 0 — forgeries in the
kernel (also flagged for the instructor), an early exit, forgeries at call time, on the
workers, and more than one attack of each kind that once earned marks. Right answers
graded under the instructor's seed earn full marks unflagged; justifications are collected
beside the verdicts; the grader's outputs agree.
"""
import csv
import html
import json
import re
import site
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from ddl_lab.tools import grading
from ddl_lab.tools.grading import Limits, grade
from ddl_lab.tools.grading.execute import MAX_OUTPUT

from .attacks import ATTACKERS, IN_THE_KERNEL, KINDS, ON_THE_WORKERS, write_attackers
from .sample_class import BOB_MISSED, RACE, UNSANDBOXED, WRITTEN, tasks_of, write_class
from .toy_course import CAPSTONE, JUSTIFIED, MODULE, NUMPY, WORKERS

pytestmark = pytest.mark.slow
needs_sandbox = pytest.mark.skipif(UNSANDBOXED, reason="no sandbox can be made here (install "
                                   "bubblewrap: make sandbox): the attacks need one")
GD, WELCOME = NUMPY, WORKERS            # the parts exercises 01 and 00 played
SEED = 918273645
# The per-cell limit (also the judge's for one task): the toy course's slowest cell is a
# check that starts two workers, which took over 15 s at load 8 on 2 cores; dave's hang,
# which sleeps, is interrupted at it.
LIMITS = Limits(timeout=240, cell_timeout=30, jobs=2, trust_learner_code=UNSANDBOXED)


@pytest.fixture(scope="module")
def graded(tmp_path_factory, toy_course):
    tmp = tmp_path_factory.mktemp("class")
    subs, out, marker, scratch = tmp / "submissions", tmp / "out", tmp / "pwned", tmp / "scratch"
    want = write_class(subs, toy_course)
    attackers = [] if UNSANDBOXED else write_attackers(subs, toy_course, out, marker)
    scratch.mkdir()
    judge_py = Path(grading.__file__).with_name("judge.py")
    judge_before = judge_py.read_bytes()
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    t0 = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tempfile, "tempdir", str(scratch))     # the private copies go here
        rows = grade(subs, out, ["01", "00", "15"], LIMITS, toy_course, seed=SEED,
                     checks=(MODULE,))
    print(f"graded {len(want) + len(attackers)} learners in {time.perf_counter() - t0:.0f} s "
          f"(jobs={LIMITS.jobs})")
    book = (out / "gradebook.csv").read_text()
    time.sleep(1)                   # ivy's writer, had it survived, would have written by now
    return {"rows": rows, "by_name": {r.name: r for r in rows}, "out": out, "want": want,
            "learners": sorted([*want, *attackers]), "before": before, "scratch": scratch,
            "course": toy_course, "marker": marker, "book": book,
            "judge": (judge_py, judge_before)}


def test_the_gradebook_is_exact(graded):
    tasks = [t for stem in (NUMPY, WORKERS, CAPSTONE) for t, _ in tasks_of(stem, graded["course"])]
    with open(graded["out"] / "gradebook.csv", newline="") as f:
        table = list(csv.reader(f))
    notes = len(tasks) + 2
    assert table[0][:notes + 2] == ["learner"] + tasks + ["total", "notes", "flags"]
    want = graded["want"]
    assert [row[0] for row in table[1:]] == graded["learners"]      # the attackers' too
    sample = [row for row in table[1:] if row[0] in want]
    expected = [[name] + [str(want[name]["points"][t]) if t in want[name]["points"] else ""
                          for t in tasks] + [str(sum(want[name]["points"].values()))]
                for name in sorted(want)]
    assert [row[:notes] for row in sample] == expected
    for row in sample:
        for phrase in want[row[0]]["notes"]:
            assert phrase in row[notes], f"{row[0]}'s notes lack {phrase!r}: {row[notes]!r}"
    quiet = [row[0] for row in sample if not want[row[0]]["notes"] and row[notes]]
    assert not quiet, f"notes where none were expected: {quiet}"
    right = ("alice", "dave", "judy", "olga")         # right answers, in several styles
    assert [row[notes + 1] for row in sample if row[0] in right] == ["", "", "", ""]


def _the_browser_suites(p: psutil.Process) -> bool:
    """A Chromium process of the browser suite, which may run in this xdist worker before the
    grading fixture (its helpers can start late and end late); grading starts no browser."""
    try:
        return p.name().startswith(("chromium", "chrome")) or \
            any("playwright" in part for part in p.cmdline())
    except psutil.Error:
        return True


def test_no_process_is_left_behind(graded):
    me = psutil.Process()
    new = [p for p in me.children(recursive=True) if p.pid not in graded["before"]
           and not _the_browser_suites(p)]
    assert not new, f"processes left by grading: {[p.cmdline() for p in new]}"
    scratch = str(graded["scratch"])
    left = []
    for p in psutil.process_iter():
        try:
            if p.cmdline()[:2] == ["sleep", "600.5"] or \
                    any(scratch in v for v in p.environ().values()):
                left.append(p.cmdline())
        except psutil.Error:
            continue
    assert not left, f"processes of the graded notebooks still run: {left}"
    assert not list(graded["scratch"].iterdir()), "the private copies were not removed"


def test_reasons_name_what_happened(graded):
    gd = dict(tasks_of(NUMPY, graded["course"]))
    bob = verdicts(graded, "bob")
    first = next(iter(gd))
    assert f"{gd[first]} is not defined" in bob[first].message
    assert "rename" in bob[first].message
    ring = [t for t, _ in tasks_of(WORKERS, graded["course"])]
    assert "dist.all_reduce" in bob[ring[1]].message
    assert "kernel died" in verdicts(graded, "erin")[ring[1]].message
    frank = verdicts(graded, "frank")
    assert all("not implemented yet" in v.message for v in frank.values()), frank
    leo = verdicts(graded, "leo")
    assert all("SIGSEGV" in v.message for v in leo.values())


def test_feedback_pages_and_the_class_report(graded):
    out = graded["out"]
    pages = sorted(p.stem for p in (out / "feedback").glob("*.html"))
    assert pages == graded["learners"]
    bob = (out / "feedback" / "bob.html").read_text()
    assert "✘ not passed" in bob and "✔ passed" in bob and "rename" in bob
    report = (out / "report.html").read_text()
    rows = graded["rows"]
    for task in [t for t, _ in tasks_of(NUMPY, graded["course"])]:
        mine = [v for r in rows for v in r.verdicts if v.task == task]
        ok = sum(v.passed for v in mine)
        assert re.search(rf"<td>{task}</td><td>1</td><td>{ok}/{len(mine)} ", report), task
    assert "not implemented yet" in report          # a most frequent failure message


def test_a_flood_of_output_is_truncated(graded):
    executed = graded["out"] / "executed" / f"ivan--{NUMPY}.ipynb"
    text = executed.read_text()
    assert "output truncated" in text
    assert executed.stat().st_size < 2 * MAX_OUTPUT     # ivan printed 3 MB



def test_the_capstone_leaderboard_ranks_the_measured_runs(graded):
    """The toy capstone's runs (sample_class.RACE), graded end to end: alice's plan within
    every budget, ranked; bob's, faster, over budget: unranked, with what it missed."""
    out = graded["out"]
    page = (out / "leaderboard.html").read_text()
    assert re.findall(r"<tr><td>[^<]*</td><td>([^<]*)</td>", page) == ["alice", "bob"]
    assert page.count("<svg ") == len(RACE) and html.escape("; ".join(BOB_MISSED)) not in page
    assert all(html.escape(m) in page for m in BOB_MISSED)
    assert "href='leaderboard.html'" in (out / "report.html").read_text()
    for learner, place in (("alice", "place 1 of 1"),
                           ("bob", f"unranked: your run missed {'; '.join(BOB_MISSED)}")):
        mine = (out / "feedback" / f"{learner}.html").read_text()
        assert f"Your place on the capstone leaderboard</h2><p>On the board toy_race: <b>" \
            f"{html.escape(place)}</b>" in mine, learner
    assert "capstone leaderboard" not in (out / "feedback" / "carol.html").read_text()
    bob = verdicts(graded, "bob")["toy_race"]
    assert not bob.passed and "missed a budget" in bob.message and bob.figures["steps"] == 2


def verdicts(graded, learner):
    return {v.task: v for v in graded["by_name"][learner].verdicts}


@needs_sandbox
def test_forgeries_in_the_kernel_earn_nothing_and_are_flagged(graded):
    mallory = graded["by_name"]["mallory"]
    assert mallory.total == 0
    assert all("not implemented yet" in v.message for v in mallory.verdicts), mallory.verdicts
    flags = " | ".join(mallory.flags)
    for attack, (_, flag) in IN_THE_KERNEL.items():
        assert flag in flags, f"{attack}: no flag naming {flag!r} in {flags}"
    nick = graded["by_name"]["nick"]
    assert nick.total == 0 and all("kernel died" in v.message for v in nick.verdicts)
    assert any("os._exit" in f for f in nick.flags)


@needs_sandbox
def test_the_instructors_seed_never_reaches_the_kernel(graded):
    executed = (graded["out"] / "executed" / f"mallory--{GD}.ipynb").read_text()
    assert "DDL_LAB_PROGRESS" in executed          # the environment was printed …
    assert str(SEED) not in executed                # … without the seed


@needs_sandbox
def test_forgeries_at_call_time_earn_nothing(graded):
    trudy = verdicts(graded, "trudy")
    assert graded["by_name"]["trudy"].total == 0, trudy
    assert not any(v.passed for v in trudy.values())
    for task in ("toy_pick", "toy_plan"):           # the kernel ended: the rest ends too
        assert "kernel ended" in trudy[task].message, trudy[task].message
    flags = " | ".join(graded["by_name"]["trudy"].flags)
    for phrase in ("_record", "os.write", "os._exit"):
        assert phrase in flags, phrase


@needs_sandbox
def test_forgeries_on_the_workers_earn_nothing(graded):
    walter = verdicts(graded, "walter")
    for task in ON_THE_WORKERS:
        assert not walter[task].passed and walter[task].points == 0, walter[task].message


@needs_sandbox
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_of_attack_earns_nothing(graded, kind):
    learner = ATTACKERS[list(KINDS).index(kind)]
    mine = verdicts(graded, learner)
    assert graded["by_name"][learner].total == 0, {t: v.message for t, v in mine.items()}
    assert not any(v.passed for v in mine.values())
    assert not graded["marker"].exists(), "learner code ran outside the sandbox"


@needs_sandbox
def test_the_installation_and_the_outputs_survive_the_class(graded):
    judge_py, before = graded["judge"]
    assert judge_py.read_bytes() == before
    assert not [p for folder in site.getsitepackages()
                for p in Path(folder).glob("zz_forged.pth")]
    executed = (graded["out"] / "executed" / f"ivy--{GD}.ipynb").read_text()
    assert "Error" in executed                   # each write was refused in the sandbox
    assert "a writer waits for the gradebook" in executed       # and the writer started
    out = graded["out"]
    assert (out / "gradebook.csv").read_text() == graded["book"]
    with open(out / "gradebook.csv", newline="") as f:
        book = {row["learner"]: float(row["total"]) for row in csv.DictReader(f)}
    results = json.loads((out / "results.json").read_text())
    assert {r["learner"]: float(r["total"]) for r in results["learners"]} == book
    for learner, total in book.items():
        page = (out / "feedback" / f"{learner}.html").read_text()
        assert f"Total: {total:g} /" in page, learner


def test_right_answers_under_the_seed_earn_full_marks_unflagged(graded):
    olga = graded["by_name"]["olga"]
    assert all(v.passed for v in olga.verdicts), [v.message for v in olga.verdicts]
    assert not olga.flags and not olga.notes


@needs_sandbox
def test_justifications_beside_the_verdicts(graded):
    out = graded["out"]
    with open(out / "gradebook.csv", newline="") as f:
        table = {row["learner"]: row for row in csv.DictReader(f)}
    column = f"justification: {JUSTIFIED}"
    assert table["olga"][column] == WRITTEN
    assert table["trudy"][column] == "(not written)"
    assert table["walter"][column] == ""            # exercise 00 asks for none
    results = json.loads((out / "results.json").read_text())
    assert results["seed"] == SEED
    report = (out / "report.html").read_text()
    assert f"seed {SEED}" in report and WRITTEN in report
    page = (out / "feedback" / "olga.html").read_text()
    assert WRITTEN in page
