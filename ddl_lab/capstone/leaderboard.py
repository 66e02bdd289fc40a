"""The capstone's leaderboard (lesson 15): measured runs ranked by wall time among those
within every budget, the others listed with what they missed — the order ``ddl-lab grade``
gives a class (its ``leaderboard.html``) and a notebook can print (``leaderboard_text``).

A run is its check's ``figures`` (``transformer.GPTResult.figures``): the board, whether
every budget was met (``within``), the wall time, the peak memory, the bytes per step, the
steps and the held-out loss beside their budgets and target, and the loss curve.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ddl_lab.capstone.budget import size_text

__all__ = ["Standing", "rank", "missed", "cells", "leaderboard_text", "HEAD", "NO"]

NO = "—"
# (figure, its budget, what the figure is called): a run over a budget missed it
BUDGETS = (("peak_bytes", "memory_budget", "memory"),
           ("bytes_per_step", "bytes_budget", "bytes per step"),
           ("steps", "steps_budget", "steps"),
           ("wall_s", "time_budget", "wall time"),
           ("loss", "target", "held-out loss"))
HEAD = ("place", "learner", "plan", "wall time", "peak memory / budget",
        "bytes per step / budget", "steps / budget", "held-out loss / target")


@dataclass(frozen=True)
class Standing:
    """One learner's run on one board: its place (1, 2, …) of the ``ranked`` runs, or
    None and what it ``missed``."""
    learner: str
    figures: dict
    place: int | None = None
    ranked: int = 0
    missed: tuple[str, ...] = ()




def value(figures: dict, key: str) -> float | None:
    """A figure as a finite number, or None (absent, not a number, NaN or infinite)."""
    x = figures.get(key)
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def show(key: str, x: float | None) -> str:
    """A figure as a board shows it: memory in KiB, MiB or GiB (as lesson 10 counts it),
    bytes on the wire in kB or MB (as the meter does), seconds, steps, a loss."""
    if x is None:
        return NO
    if key in ("peak_bytes", "memory_budget"):
        size, unit = next((x / 1024 ** k, u) for k, u in ((3, "GiB"), (2, "MiB"), (1, "KiB"))
                          if x >= 1024 ** k or u == "KiB")
        return f"{size:.1f} {unit}"
    if key in ("bytes_per_step", "bytes_budget"):
        return size_text(x)
    if key in ("wall_s", "time_budget"):
        return f"{x:.2f} s"
    if key in ("steps", "steps_budget"):
        return f"{x:.0f}"
    return f"{x:.3f}"


def missed(figures: dict) -> tuple[str, ...]:
    """What a run missed, each figure beside its budget ("memory 12.4 MiB > 10.0 MiB
    budget"); nothing for a run within every budget."""
    if figures.get("within") is True:
        return () if value(figures, "wall_s") is not None else ("no wall time measured",)
    said = []
    for key, limit, name in BUDGETS:
        got, most = value(figures, key), value(figures, limit)
        if got is not None and most is not None and got > most:
            kind = "target" if limit == "target" else "budget"
            said.append(f"{name} {show(key, got)} > {show(limit, most)} {kind}")
    return tuple(said) or ("a budget its check names (the check's message says which)",)


def rank(runs: Iterable[tuple[str, dict]]) -> list[Standing]:
    """One board's standings from ``(learner, figures)``: the runs within every budget by
    wall time (ties: lower loss, then name), then the others by name, unranked."""
    runs = list(runs)
    within = sorted(((n, f) for n, f in runs if not missed(f)),
                    key=lambda r: (value(r[1], "wall_s"), _or_last(value(r[1], "loss")), r[0]))
    out = [Standing(n, f, place, len(within)) for place, (n, f) in enumerate(within, 1)]
    return out + [Standing(n, f, None, len(within), missed(f))
                  for n, f in sorted(runs, key=lambda r: r[0]) if missed(f)]


def _or_last(x: float | None) -> float:
    return math.inf if x is None else x


def cells(s: Standing) -> list[str]:
    """A standing's cells under ``HEAD``, as plain text (unescaped)."""
    f = s.figures

    def versus(key: str, limit: str) -> str:
        got, most = value(f, key), value(f, limit)
        if got is None:
            return NO
        return show(key, got) if most is None else f"{show(key, got)} / {show(limit, most)}"
    return [NO if s.place is None else str(s.place), s.learner, str(f.get("plan") or NO)[:80],
            show("wall_s", value(f, "wall_s")), versus("peak_bytes", "memory_budget"),
            versus("bytes_per_step", "bytes_budget"), versus("steps", "steps_budget"),
            versus("loss", "target")]


def leaderboard_text(rows: Sequence[Standing]) -> str:
    """A board (``rank``'s standings) as a plain-text table, the unranked with what they
    missed below it: for a notebook to print."""
    table = [list(HEAD)] + [cells(s) for s in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEAD))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table]
    lines[1:1] = ["  ".join("-" * w for w in widths)]
    lines += [f"{s.learner}: {'; '.join(s.missed)}" for s in rows if s.place is None]
    return "\n".join(lines)
