"""The predict-then-run widget and the self-check quiz (ddl_lab/active.py)."""
import json
from pathlib import Path

import ipywidgets as widgets
import pytest

from ddl_lab import active
from ddl_lab.active import Question, Quiz, load_quiz, predict, seal_choice, seal_number, seal_text

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted(p.stem[3:] for p in ROOT.glob("lessons/[0-9][0-9]_*.ipynb"))   # every lesson


def choice_q():
    return Question("Which ring phase comes first?", salt="t:0",
                    choices=("share-only", "share-reduce"),
                    answer=seal_choice("t:0", "share-reduce"),
                    why=seal_text("Chunks are summed around the ring before they are shared."))


def number_q():
    return Question("Bytes each rank sends, ×S, for n = 4?", salt="t:1",
                    number=seal_number(1.5, 0.01), unit="× S",
                    why=seal_text("2(n−1)/n = 1.5"))


def all_state(w: widgets.Widget) -> str:
    """The JSON state of ``w`` and every widget under it, as the front end receives it."""
    seen, out = set(), []

    def walk(x):
        if id(x) in seen:
            return
        seen.add(id(x))
        out.append(json.dumps(x.get_state(), default=str))
        for c in getattr(x, "children", ()):
            walk(c)
    walk(w)
    return "\n".join(out)


def test_a_right_and_a_wrong_choice_are_graded():
    qz = Quiz([choice_q()])
    item = qz.items[0]
    item.control.value = "share-only"
    item.button.click()
    assert "not quite" in item.feedback.value and "summed around" in item.feedback.value
    item.control.value = "share-reduce"
    item.button.click()
    assert "right" in item.feedback.value and "not quite" not in item.feedback.value


def test_no_answer_is_wrong_not_an_error():
    item = Quiz([choice_q(), number_q()]).items[0]
    item.button.click()
    assert "not quite" in item.feedback.value


def test_a_number_is_right_within_its_tolerance_only():
    q = number_q()
    assert q.grade(1.5) and q.grade(1.509) and q.grade(1.491)
    assert not q.grade(1.52) and not q.grade(2.0) and not q.grade(0.75)
    item = Quiz([q]).items[0]
    item.control.value = 1.505
    item.button.click()
    assert "right" in item.feedback.value


def test_answers_are_not_in_the_widget_state_before_an_answer():
    qz = Quiz([choice_q(), number_q()])
    state = all_state(qz.box)
    for secret in ("summed around", "2(n−1)/n", "1.5", seal_choice("t:0", "share-reduce")):
        assert secret not in state, secret
    assert "ddl-active" in qz.box._dom_classes


@pytest.mark.parametrize("slug", LESSONS)
def test_lesson_quizzes_seal_their_answers(slug):
    qs = load_quiz(slug)
    assert 4 <= len(qs) <= 7
    text = (ROOT / "ddl_lab" / slug / "quiz.py").read_text(encoding="utf-8")
    for q in qs:
        assert q.explanation() and q.explanation() not in text
        if q.choices:
            right = [c for c in q.choices if q.grade(c)]
            assert len(right) == 1, (q.prompt, right)
        else:
            spec = json.loads(active._unseal_text(q.number))
            assert q.grade(spec["v"]) and not q.grade(spec["v"] + 2 * spec["t"] + 1e-9)
            assert active._unseal_text(q.number) not in text and "number=" + str(spec["v"]) \
                not in text.replace(" ", "")


@pytest.mark.parametrize("slug", LESSONS)
def test_the_lesson_shows_its_quiz_and_names_no_answer(slug):
    path = next(p for p in ROOT.glob("lessons/[0-9][0-9]_*.ipynb") if p.stem[3:] == slug)
    nb = json.loads(path.read_text(encoding="utf-8"))
    src = "".join("".join(c["source"]) for c in nb["cells"])
    assert f'load_quiz("{slug}")' in src
    for q in load_quiz(slug):
        assert q.explanation() not in src


def test_predict_then_reveal_shows_guess_and_measurement(capsys):
    p = predict("How many seconds?", kind="number", unit="s")
    assert p.value is None and "no guess" in p.reveal(6.1)
    p.control.value = 2.0
    line = p.reveal(6.1, why="The straggler sets the pace.")
    assert "2 s" in line and "6.1 s" in line and "factor 3" in line
    assert "straggler" in p.result.value and "6.1" in p.result.value
    c = predict("Which wins?", options=["ring", "tree"])
    assert c.value is None
    c.control.value = "ring"
    assert "ring" in c.reveal("tree") and "not this time" in c.reveal("tree")
    assert "ddl-active" in c.box._dom_classes
    assert "6.1 s" in capsys.readouterr().out


def test_predict_refuses_what_it_cannot_show():
    with pytest.raises(ValueError):
        predict("?", kind="slider")
    with pytest.raises(ValueError):
        predict("?", kind="choice")


def test_close_shared_leaves_no_shared_cluster_running():
    from ddl_lab import shared_cluster
    from ddl_lab.runtime.launch import close_shared
    c = shared_cluster(2)
    assert c.alive
    assert close_shared() >= 1
    assert not c.alive and close_shared() == 0
