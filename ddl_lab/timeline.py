"""What each rank did and when: a per-rank recorder and its picture (lessons 05, 06, 07).

A worker wraps each phase of its loop in ``timeline.span(kind)``::

    tl = Timeline()
    with tl.span("compute"):
        loss.backward()
    with tl.span("wait"):
        dist.barrier()

and returns ``tl``; the parent draws every rank's ``Timeline`` with ``plot_timeline``.
Times come from ``time.perf_counter``, which is the machine's monotonic clock, so
spans recorded by different processes on one machine line up.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

__all__ = ["Span", "Timeline", "plot_timeline", "COLORS"]

# Known kinds get fixed colours (and a lane: communication runs beside computation).
COLORS = {"compute": "tab:blue", "straggle": "tab:purple", "communicate": "tab:orange",
          "wait": "tab:red", "update": "tab:green", "evaluate": "lightgray"}
_LOWER_LANE = {"communicate"}


@dataclass
class Span:
    """One phase of one rank: ``kind`` from ``start`` to ``end`` (perf_counter seconds)."""

    kind: str
    start: float
    end: float
    step: int = -1

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class Timeline:
    """The spans one rank recorded (lessons 05-07)."""

    rank: int = 0
    spans: list[Span] = field(default_factory=list)
    step: int = -1

    @contextmanager
    def span(self, kind: str) -> Iterator[None]:
        """Record the time the ``with`` block takes as a span of ``kind``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.spans.append(Span(kind, t0, time.perf_counter(), self.step))

    def add(self, kind: str, start: float, end: float) -> None:
        """Record a span measured elsewhere (e.g. an async operation's start and end)."""
        self.spans.append(Span(kind, start, end, self.step))

    def total(self, kind: str) -> float:
        """Seconds spent in ``kind``."""
        return sum(s.duration for s in self.spans if s.kind == kind)

    def per_step(self, kind: str) -> dict[int, float]:
        """Seconds spent in ``kind`` in each step."""
        out: dict[int, float] = {}
        for s in self.spans:
            if s.kind == kind:
                out[s.step] = out.get(s.step, 0.0) + s.duration
        return out

    def totals(self) -> dict[str, float]:
        kinds = dict.fromkeys(s.kind for s in self.spans)
        return {k: self.total(k) for k in kinds}

    @property
    def start(self) -> float:
        return min((s.start for s in self.spans), default=0.0)

    @property
    def end(self) -> float:
        return max((s.end for s in self.spans), default=0.0)


def plot_timeline(timelines: Sequence[Timeline], ax=None, title: str | None = None,
                  t0: float | None = None, kinds: Sequence[str] | None = None):
    """One row per rank, one coloured bar per span (lessons 05, 06, 07).

    ``communicate`` spans get the lower half of a row (everything else the upper half),
    so communication that overlaps computation stays visible. Times are shifted so the
    earliest span starts at 0 (or at ``t0``, to share an origin across several plots).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    if not timelines:
        raise ValueError("plot_timeline needs at least one Timeline")
    ax = ax or plt.gca()
    origin = min(t.start for t in timelines) if t0 is None else t0
    seen: dict[str, str] = {}
    palette = iter(["tab:cyan", "tab:olive", "tab:brown", "tab:pink", "tab:gray"])
    has_lanes = [any(s.kind in _LOWER_LANE for s in tl.spans) for tl in timelines]
    for row, tl in enumerate(timelines):
        for s in tl.spans:
            if kinds is not None and s.kind not in kinds:
                continue
            color = seen.get(s.kind) or COLORS.get(s.kind) or next(palette, "black")
            seen[s.kind] = color
            if s.kind in _LOWER_LANE:
                y, h = row + 0.02, 0.38
            else:
                y, h = (row - 0.4, 0.4) if has_lanes[row] else (row - 0.4, 0.8)
            ax.broken_barh([(s.start - origin, s.duration)], (y, h), color=color,
                           edgecolor="white", linewidth=0.3)
    ax.set_yticks(range(len(timelines)), [f"rank {t.rank}" for t in timelines])
    ax.set_ylim(len(timelines) - 0.5, -0.5)
    ax.set_xlabel("wall time (s)")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in seen.items()],
              loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=len(seen), fontsize=8,
              frameon=False)
    if title:
        ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    return ax
