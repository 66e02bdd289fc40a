"""The experiment panel in the browser, on generated scratch notebooks: the harness fails on
what a learner would see go wrong, and long runs show progress and can be interrupted."""
import re
import time

import nbformat
import pytest

from lab_harness import Control, PageError, check_lesson, exercise_panel, wait_until

pytestmark = pytest.mark.browser

SETUP = """\
import ipywidgets as widgets
import matplotlib.pyplot as plt
from ddl_lab.widgets import experiment
"""


def write_notebook(lab, name: str, *sources: str) -> str:
    """A scratch notebook in the served copy of the course; returns its path there."""
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in sources],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}})
    (lab.root / "scratch").mkdir(exist_ok=True)
    nbformat.write(nb, lab.root / "scratch" / f"{name}.ipynb")
    return f"scratch/{name}.ipynb"


# ------------------------------------------------------------ planted failures

RAISES_ON_SECOND_RUN = SETUP + """\
runs = []
def draw(x):
    runs.append(x)
    if len(runs) == 2:
        raise RuntimeError("planted failure: the update raised on its second run")
    plt.plot(range(x + 2))
experiment(draw, title="planted", x=widgets.IntSlider(value=1, min=0, max=5, description="x"));
"""

PILES_UP = SETUP + """\
from IPython.display import display
out = widgets.Output()
x = widgets.IntSlider(value=1, min=0, max=5, description="x")
def draw(change=None):
    with out:                      # no clear_output: every move adds a figure below
        plt.plot(range(x.value + 2))
        plt.show()
x.observe(draw, names="value")
display(widgets.VBox([x, out]))
draw()
"""

IGNORES_CONTROL = SETUP + """\
def draw(x):
    plt.plot([0, 1], [0, 1])       # x is never used: the figure cannot change
    print("always the same")
experiment(draw, title="planted", x=widgets.IntSlider(value=1, min=0, max=5, description="x"));
"""

SHOWN_TWICE = SETUP + """\
from IPython.display import display
x = widgets.IntSlider(value=1, max=3, description="x")
box = widgets.VBox([x, widgets.Output()])
display(box)
box                                # the cell's value: the same widget a second time
"""

CELL_RAISES = SETUP + """\
experiment(lambda x: plt.plot([0, x]), x=widgets.IntSlider(value=1, max=3, description="x"));
raise ValueError("planted failure: a cell raised")
"""


@pytest.mark.parametrize("source, complaint", [
    (RAISES_ON_SECOND_RUN, r"RuntimeError: planted failure: the update raised on its second"),
    (PILES_UP, r"redrawn in place, not piled up"),
    (IGNORES_CONTROL, r"slider 1 → 2, Run pressed, the experiment ran but its output did "
                      r"not change"),
    (SHOWN_TWICE, r"the same widget is shown twice in cell 0"),
    (CELL_RAISES, r"after Run All Cells.*ValueError: planted failure: a cell raised"),
], ids=["update-raises", "figures-pile-up", "figure-never-changes", "shown-twice",
        "cell-raises"])
def test_the_harness_fails_on_a_broken_widget(source, complaint, lab, open_notebook, request):
    """The lesson procedure (run all, no error, move a control, see the figure change in
    place) must fail, naming the problem, on a notebook planted with one."""
    name = request.node.callspec.id
    nb = open_notebook(write_notebook(lab, f"planted-{name}", source))
    with pytest.raises(PageError, match=re.compile(complaint, re.S)) as caught:
        check_lesson(nb)
    print(caught.value)
    nb.screenshot(f"planted-{name}", focus=nb.panels().first)


EVERY_CONTROL = SETUP + """\
def draw(**values):
    plt.bar(range(len(values)), [len(str(v)) + hash(str(v)) % 7 for v in values.values()])
    plt.title(str(values))
    print(values)
experiment(draw, title="every kind of control", live=True,
           s=widgets.IntSlider(value=3, max=5, description="int"),
           f=widgets.FloatLogSlider(value=0.3, base=10, min=-2, max=0.5, step=0.05,
                                    description="log"),
           sel=widgets.SelectionSlider(options=[10, 100, 1000], value=1000, description="sel"),
           d=widgets.Dropdown(options=["a", "b"], description="drop"),
           t=widgets.ToggleButtons(options=["sparse", "dense"], description="toggle"),
           r=widgets.RadioButtons(options=["x", "y"], description="radio"),
           c=widgets.Checkbox(value=False, description="check me"));
"""


def test_every_kind_of_control_moves_and_redraws(lab, open_notebook):
    """The fallback for a new lesson: whatever control it offers, the harness can move it."""
    nb = open_notebook(write_notebook(lab, "every-control", EVERY_CONTROL))
    nb.run_all(timeout=60)
    nb.assert_no_errors("after Run All Cells")
    done = [exercise_panel(nb, Control(label)).action
            for label in ["int", "log", "sel", "drop", "toggle", "radio", "check me"]]
    assert [a.split()[0] for a in done] == ["slider", "slider", "slider", "dropdown",
                                            "toggle-buttons", "radio", "checkbox"], done
    assert "1000 → 100" in done[2], done         # at its maximum: moved down
    nb.screenshot("every-control", focus=nb.panels().first)


