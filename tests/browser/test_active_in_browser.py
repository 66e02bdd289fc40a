"""Predict, then run, and the self-check quiz, as a learner meets them in JupyterLab:
a guess picked in a lesson's prediction widget is shown beside the measurement once the
reveal cell has run; a wrong quiz answer shows why, a right one is marked right.

Lesson 01 is used because its first prediction needs no workers: the cells up to its
reveal run in seconds.
"""
import json
import re

import pytest

from ddl_lab.active import load_quiz
from lab_harness import NotebookPage, wait_until

pytestmark = pytest.mark.browser

LESSON, SLUG = "01_gradient_descent", "gradient_descent"
FEEDBACK_S = 30


def code_cells(nb: NotebookPage) -> list[tuple[int, str]]:
    """(index among all cells, source) of each code cell of the open notebook."""
    cells = json.loads((nb.lab.root / nb.path).read_text())["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "code"]


def first_choice_prediction(cells: list[tuple[int, str]]) -> tuple[int, int, str]:
    """(the cell that shows the first choice prediction, the cell that reveals it, its name)."""
    for i, src in cells:
        m = re.search(r"^(\w+) = predict\(", src, re.M)
        if m and "options=" in src:
            name = m.group(1)
            reveal = next(j for j, s in cells if j > i and f"{name}.reveal(" in s)
            return i, reveal, name
    raise LookupError(f"{LESSON} shows no choice prediction")


def widget_text(nb: NotebookPage, cell: int) -> str:
    box = nb.cells.nth(cell).locator(".ddl-active")
    return box.first.text_content() or "" if box.count() else ""


def test_a_prediction_is_shown_beside_the_measurement_and_the_quiz_grades(open_notebook):
    nb = open_notebook(f"lessons/{LESSON}.ipynb")
    cells = code_cells(nb)
    shown, reveal, name = first_choice_prediction(cells)
    for i, _ in cells:
        if i <= shown:
            nb.run_cell(i)
    box = nb.cells.nth(shown).locator(".ddl-active")
    options = box.locator(".widget-radio-box label").all_text_contents()
    guess = options[0].strip()
    box.get_by_role("radio", name=guess, exact=True).check()

    for i, _ in cells:
        if shown < i <= reveal:
            nb.run_cell(i)
    nb.assert_no_errors(f"after {name} was answered and revealed")
    line = nb.output_text(reveal)
    assert re.search(rf"you predicted {re.escape(guess)}; measured \S", line), line
    assert f"you predicted {guess}; measured" in widget_text(nb, shown), (
        "the prediction widget does not show the guess beside the measurement")
    nb.screenshot("active-prediction", focus=nb.cells.nth(shown))

    q = next(q for q in load_quiz(SLUG) if q.choices)
    right = next(c for c in q.choices if q.grade(c))
    wrong = next(c for c in q.choices if not q.grade(c))
    at = next(i for i, s in cells if f'load_quiz("{SLUG}")' in s)
    nb.run_cell(at)
    item = nb.cells.nth(at).locator(".ddl-active .widget-vbox").filter(has_text=q.prompt)
    feedback = item.locator(".widget-html-content").last
    item.get_by_role("radio", name=wrong, exact=True).check()
    item.locator(".widget-button").click()
    why = q.explanation()[:40]
    wait_until(lambda: "not quite" in (feedback.text_content() or ""), FEEDBACK_S,
               f"a wrong answer ({wrong!r}) to be marked wrong")
    assert why in (feedback.text_content() or ""), "a wrong answer does not say why"

    item.get_by_role("radio", name=right, exact=True).check()
    item.locator(".widget-button").click()
    wait_until(lambda: "right" in (feedback.text_content() or "")
               and "not quite" not in (feedback.text_content() or ""), FEEDBACK_S,
               f"the right answer ({right!r}) to be marked right")
    nb.assert_no_errors("after the quiz was answered")
    nb.screenshot("active-quiz", focus=item)
