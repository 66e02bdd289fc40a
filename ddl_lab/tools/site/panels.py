"""Widgets on a static page: what an executed lesson's widget outputs become on the site.

A page has no kernel, so a widget cannot run there. An experiment panel (``ddl_lab.widgets``)
becomes the output its default run produced — the figures and text of its ``Output`` area,
read from the widget state the notebook was saved with — under one line naming what the
panel lets a learner change when the notebook runs live. A prediction or a quiz
(``ddl_lab.active``) becomes its questions and choices only: its feedback lines (and the
measurement a prediction's ``reveal`` wrote into it) are left out, so no answer reaches the
HTML. Any other widget shows the HTML it holds.
"""
from __future__ import annotations

import html
import re
from typing import Any

from ddl_lab.active import CSS_CLASS

VIEW = "application/vnd.jupyter.widget-view+json"
STATE = "application/vnd.jupyter.widget-state+json"
CONTROLS = ("SliderModel", "DropdownModel", "ToggleButtonsModel", "RadioButtonsModel",
            "CheckboxModel", "TextModel", "IntTextModel", "FloatTextModel")
_TAGS = re.compile(r"<[^>]+>")


class SiteError(ValueError):
    """A notebook the site cannot show as it should: the message names the file and cell."""


def widget_state(nb: dict) -> dict[str, dict]:
    """Model id → {"model_name", "state"} of the widgets a notebook was saved with."""
    return nb.get("metadata", {}).get("widgets", {}).get(STATE, {}).get("state", {})


def _children(model: dict) -> list[str]:
    return [c.replace("IPY_MODEL_", "") for c in model["state"].get("children", [])]


def _walk(models: dict, mid: str) -> list[dict]:
    """The model ``mid`` and every model below it, depth first."""
    if mid not in models:
        return []
    found = [models[mid]]
    for child in _children(models[mid]):
        found += _walk(models, child)
    return found


def _text(value: str) -> str:
    return html.unescape(_TAGS.sub("", value or "")).strip()


def _md(text: str) -> dict:
    return {"output_type": "display_data", "metadata": {}, "data": {"text/markdown": text}}


def _control_name(model: dict) -> str | None:
    name = model["model_name"]
    if not name.endswith(CONTROLS) or name == "ButtonModel":
        return None
    return _text(model["state"].get("description", "")) or name.removesuffix("Model").lower()


def _sealed(models: dict, mid: str) -> list[dict]:
    """A prediction or quiz as text: each prompt (the first HTML of a box) and its choices."""
    lines: list[str] = []

    def visit(m: str) -> None:
        model = models.get(m)
        if model is None:
            return
        kids = _children(model)
        for i, k in enumerate(kids):
            child = models.get(k, {"model_name": "", "state": {}})
            name, state = child["model_name"], child["state"]
            if name == "HTMLModel":
                if i == 0 and model["model_name"] == "VBoxModel" and _text(state.get("value")):
                    lines.append(_text(state["value"]))         # a prompt; feedback is later
            elif name == "RadioButtonsModel":
                lines.extend(f"   - {o}" for o in state.get("_options_labels", []))
            elif name in ("FloatTextModel", "IntTextModel"):
                unit = state.get("description") or "value"
                lines.append("   - _a number" + ("" if unit == "value" else f", in {unit}") + "_")
            else:
                visit(k)
    visit(mid)
    note = ("🔒 _Answer it live: run the notebook (launch links at the top) — the answer and "
            "its explanation are sealed and not on this page._")
    body = "\n\n".join(ln if ln.startswith("   -") else f"**{ln}**" for ln in lines)
    return [_md(body.replace("\n\n   -", "\n   -") + "\n\n" + note)]


def _panel(models: dict, mid: str, where: str) -> list[dict]:
    """A panel as its default run's outputs, under a line on what it lets a learner change.
    An ``experiment`` panel (its Run button is "primary") always has a default run; a box
    whose button was never pressed gets a line naming the button."""
    tree = _walk(models, mid)
    outputs = [o for m in tree if m["model_name"] == "OutputModel"
               for o in m["state"].get("outputs", [])]
    for o in outputs:
        if o.get("output_type") == "error":
            raise SiteError(f"{where}: the experiment panel's default run failed: "
                            f"{o.get('ename')}: {o.get('evalue')}")
    buttons = [m["state"] for m in tree if m["model_name"] == "ButtonModel"]
    if not outputs:
        if any(b.get("button_style") == "primary" for b in buttons):
            raise SiteError(f"{where}: the experiment panel's saved state holds no output "
                            "(its default run's figure is missing)")
        names = " or ".join(f"**{_text(b.get('description', ''))}**" for b in buttons)
        return [_md(f"▶ _In the live notebook, {names or 'this panel'} runs this experiment; "
                    "it does not run by itself, so this page has no figure of it._")]
    controls = [c for c in map(_control_name, tree) if c]
    title = next((_text(m["state"].get("value")) for m in tree
                  if m["model_name"] == "HTMLModel" and "<b>" in m["state"].get("value", "")),
                 "")
    what = ", ".join(f"**{c}**" for c in controls) or "its settings"
    note = (f"▶ _{title + ': ' if title else ''}in the live notebook this panel lets you change "
            f"{what} and re-run it on the workers; below, the figure of its default run._")
    return [_md(note)] + outputs


def static_outputs(output: dict, models: dict, where: str) -> list[dict]:
    """The outputs a page shows for one cell output (a widget view becomes static)."""
    view = output.get("data", {}).get(VIEW)
    if view is None:
        return [output]
    mid = view["model_id"]
    if mid not in models:
        raise SiteError(f"{where}: a widget without saved state (execute the notebook with "
                        "`python -m ddl_lab execute`, or save it from JupyterLab with "
                        "widget state)")
    root = models[mid]
    if CSS_CLASS in root["state"].get("_dom_classes", []):
        return _sealed(models, mid)
    tree = _walk(models, mid)
    if any(m["model_name"] == "OutputModel" for m in tree):
        return _panel(models, mid, where)
    shown = [m["state"]["value"] for m in tree if m["model_name"] == "HTMLModel"
             and m["state"].get("value")]
    return [{"output_type": "display_data", "metadata": {},
             "data": {"text/html": "\n".join(shown)}}] if shown else []


def without_widgets(nb: dict, where: str) -> dict[str, Any]:
    """``nb`` with every widget output made static and the widget state dropped (a page
    that kept it would load the widgets' JavaScript from the internet)."""
    models = widget_state(nb)
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            cell["outputs"] = [s for o in cell.get("outputs", [])
                               for s in static_outputs(o, models, f"{where}, cell {i}")]
    nb.get("metadata", {}).pop("widgets", None)
    return nb
