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

    def reveal(self, measured: float, unit: str = "", why: str = "", fmt: str = ".3g") -> None:
        """Print the guess and the measurement side by side, and how far apart they are."""
        guess = self.value
        shown = format(guess, fmt) if isinstance(guess, (int, float)) else str(guess)
        line = f"you predicted {shown}{unit}; measured {measured:{fmt}}{unit}"
        if isinstance(guess, (int, float)) and guess > 0 and measured > 0:
            factor = max(guess, measured) / min(guess, measured)
            line += " — close" if factor < 1.15 else f" — off by a factor {factor:.2g}"
        print(line + (f". {why}" if why else ""))
