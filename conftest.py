"""Each lesson runs once per test session (CONTRIBUTING.md, \"Budgets\"): where the browser suite can
drive JupyterLab, it runs every lesson top to bottom and asserts no error, so nbval's run of
the same lesson is deselected; without a browser, nbval runs the lessons."""
import importlib.util
import os
from pathlib import Path

# Checks run by the tests are not the learner's: they leave the course's progress alone.
os.environ.setdefault("DDL_LAB_PROGRESS", "off")

CHROMIUM = Path("/usr/bin/chromium")
LESSONS = Path(__file__).resolve().parent / "lessons"


def browser_available() -> bool:
    return CHROMIUM.exists() and importlib.util.find_spec("playwright") is not None


def pytest_collection_modifyitems(config, items):
    in_browser = {i.callspec.params.get("lesson") for i in items
                  if getattr(i, "originalname", "") == "test_lesson_runs_and_its_widgets_redraw"}
    if not in_browser or not browser_available():
        return
    twice = [i for i in items if Path(str(i.fspath)).parent == LESSONS
             and Path(str(i.fspath)).stem in in_browser]
    if twice:
        items[:] = [i for i in items if i not in twice]
        config.hook.pytest_deselected(items=twice)
