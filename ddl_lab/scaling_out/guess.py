"""Predict, then run: a learner's guess recorded before a headline measurement (lesson 10)."""
from __future__ import annotations

import ipywidgets as widgets
from IPython.display import display

__all__ = ["Guess"]


class Guess:
    """Show a question and a control; ``reveal`` prints the guess beside the measurement.

    ``Guess("How many MB …?", widgets.FloatSlider(…))`` in one cell; the next cell runs the
    experiment and calls ``guess.reveal(measured, unit, why)``.
    """

    def __init__(self, question: str, control: widgets.ValueWidget):
        self.question, self.control = question, control
        display(widgets.VBox([widgets.HTML(f"<b>Predict first:</b> {question}"), control]))

    @property
    def value(self):
        return self.control.value

    def reveal(self, measured: float, unit: str = "", why: str = "",
               fmt: str = ".3g") -> str:
        """Print (and return) the guess and the measurement side by side."""
        guess = self.value
        shown = format(guess, fmt) if isinstance(guess, (int, float)) else str(guess)
        line = f"you predicted {shown}{unit}; measured {measured:{fmt}}{unit}"
        if isinstance(guess, (int, float)) and guess > 0 and measured > 0:
            line += f" (off by a factor {max(guess, measured) / min(guess, measured):.2g})"
        text = line + (f". {why}" if why else "")
        print(text)
        return text