# ------------------------------------------------------------ progress and interrupts

WORKER = """\
import os, time
import torch
import torch.distributed as dist
import ipywidgets as widgets
from ddl_lab import progress, shared_cluster
from ddl_lab.widgets import experiment

def steps(n, step_s):
    \"\"\"Worker: n steps of real compute of about step_s seconds each, reporting progress.\"\"\"
    a = torch.randn(32, 32)
    if dist.get_rank() == 0:
        print(f"computing {n} steps", flush=True)
    for i in range(n):
        end = time.perf_counter() + step_s
        while time.perf_counter() < end:
            a = torch.tanh(a @ a)
        progress(i + 1, n)
    return dist.get_rank()

def alive(pids):
    out = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            out.append(pid)
        except ProcessLookupError:
            pass
    return out
"""
PANEL = """\
def run(n):
    print(f"{n} steps finished on ranks {shared_cluster(2).run(steps, n, 0.05)}")

experiment(run, title="a long run", n=widgets.Dropdown(options=[2, 500], value=2,
                                                       description="steps"));
"""
PIDS = "pids = shared_cluster(2).pids\nprint('workers', pids)"
LONG_CELL = "print('long run started', flush=True)\nshared_cluster(2).run(steps, 500, 0.05)"
NEXT_CELL = ("print('old workers alive:', alive(pids))\n"
             "print('next run:', shared_cluster(2).run(dist.get_rank))")


def _progress(panel) -> float | None:
    """The panel's progress bar as a fraction, None while hidden."""
    bar = panel.locator(".widget-hprogress").first
    if "hidden" in (bar.get_attribute("style") or ""):
        return None
    width = bar.locator(".progress-bar").first.get_attribute("style") or ""
    m = re.search(r"width:\s*([\d.]+)%", width)
    return float(m.group(1)) / 100 if m else None


def test_progress_bar_follows_the_workers_and_runs_can_be_interrupted(lab, open_notebook):
    nb = open_notebook(write_notebook(lab, "progress", WORKER, PANEL, PIDS, NEXT_CELL,
                                      LONG_CELL, NEXT_CELL))
    for i in range(4):
        nb.run_cell(i)
    nb.assert_no_errors("after the set-up cells")
    workers = re.search(r"workers (\[[\d, ]+\])", nb.output_text(2)).group(1)
    assert f"old workers alive: {workers}" in nb.output_text(3), nb.output_text(3)
    assert "next run: [0, 1]" in nb.output_text(3)

    # 1. a run of the panel reports progress from the workers; the bar moves; interrupt it
    panel = nb.panels().first
    panel.locator("select").select_option("500")
    panel.locator(".widget-button").click()
    wait_until(lambda: "running" in nb.panel_status(panel), 30, "the run to start")
    seen: list[float] = []                # the bar still shows 100% of the last run until now

    def moved() -> bool:
        f = _progress(panel)
        if f is not None and (not seen or f != seen[-1]):
            seen.append(f)
        return len(seen) >= 3 and seen[-1] > max(seen[0], 0.03)
    wait_until(moved, 60, "the progress bar to move")
    assert seen[-1] < 1, f"the 25 s run finished already? progress {seen}"
    label = panel.locator(".widget-hprogress .widget-label").text_content()
    assert re.fullmatch(r"\d+%", label or ""), f"progress label {label!r}"
    nb.screenshot("progress-bar", focus=panel)
    t0 = time.monotonic()
    nb.interrupt()
    wait_until(lambda: "failed after" in (panel.text_content() or "")
               and nb.kernel_status() == "idle", 60, "the interrupted panel run to stop")
    stopped_in = time.monotonic() - t0
    shown = nb.errors()
    assert shown and all("RunInterrupted: run interrupted" in e.text or "failed after" in e.text
                         for e in shown), "\n".join(map(str, shown))
    nb.run_cell(3)
    out = nb.output_text(3)
    assert "old workers alive: []" in out, out
    assert "next run: [0, 1]" in out, out

    # 2. an interrupted cell stops the workers, and the next cell works
    nb.run_cell(2)
    nb.cells.nth(4).locator(".jp-InputArea-editor").click()
    nb.page.keyboard.press("Control+Enter")
    wait_until(lambda: "[rank 0] computing 500 steps" in nb.output_text(4), 60,
               "the workers of the long cell to start computing")
    nb.interrupt()
    nb.wait_idle(60, "the interrupted cell to stop")
    assert "RunInterrupted: run interrupted: the workers were stopped" in nb.output_text(4), \
        nb.output_text(4)
    nb.run_cell(5)
    out = nb.output_text(5)
    assert "old workers alive: []" in out, out
    assert "next run: [0, 1]" in out, out
    print(f"progress seen {seen}; panel run stopped {stopped_in:.1f} s after the interrupt")
    nb.screenshot("interrupted", focus=nb.cells.nth(5))
