"""Lesson 15's class leaderboard (``leaderboard.py``) on a made-up class: the order, what
an unranked run missed, learner strings escaped, the loss curves as inline SVG, the class
report's link and each learner's place on their feedback page, in text for a notebook; the
figures from the judge's records to the verdicts. The grader writes it for a graded class
in test_tampering.py."""
import html
import json
import re
from types import SimpleNamespace

import numpy as np

from ddl_lab.tools.grading import report
from ddl_lab.tools.grading.execute import Run
from ddl_lab.tools.grading.judge import _figures, _plain_number
from ddl_lab.capstone.leaderboard import leaderboard_text, rank
from ddl_lab.tools.grading.leaderboard import MAX_POINTS, boards, sparkline
from ddl_lab.tools.grading.record import Learner, Verdict, verdicts

MIB = 1 << 20
BOARD, STEM, TASK = "capstone_gpt", "15_capstone", "capstone_gpt"
HOSTILE = "<script>alert(1)</script>"
OVER = "memory 12.4 MiB > 10.0 MiB budget"


def run(wall: float, within: bool = True, peak: float = 9.1e6, loss: float = 2.61,
        plan: str = "my_plan") -> dict:
    """Figures as the capstone's check records them."""
    return {"board": BOARD, "within": within, "wall_s": wall, "peak_bytes": peak,
            "memory_budget": 10 * MIB, "bytes_per_step": 4.9e6, "bytes_budget": 6.1e6,
            "steps": 180, "steps_budget": 200, "loss": loss, "target": 2.65,
            "curve": [[1, 4.6], [10, 3.2], [180, loss + 0.1]], "plan": plan}


def learner(name: str, figures: dict | None) -> Learner:
    ok = bool(figures and figures["within"])
    return Learner(name, [Verdict("00_welcome", "hello", 1.0, 1.0, True, "hi"),
                          Verdict(STEM, TASK, float(ok), 1.0, ok, "measured", figures=figures)])


def made_up_class() -> list[Learner]:
    """ada and dee tie on wall time (dee's loss is lower); the hostile name is fastest, bea
    ran over the memory budget, cy has no figures."""
    return [learner("ada", run(12.3)), learner("bea", run(8.0, False, peak=12.4 * MIB)),
            learner("cy", None), learner("dee", run(12.3, loss=2.55)),
            learner(HOSTILE, run(9.5, plan="<b>fast</b>"))]


def test_runs_within_budget_rank_by_wall_time_the_others_say_what_they_missed():
    got = boards(made_up_class())
    assert list(got) == [BOARD]
    assert [(s.learner, s.place, s.ranked, s.missed) for s in got[BOARD]] == [
        (HOSTILE, 1, 3, ()), ("dee", 2, 3, ()), ("ada", 3, 3, ()), ("bea", None, 3, (OVER,))]
    worse = run(1.0, False, peak=12.4 * MIB, loss=2.7)
    worse["steps"] = 220
    assert rank([("x", worse)])[0].missed == (
        OVER, "steps 220 > 200 budget", "held-out loss 2.700 > 2.650 target")
    unmeasured = rank([("y", {**run(float("nan"))}), ("z", {"board": BOARD, "within": False})])
    assert [s.missed for s in unmeasured] == [
        ("no wall time measured",), ("a budget its check names (the check's message says which)",)]


def test_the_leaderboard_page_the_class_reports_link_and_each_learners_place(tmp_path):
    rows = made_up_class()
    report.write_all(tmp_path, rows, [])
    page = (tmp_path / "leaderboard.html").read_text()
    assert "<script>" not in page and "<b>fast" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;fast" in page
    names = [n for n in re.findall(r"<tr><td>[^<]*</td><td>([^<]*)</td>", page)]
    assert names == ["&lt;script&gt;alert(1)&lt;/script&gt;", "dee", "ada", "bea"]
    assert page.count("<svg ") == 4 and page.count("<polyline ") == 4 and "cy" not in names
    assert html.escape(OVER) in page and "3 of 4 runs ranked" in page
    assert "href='leaderboard.html'" in (tmp_path / "report.html").read_text()

    def section(name: str) -> str:
        text = (tmp_path / "feedback" / f"{report.file_name(name)}.html").read_text()
        return text.partition("Your place on the capstone leaderboard")[2]
    assert "place 2 of 3" in section("dee") and "<svg " in section("dee")
    assert html.escape(f"unranked: your run missed {OVER}") in section("bea")
    assert "place 1 of 3" in section(HOSTILE) and "<script>" not in section(HOSTILE)
    assert section("cy") == ""
    # results.json keeps the figures: a refold (``Verdict(**v)``) ranks the same
    again = [Learner(r["learner"], [Verdict(**v) for v in r["verdicts"]])
             for r in json.loads((tmp_path / "results.json").read_text())["learners"]]
    assert boards(again) == boards(rows)
    report.write_all(tmp_path, [learner("cy", None)], [])     # no figures: no leaderboard
    assert not (tmp_path / "leaderboard.html").exists()
    assert "leaderboard" not in (tmp_path / "report.html").read_text()


def test_the_board_in_plain_text():
    text = leaderboard_text(boards(made_up_class())[BOARD])
    lines = text.splitlines()
    assert lines[0].split("  ")[0] == "place" and set(lines[1]) <= {"-", " "}
    assert [line.split()[0] for line in lines[2:6]] == ["1", "2", "3", "—"]
    assert "dee" in lines[3] and "12.30 s" in lines[3] and "2.550 / 2.650" in lines[3]
    assert "8.7 MiB / 10.0 MiB" in lines[4] and "180 / 200" in lines[4]
    assert lines[-1] == f"bea: {OVER}"


def test_a_sparkline_draws_what_it_can():
    assert sparkline([]) == sparkline(None) == sparkline([["a", 1], [2]]) == ""
    one = sparkline([[5, 2.0], [6, float("inf")]])
    assert one.count("<svg ") == 1 and "steps 5 to 5" in one and "<script" not in one
    many = sparkline([[s, 1 / s] for s in range(1, 2001)])
    assert len(re.search(r"points='([^']*)'", many)[1].split()) <= MAX_POINTS + 1


def test_the_judge_answers_with_the_last_figures_and_the_verdict_keeps_them():
    entries = [{"task": TASK, "passed": False, "figures": {"board": BOARD, "wall_s": 2.0}},
               {"task": "other", "passed": True, "figures": {"board": "other"}},
               {"task": TASK, "passed": True}]
    assert _figures(entries, TASK) == {"board": BOARD, "wall_s": 2.0}
    assert _figures(entries[2:], TASK) is None
    answer = json.loads(json.dumps({"outcome": "passed", "message": "ok", "figures":
                                    {"wall_s": np.float32(1.5), "curve": np.ones((1, 2))}},
                                   default=_plain_number))
    assert answer["figures"] == {"wall_s": 1.5, "curve": [[1.0, 1.0]]}
    check = SimpleNamespace(index=0, tasks=[TASK, "second"], points={TASK: 1, "second": 1})
    ex = SimpleNamespace(stem=STEM, checks=[check])
    got = verdicts(ex, Run([{"event": "done", "check": 0}], None, False, 0.0, ""),
                   {TASK: answer, "second": {"outcome": "failed", "figures": [1]}}, 60, 600)
    assert [(v.passed, v.figures) for v in got] == [(True, answer["figures"]), (False, None)]
