"""Active learning in every lesson: predict-then-run widgets and self-check quizzes.

``p = predict("Which is faster?", options=["a", "b"])`` records a guess before a headline
run; the next cell measures and calls ``p.reveal(measured, why=...)``. A lesson ends with
``quiz(load_quiz("ring_allreduce"))``: its questions live in ``ddl_lab/<slug>/quiz.py`` with
the answers sealed (a salted sha256 for a choice, a lightly encoded number and explanation),
so neither the notebook nor the widgets' state shows them before the learner answers.
The widgets hold no ``Output`` area: the browser tests' experiment panels are boxes with one,
and these carry the CSS class ``ddl-active`` besides.
"""
from __future__ import annotations

import base64
import hashlib
import html
import importlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

import ipywidgets as widgets
from IPython.display import display

__all__ = ["Prediction", "Question", "Quiz", "predict", "quiz", "load_quiz", "seal_choice",
           "seal_number", "seal_text"]

_KEY = b"ddl-lab: try before you look"
CSS_CLASS = "ddl-active"


# --------------------------------------------------------------------------- sealing

def _xor(data: bytes) -> bytes:
    return bytes(b ^ _KEY[i % len(_KEY)] for i, b in enumerate(data))


def seal_text(text: str) -> str:
    """``text`` lightly encoded (xor + base64): not readable at a glance, not secret."""
    return base64.b64encode(_xor(text.encode())).decode()


def _unseal_text(sealed: str) -> str:
    return _xor(base64.b64decode(sealed)).decode()


def _digest(salt: str, choice: str) -> str:
    return hashlib.sha256(f"{salt}\x00{choice.strip()}".encode()).hexdigest()


def seal_choice(salt: str, choice: str) -> str:
    """The salted sha256 a ``Question`` stores for its right ``choice``."""
    return _digest(salt, choice)


def seal_number(value: float, tol: float) -> str:
    """A numeric answer and its absolute tolerance, lightly encoded."""
    return seal_text(json.dumps({"v": value, "t": tol}))


# --------------------------------------------------------------------------- questions

@dataclass(frozen=True)
class Question:
    """One quiz question: ``choices`` with a sealed ``answer``, or a sealed ``number``.

    ``salt`` makes the choice hash differ between questions; ``why`` is the sealed
    explanation shown once an answer was given.
    """
    prompt: str
    why: str
    salt: str = ""
    choices: tuple[str, ...] = ()
    answer: str = ""
    number: str = ""
    unit: str = ""

    def grade(self, given: Any) -> bool:
        """Is ``given`` (a choice, or a number) right?"""
        if given is None or given == "":
            return False
        if self.choices:
            return _digest(self.salt, str(given)) == self.answer
        spec = json.loads(_unseal_text(self.number))
        return abs(float(given) - spec["v"]) <= spec["t"]

    def explanation(self) -> str:
        return _unseal_text(self.why)


def load_quiz(slug: str) -> list[Question]:
    """The questions of lesson ``slug`` (``ddl_lab/<slug>/quiz.py``'s ``QUESTIONS``)."""
    return list(importlib.import_module(f"ddl_lab.{slug}.quiz").QUESTIONS)


# --------------------------------------------------------------------------- widgets

def _box(children: list[widgets.Widget]) -> widgets.VBox:
    box = widgets.VBox(children, layout=widgets.Layout(border="1px solid #ccd", padding="6px",
                                                       margin="4px 0"))
    box.add_class(CSS_CLASS)
    return box


def _control(options: Sequence[str] | None, unit: str) -> widgets.ValueWidget:
    if options:
        return widgets.RadioButtons(options=list(options), value=None,
                                    layout=widgets.Layout(width="auto"))
    return widgets.FloatText(value=0.0, description=unit or "value",
                             layout=widgets.Layout(width="220px"))


def _fmt(value: Any) -> str:
    return format(value, ".3g") if isinstance(value, (int, float)) else str(value)


class Prediction:
    """A learner's guess, shown before a run and beside the measurement after it."""

    def __init__(self, question: str, options: Sequence[str] | None = None, unit: str = ""):
        self.question, self.unit = question, unit
        self.control = _control(options, unit)
        self.touched = False            # a number left at its initial 0 is no guess
        self.control.observe(self._touch, names="value")
        self.result = widgets.HTML()
        self.box = _box([widgets.HTML(f"<b>Predict first:</b> {html.escape(question)}"),
                         self.control, self.result])

    def _touch(self, _: Any) -> None:
        self.touched = True

    @property
    def value(self) -> Any:
        """The guess; None while the learner has not given one."""
        return self.control.value if self.touched else None

    def reveal(self, measured: Any, why: str = "") -> str:
        """Show the guess beside ``measured`` and one sentence on why; return the line."""
        guess, unit = self.value, (f" {self.unit}" if self.unit else "")
        shown = "no guess" if guess is None else _fmt(guess) + unit
        line = f"you predicted {shown}; measured {_fmt(measured)}{unit}"
        if isinstance(guess, (int, float)) and isinstance(measured, (int, float)) \
                and guess > 0 and measured > 0:
            factor = max(guess, measured) / min(guess, measured)
            line += " — close" if factor < 1.25 else f" — off by a factor {factor:.2g}"
        elif guess is not None and not isinstance(guess, (int, float)):
            line += " — right" if str(guess) == str(measured) else " — not this time"
        self.result.value = f"<b>{html.escape(line)}.</b> {html.escape(why)}"
        print(line + (f". {why}" if why else ""))
        return line


def predict(question: str, kind: str = "choice", options: Sequence[str] | None = None,
            unit: str = "") -> Prediction:
    """Show a prediction widget (``kind`` "choice" with ``options``, or "number")."""
    if kind not in ("choice", "number"):
        raise ValueError(f"kind is 'choice' or 'number', not {kind!r}")
    if kind == "choice" and not options:
        raise ValueError("a 'choice' prediction needs options")
    p = Prediction(question, options if kind == "choice" else None, unit)
    display(p.box)
    return p


class _Item:
    """One question's control, Check button and feedback line."""

    def __init__(self, n: int, q: Question):
        self.q = q
        self.control = _control(q.choices or None, q.unit)
        self.button = widgets.Button(description="Check", layout=widgets.Layout(width="auto"))
        self.feedback = widgets.HTML()
        self.button.on_click(self.check)
        self.box = widgets.VBox([widgets.HTML(f"<b>{n}.</b> {html.escape(q.prompt)}"),
                                 widgets.HBox([self.control, self.button]), self.feedback])

    def check(self, _: Any = None) -> bool:
        right = self.q.grade(self.control.value)
        why = html.escape(self.q.explanation())
        self.feedback.value = (f"<span style='color:#070'>✔ right.</span> {why}" if right else
                               f"<span style='color:#b00'>✘ not quite.</span> {why}")
        return right


class Quiz:
    """The widgets of a quiz; ``items[i].control`` / ``.button`` drive question i."""

    def __init__(self, questions: Sequence[Question]):
        self.items = [_Item(i + 1, q) for i, q in enumerate(questions)]
        self.box = _box([widgets.HTML("<b>Self-check</b> — answer, then press Check.")]
                        + [it.box for it in self.items])


def quiz(questions: Sequence[Question]) -> None:
    """Show a self-check quiz, graded on the spot (``Quiz`` builds it without showing it)."""
    display(Quiz(questions).box)
