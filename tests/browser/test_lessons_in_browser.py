"""Every lesson, as a learner meets it in JupyterLab: it runs without an error shown, its
widgets render, and moving a control re-runs the experiment and redraws its figure in place.
The lesson as it ran is saved into build/lessons/ (as `make lessons` would write it), so the
website (tests/site) is built from this run instead of executing every lesson again.

A lesson without an entry in LESSON_CONTROLS is covered by moving the first control of its
first experiment panel, so a new lesson gets its browser test without touching this file.
"""
import pytest

from lab_harness import EXECUTED, ROOT, Control, check_lesson, exercise_panel

pytestmark = pytest.mark.browser

LESSONS = sorted(p.stem for p in (ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))

# The control a learner is most likely to try, where the first one is slow or says little.
LESSON_CONTROLS = {
    "00_welcome": Control("seed"),                     # new darts, same cluster: cheap
    "02_parallel_models": Control("schedule"),         # static → dynamic: a new timeline
    "04_message_passing": Control("KB / message"),     # 16 → 256 KB: new bandwidth bars
    "06_ring_allreduce": Control("step"),              # the next step of the same ring
    "10_memory": Control("stage"),                     # ZeRO-1 → 2: gradients sharded too
}
# Further controls moved after that one, in the same page.
MORE_CONTROLS = {
    "06_ring_allreduce": [Control("step", panel=2)],   # §7: halving/doubling, stepped
    "12_transformers": [Control("ring step", panel=1)],  # §6: the ring-attention stepper
}


def test_there_are_lessons_to_test():
    assert "00_welcome" in LESSONS


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_runs_and_its_widgets_redraw(lesson, open_notebook):
    spec = LESSON_CONTROLS.get(lesson, Control())
    (EXECUTED / f"{lesson}.ipynb").unlink(missing_ok=True)    # a failed run leaves none
    nb = open_notebook(f"lessons/{lesson}.ipynb")
    try:
        took, change = check_lesson(nb, spec, keep=EXECUTED)
        print(f"{lesson}: run all {took:.0f} s; {change.action}")
        assert change.after.images or change.after.text.strip(), (
            f"{lesson}: the panel shows nothing after the re-run")
        for more in MORE_CONTROLS.get(lesson, []):
            change = exercise_panel(nb, more)
            print(f"{lesson}, panel {more.panel}: {change.action}")
            assert change.after.images or change.after.text.strip(), (
                f"{lesson}: panel {more.panel} shows nothing after the re-run")
    finally:
        panels = nb.panels()
        nb.screenshot(f"lesson-{lesson}",
                      focus=panels.nth(spec.panel) if panels.count() > spec.panel else None)
