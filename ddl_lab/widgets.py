"""The experiment panel every lesson uses: controls, a Run button, a figure redrawn in place."""
from __future__ import annotations

import time
from typing import Any, Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
from IPython.display import display

from ddl_lab.runtime import on_progress

__all__ = ["experiment"]


def experiment(update: Callable[..., Any], *, title: str = "", live: bool = False,
               run_label: str = "Run on the workers", **controls: widgets.ValueWidget
               ) -> None:
    """Show ``controls`` and a Run button; each run calls ``update(**values)``, which draws
    with matplotlib into one output area (cleared first, so figures never pile up).

    ``update`` runs once when the panel is shown, and errors of that first run propagate
    (so executing the notebook fails loudly); later errors are shown in the panel.
    With ``live=True`` a change of any control re-runs it too (for fast experiments).
    Workers that call ``ddl_lab.progress(done, total)`` move the panel's progress bar.
    """
    out = widgets.Output()
    bar = widgets.FloatProgress(min=0.0, max=1.0, layout=widgets.Layout(width="160px",
                                                                         visibility="hidden"))
    fractions: dict[int, float] = {}

    def advance(rank: int, done: int, total: int) -> None:
        fractions[rank] = done / max(total, 1)
        bar.value = min(fractions.values())        # the slowest rank sets the pace
        bar.description = f"{100 * bar.value:.0f}%"
        bar.layout.visibility = "visible"
    button = widgets.Button(description=run_label, button_style="primary",
                            layout=widgets.Layout(width="auto"))
    status = widgets.HTML()
    runs = [0]

    def run(_: Any = None, first: bool = False) -> None:
        runs[0] += 1              # numbered: a quick run shows it happened, even unchanged
        values = {name: c.value for name, c in controls.items()}
        button.disabled, status.value = True, "<i>running…</i>"
        t0, err = time.perf_counter(), None
        fractions.clear()
        bar.layout.visibility = "hidden"
        with out, on_progress(advance):
            out.clear_output(wait=True)
            try:
                update(**values)
                plt.show()
            except BaseException as e:      # the Output widget shows the traceback
                err = e
                raise
            finally:
                plt.close("all")
                button.disabled = False
        took = time.perf_counter() - t0
        status.value = (f"<span style='color:#b00'>run {runs[0]} failed after {took:.1f} s"
                        "</span>" if err else f"run {runs[0]} done in {took:.2f} s")
        if err is not None and first:
            raise err

    button.on_click(run)
    if live:
        for c in controls.values():
            c.observe(lambda change: run(), names="value")
    head = [widgets.HTML(f"<b>{title}</b>")] if title else []
    panel = widgets.VBox(head + [widgets.HBox(list(controls.values()) + [button, bar, status],
                                              layout=widgets.Layout(flex_flow="row wrap")),
                                 out])
    display(panel)          # returns None: a panel as a cell's value would show twice
    run(first=True)
