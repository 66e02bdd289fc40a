"""Lesson 15's class leaderboard: the capstone's measured runs, ranked (``ddl-lab grade``).

With its verdict, the capstone's check records the ``figures`` of the learner's run: the
board, whether every budget was met (``within``), the wall time, the peak memory, the bytes
per step, the steps and the held-out loss beside their budgets and target, and the loss
curve. On each board the runs within every budget are ranked by wall time (ties: lower
loss, then name); the others follow, unranked, with what they missed. ``report.py`` writes
the boards as ``leaderboard.html`` and each learner's row on their feedback page. The
ranking itself is the lesson's (``capstone.leaderboard``: ``rank``, ``leaderboard_text``);
this module draws it. Every string a learner chose (their name, their plan's name) is
escaped.
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ddl_lab.capstone.leaderboard import HEAD, Standing, cells, rank

if TYPE_CHECKING:
    from .record import Learner

MAX_POINTS = 200            # a curve is drawn from this many points at most
Boards = dict[str, list[Standing]]


def figures_of(learner: Learner) -> dict[str, dict]:
    """A learner's figures per board: the last of their verdicts' that name one."""
    found = {}
    for v in learner.verdicts:
        f = getattr(v, "figures", None)
        if isinstance(f, dict) and isinstance(f.get("board"), str) and f["board"]:
            found[f["board"]] = f
    return found


def boards(learners: Sequence[Learner]) -> Boards:
    """Every board the class's figures name (in name order), with its standings."""
    runs: dict[str, list[tuple[str, dict]]] = {}
    for learner in learners:
        for board, f in figures_of(learner).items():
            runs.setdefault(board, []).append((learner.name, f))
    return {board: rank(runs[board]) for board in sorted(runs)}


def sparkline(curve: Any, width: int = 120, height: int = 28) -> str:
    """The training loss against the step as a small inline SVG (no script); "" for no
    curve. Points that are not two finite numbers are left out."""
    points = [(float(p[0]), float(p[1])) for p in curve if isinstance(p, (list, tuple))
              and len(p) == 2 and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                      and math.isfinite(x) for x in p)] \
        if isinstance(curve, list) else []
    if not points:
        return ""
    if len(points) > MAX_POINTS:
        points = points[::math.ceil(len(points) / MAX_POINTS)] + points[-1:]
    xs, ys = [x for x, _ in points], [y for _, y in points]
    (x0, x1), (y0, y1) = (min(xs), max(xs)), (min(ys), max(ys))

    def at(x: float, y: float) -> str:
        u = (x - x0) / (x1 - x0) if x1 > x0 else 0.5
        v = (y1 - y) / (y1 - y0) if y1 > y0 else 0.5
        return f"{2 + (width - 4) * u:.1f},{2 + (height - 4) * v:.1f}"
    said = html.escape(f"training loss {ys[0]:.3g} to {ys[-1]:.3g}, steps {x0:g} to {x1:g}")
    end = at(*points[-1]).split(",")
    return (f"<svg class='spark' xmlns='http://www.w3.org/2000/svg' width='{width}' "
            f"height='{height}' viewBox='0 0 {width} {height}' role='img' "
            f"aria-label='{said}'><title>{said}</title><polyline fill='none' "
            f"stroke='#1565c0' stroke-width='1.5' points='{' '.join(at(x, y) for x, y in points)}'"
            f"/><circle cx='{end[0]}' cy='{end[1]}' r='2' fill='#1565c0'/></svg>")


def table_html(standings: Sequence[Standing]) -> str:
    """A board as an HTML table: the ranked runs, then the unranked with what they missed."""
    head = "".join(f"<th>{h}</th>" for h in (*HEAD, "loss curve", "missed"))
    lines = [f"<tr>{head}</tr>"]
    for s in standings:
        row = "".join(f"<td>{html.escape(c)}</td>" for c in cells(s))
        why = "<br>".join(html.escape(m) for m in s.missed)
        lines.append(f"<tr>{row}<td>{sparkline(s.figures.get('curve'))}</td>"
                     f"<td class='no'>{why}</td></tr>")
    return f"<table>{''.join(lines)}</table>"


def page_body(standings: Boards) -> str:
    """The body of ``leaderboard.html``: every board, how it ranks, its table."""
    body = ["<p>Lesson 15's capstone runs, as its check measured them when grading. A run "
            "within every budget (memory, bytes per step, steps, time) that reached the "
            "target loss is ranked by its wall time (ties: lower held-out loss, then name); "
            "the others are listed below, unranked, with what they missed.</p>"]
    for board, rows in standings.items():
        ranked = rows[0].ranked if rows else 0
        body.append(f"<h2>{html.escape(board)}</h2><p>{ranked} of {len(rows)} runs ranked."
                    f"</p>{table_html(rows)}")
    return "".join(body)


def where(s: Standing) -> str:
    """A standing in words: "place 2 of 3", or why it is unranked."""
    if s.place is not None:
        return f"place {s.place} of {s.ranked}"
    return f"unranked: your run missed {'; '.join(s.missed)}"


def your_place(learner: str, standings: Boards) -> str:
    """The feedback page's section on ``learner``'s place on each board they ran on; ""
    where they have no figures."""
    mine = [(board, s) for board, rows in standings.items() for s in rows
            if s.learner == learner]
    if not mine:
        return ""
    parts = [f"<p>On the board {html.escape(board)}: <b>{html.escape(where(s))}</b>.</p>"
             f"{table_html([s])}" for board, s in mine]
    return "<h2>Your place on the capstone leaderboard</h2>" + "".join(parts)


