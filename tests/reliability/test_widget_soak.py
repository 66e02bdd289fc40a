"""Soak: 50 re-runs of a lesson-06 and a lesson-07 experiment panel, each started
the way a learner starts it — the panel's own Run button, clicked in this process as the
notebook's kernel would run it. Open files, threads, processes, /dev/shm segments and the
notebook's resident memory must not grow beyond a small bound.

The panels are the lessons' own: their imports cell and the cell that defines the panel's
function run as notebook cells, with the controls set small so that a run takes a fraction
of a second. ``DDL_SOAK_SCALE`` multiplies the number of re-runs.
"""
import os
import re
from pathlib import Path

import ipywidgets as widgets
import nbformat
import pytest

from ddl_lab import widgets as panel_module
from ddl_lab.runtime.launch import close_shared

from .conftest import SCALE
from .system import descendants, shm_in_use, usage

ROOT = Path(__file__).resolve().parents[2]
RERUNS = max(20, round(50 * SCALE))     # a resource leaked per run shows by then
WARM_UP = 5
MB = 1 << 20


class Panel:
    """One experiment panel of a lesson, shown with its controls set to ``settings``."""

    def __init__(self, cell, monkeypatch, stem: str, defines: str, **settings):
        nb = nbformat.read(ROOT / "lessons" / f"{stem}.ipynb", as_version=4)
        code = [c.source for c in nb.cells if c.cell_type == "code"]
        ns = cell(next(s for s in code if "from ddl_lab.widgets import experiment" in s))
        asked = {}
        ns["experiment"] = lambda update, **kw: asked.update(update=update, **kw)
        exec(next(s for s in code if f"def {defines}(" in s), ns)
        update, options = asked.pop("update"), {k: asked.pop(k) for k in ("title", "live")
                                                   if k in asked}
        for name, value in settings.items():
            asked[name].value = value
        shown = []
        monkeypatch.setattr(panel_module, "display", shown.append)
        panel_module.experiment(update, **options, **asked)          # its first run
        row = shown[0].children[-2].children
        self.button = next(w for w in row if isinstance(w, widgets.Button))
        self.status = row[-1]

    def press(self) -> None:
        self.button.click()
        assert re.fullmatch(r"run \d+ done in [\d.]+ s", self.status.value), self.status.value


def shm_held() -> set[str]:
    """/dev/shm names this process and its children hold open or mapped."""
    return shm_in_use([os.getpid(), *descendants()])


def ours(left: list[str], seen: set[str]) -> list[str]:
    """What ``leftovers()`` found that this test made: its temporary files, and the /dev/shm
    segments its processes were seen to hold (other programs on a shared machine make and
    remove segments of their own meanwhile)."""
    return [f for f in left if not f.startswith("/dev/shm/") or f[len("/dev/shm/"):] in seen]


def soak(panel: Panel, what: str) -> set[str]:
    """Press Run RERUNS times after a warm-up, assert nothing grew; the segments seen held."""
    for _ in range(WARM_UP):                 # pools, caches, lazy imports
        panel.press()
    before, children, shm = usage(), descendants(), shm_held()
    workers, seen = {p: usage(p) for p in children}, set(shm)
    for _ in range(RERUNS):
        panel.press()
        seen |= shm_held()
    after, children_after, shm_after = usage(), descendants(), shm_held()
    print(f"\n  {RERUNS} re-runs of {what}: notebook before {before}; after {after}; "
          f"{len(children)} → {len(children_after)} child processes; "
          f"{len(shm)} → {len(shm_after)} /dev/shm segments held")
    assert children_after == children, "a re-run left a process behind or lost one"
    assert after.fds - before.fds <= 2
    assert after.threads - before.threads <= 1
    assert after.rss - before.rss < 40 * MB
    assert len(shm_after) <= len(shm), f"segments held grew: {sorted(shm_after - shm)}"
    for pid, w0 in workers.items():
        w1 = usage(pid)
        print(f"  child {pid}: before {w0}; after {w1}")
        assert w1.fds - w0.fds <= 2 and w1.threads - w0.threads <= 1
        assert w1.rss - w0.rss < 40 * MB
    return seen


@pytest.fixture
def shared_clusters_closed():
    yield
    close_shared()


def test_lesson_06_allreduce_panel_reruns_leave_nothing_behind(cell, monkeypatch, leftovers,
                                                               shared_clusters_closed):
    panel = Panel(cell, monkeypatch, "06_ring_allreduce", "measure", n=2, mib=1, segments=2)
    seen = soak(panel, "lesson 06's 'Allreduce on this machine' (2 ranks, 1 MiB)")
    close_shared()
    assert ours(leftovers(), seen) == []


def test_lesson_07_downpour_panel_reruns_leave_nothing_behind(cell, monkeypatch, leftovers):
    panel = Panel(cell, monkeypatch, "07_parameter_server", "try_downpour", replicas=1,
                  shards=1, n_fetch=8, n_push=8, cost=0)
    seen = soak(panel, "lesson 07's Downpour panel (1 replica, 1 shard)")
    assert ours(leftovers(), seen) == []
