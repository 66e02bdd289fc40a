"""Drive JupyterLab in headless Chromium the way a learner does.

``Lab`` serves a temporary copy of the course on 127.0.0.1; ``NotebookPage`` opens one
notebook in a browser page, runs it from the Run menu, reads what the page shows (errors,
widgets, figures) and moves the controls of its experiment panels.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ddl_lab.runtime.patience import patience

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts" / "browser"
EXECUTED = ROOT / "build" / "lessons"     # the lessons as they ran, which the website is built from
LESSON_TEST = "test_lesson_runs_and_its_widgets_redraw"   # one lesson's run, in the browser
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
COURSE_DIRS = ("lessons", "exercises", "solutions")

SERVER_START_S = 90      # jupyter lab answering /api/status
KERNEL_START_S = 90      # the notebook's kernel idle after the page opened
# The two waits that an experiment's own time fills, stretched like every default wait on a
# busy machine (DDL_LAB_PATIENCE; 4 in the suite: two pytest workers and a browser, 2 cores)
RUN_ALL_S = 120 * patience()      # a whole lesson: about a minute alone, 2.5 min in the suite
INTERACTION_S = 75 * patience()   # one re-run of an experiment after a control moved
POLL_S = 0.25
CLOSES = "close_shared()"     # what a lesson's last cell calls: no worker is left running

# What a learner recognises as an error in an output: IPython's traceback header, or a line
# that starts with an exception's name ("CheckFailed: …", "KeyboardInterrupt").
_ERROR_JS = r"""
(root) => {
  const looksLikeError = (text) =>
    /Traceback \(most recent call last\)/.test(text) ||
    /^\s*\w*(Error|Exception|Interrupt|Failed|Timeout|Exit)\b/m.test(text);
  const found = [];
  for (const el of root.querySelectorAll(
         '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')) {
    const text = el.textContent;
    if (!looksLikeError(text)) continue;
    const cell = el.closest('.jp-Cell');
    const cells = [...root.querySelectorAll('.jp-Notebook .jp-Cell')];
    found.push({cell: cells.indexOf(cell),
                inWidget: el.closest('.widget-output') !== null,
                text: text});
  }
  for (const el of root.querySelectorAll('.widget-html-content')) {
    if (/^(run \d+ )?failed after/.test(el.textContent.trim())) {
      const cells = [...root.querySelectorAll('.jp-Notebook .jp-Cell')];
      found.push({cell: cells.indexOf(el.closest('.jp-Cell')), inWidget: true,
                  text: 'experiment panel: ' + el.textContent.trim()});
    }
  }
  return found;
}
"""

# Widgets shown twice in one cell: the same panel, once displayed and once as the cell's value.
_TWICE_JS = r"""
(root) => {
  const twice = [];
  [...root.querySelectorAll('.jp-Notebook .jp-Cell')].forEach((cell, i) => {
    const seen = new Set();
    for (const box of cell.querySelectorAll('.jp-OutputArea-output > .jupyter-widgets')) {
      if (box.parentElement.closest('.widget-output')) continue;
      const key = box.textContent;
      if (seen.has(key)) twice.push({cell: i, text: key.slice(0, 80)});
      seen.add(key);
    }
  });
  return twice;
}
"""

_SNAPSHOT_JS = r"""
(el) => ({images: [...el.querySelectorAll('img')].map(i => i.getAttribute('src') || ''),
          text: [...el.querySelectorAll('.jp-OutputArea-output')]
                  .filter(o => !o.querySelector('img')).map(o => o.textContent).join('\n')})
"""

# Dismiss any dialog and close every document of the main area without asking (a notebook
# that ran is "dirty"); its kernel keeps running (Lab.shutdown_kernels stops it).
_CLOSE_ALL_JS = r"""
() => {
  document.querySelectorAll('.jp-Dialog .jp-mod-reject').forEach(b => b.click());
  for (const w of [...window.jupyterapp.shell.widgets('main')]) {
    if (w.context) w.context.model.dirty = false;
    w.dispose();
  }
}
"""
# ... then open the notebook at ``path`` with the notebook factory, as double-clicking it does.
_REOPEN_JS = "async (path) => { (" + _CLOSE_ALL_JS + ")(); await window.jupyterapp.commands" \
             ".execute('docmanager:open', {path: path, factory: 'Notebook'}); }"


CONTROLS = ".widget-slider, .widget-dropdown, .widget-toggle-buttons, .widget-checkbox, " \
           ".widget-radio, .widget-button"


class PageError(AssertionError):
    """The page shows the learner something wrong: an error, a dead widget, a stale figure."""


@dataclass(frozen=True)
class Shown:
    """An error output as the page shows it."""
    cell: int
    in_widget: bool
    text: str

    def __str__(self) -> str:
        where = f"cell {self.cell}" + (" (inside a widget)" if self.in_widget else "")
        lines = [ln for ln in self.text.strip().splitlines() if ln.strip()]
        tail = "\n    ".join(lines[-6:])
        return f"{where}:\n    {tail}"


@dataclass(frozen=True)
class Snapshot:
    """What an output area shows: its images (hashed) and its text."""
    images: tuple[str, ...]
    text: str

    @classmethod
    def of(cls, raw: dict) -> "Snapshot":
        return cls(tuple(hashlib.sha1(s.encode()).hexdigest()[:12] for s in raw["images"]),
                   raw["text"])


@dataclass(frozen=True)
class Control:
    """Which control of a lesson to move: its description, in the ``panel``-th panel."""
    label: str | None = None          # None: the panel's first control
    panel: int = 0


# --------------------------------------------------------------------------- server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_course(dest: Path) -> Path:
    """A temporary copy of the course's notebooks, so no test writes into the repository."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in COURSE_DIRS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return dest


class Lab:
    """``jupyter lab`` from this interpreter's environment, on 127.0.0.1 with a random port
    and token, serving ``root``; its settings and workspaces live under ``state``."""

    def __init__(self, root: Path, state: Path):
        self.root, self.state = root, state
        self.token, self.port = secrets.token_hex(16), free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        notify = state / "settings" / "@jupyterlab" / "apputils-extension"
        notify.mkdir(parents=True, exist_ok=True)
        (notify / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        widgets = state / "settings" / "@jupyter-widgets" / "jupyterlab-manager"
        widgets.mkdir(parents=True, exist_ok=True)   # a saved lesson keeps its panels' figures
        (widgets / "plugin.jupyterlab-settings").write_text(json.dumps({"saveState": True}))
        env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(state / "settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(state / "workspaces"),
                   PYTHONUNBUFFERED="1")
        env.pop("JUPYTER_TOKEN", None)
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
               "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
               "--LabApp.expose_app_in_browser=True"]    # window.jupyterapp: NotebookPage.reopen
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log = state / "jupyter-lab.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=root, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {self.proc.returncode}:\n"
                                   f"{self.log_tail()}")
            try:
                self.api("GET", "api/status")
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(f"jupyter lab did not answer within {SERVER_START_S} s:\n"
                           f"{self.log_tail()}")

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def api(self, method: str, path: str) -> Any:
        req = urllib.request.Request(f"{self.base}/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def url(self, path: str) -> str:
        """The notebook at ``path`` (relative to root) in a fresh workspace of its own."""
        return (f"{self.base}/lab/workspaces/t{uuid.uuid4().hex[:10]}/tree/{path}"
                f"?reset&token={self.token}")

    def kernel_state(self, path: str) -> str | None:
        """The server's view of the kernel of the notebook at ``path`` ('idle', 'busy', ...)."""
        for s in self.api("GET", "api/sessions"):
            if s.get("path") == path and s.get("kernel"):
                return s["kernel"].get("execution_state")
        return None

    def shutdown_kernels(self) -> None:
        """Stop every kernel (and so its workers) the server runs."""
        for s in self.api("GET", "api/sessions"):
            self.api("DELETE", f"api/sessions/{s['id']}")
        for k in self.api("GET", "api/kernels"):
            self.api("DELETE", f"api/kernels/{k['id']}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.shutdown_kernels()
            except OSError:
                pass
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


# --------------------------------------------------------------------------- one page

def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it returns something true; PageError after ``timeout`` s.
    The polls start POLL_S apart and spread out to 1 s over a long wait (a lesson's Run
    All): each poll costs the test, the driver and the page a round trip."""
    deadline, pause = time.monotonic() + timeout, POLL_S
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise PageError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(pause)
        pause = min(1.0, pause * 1.25)


class NotebookPage:
    """One notebook open in JupyterLab in a browser page, its kernel started."""

    def __init__(self, page: "Page", lab: Lab, path: str, reopen: bool = False):
        """Open ``path`` in ``page``: loading JupyterLab anew, or (``reopen``) in the
        JupyterLab the page already shows, whose open documents are closed first (unsaved
        changes discarded; their kernels are the caller's to stop): a third of the CPU of a
        page load, and the same notebook, cells and kernel a learner gets."""
        self.page, self.lab, self.path = page, lab, path
        n_cells = len(json.loads((lab.root / path).read_text())["cells"])
        if reopen:
            page.evaluate(_REOPEN_JS, path)
        else:
            page.goto(lab.url(path), timeout=60_000)
        wait_until(lambda: self.cells.count() == n_cells and self.kernel_status() == "idle"
                   and lab.kernel_state(path) == "idle", KERNEL_START_S,
                   f"{path} to show its {n_cells} cells and its kernel to be ready")

    def close_all(self) -> None:
        """Close the notebook (and any other document) in this page, leaving JupyterLab open."""
        self.page.evaluate(_CLOSE_ALL_JS)

    # -- what the page shows
    @property
    def cells(self) -> "Locator":
        return self.page.locator(".jp-Notebook .jp-Cell")

    def kernel_status(self) -> str | None:
        """The notebook toolbar's kernel indicator ('idle', 'busy', 'starting', ...)."""
        ind = self.page.locator(".jp-NotebookPanel .jp-Notebook-ExecutionIndicator")
        return ind.first.get_attribute("data-status") if ind.count() else None

    def prompts(self) -> list[str]:
        """The execution prompts of the code cells: '[3]:', '[*]:' or '[ ]:'."""
        return self.page.eval_on_selector_all(
            ".jp-Notebook .jp-CodeCell .jp-InputArea-prompt",
            "es => es.map(e => e.textContent.trim())")

    def errors(self) -> list[Shown]:
        """Every error the page shows, in cells and inside widgets."""
        raw = self.page.locator(".jp-NotebookPanel").first.evaluate(_ERROR_JS)
        return [Shown(r["cell"], r["inWidget"], r["text"]) for r in raw]

    def assert_no_errors(self, when: str) -> None:
        errs = self.errors()
        if errs:
            raise PageError(f"{self.path}: {when}, the page shows {len(errs)} error(s):\n"
                            + "\n".join(map(str, errs)))

    def assert_widgets_shown_once(self) -> None:
        twice = self.page.locator(".jp-NotebookPanel").first.evaluate(_TWICE_JS)
        if twice:
            where = "; ".join(f"cell {t['cell']} ({t['text'].strip()[:50]!r}…)" for t in twice)
            raise PageError(f"{self.path}: the same widget is shown twice in {where}: a call "
                            "that displays a panel and returns it is the cell's last "
                            "expression, so Jupyter shows its value again (end it with ';')")

    def closing_cell(self) -> int | None:
        """The index of the notebook's last cell where it shuts the shared clusters down (as
        lessons end: ``close_shared()``); None where the notebook ends otherwise."""
        cells = json.loads((self.lab.root / self.path).read_text())["cells"]
        last = max(i for i, c in enumerate(cells) if c["cell_type"] == "code")
        return last if CLOSES in "".join(cells[last]["source"]) else None

    def output_text(self, cell: int) -> str:
        return self.cells.nth(cell).locator(".jp-OutputArea").first.text_content() or ""

    def image_count(self) -> int:
        return self.page.locator(".jp-Notebook .jp-OutputArea-output img").count()

    def save_copy(self, dest: Path) -> Path:
        """Save the notebook as the page shows it (outputs, and the widgets' state: the
        harness's JupyterLab saves it) and copy it into ``dest``; return the copy."""
        file, copy = self.lab.root / self.path, dest / (self.lab.root / self.path).name
        before = file.stat().st_mtime_ns
        self.menu("File", "Save Notebook")
        dest.mkdir(parents=True, exist_ok=True)

        def copied_whole() -> bool:
            # Jupyter writes the file in place: a copy taken as the write starts is empty.
            if file.stat().st_mtime_ns == before:
                return False
            shutil.copy(file, copy)
            try:
                json.loads(copy.read_text())
            except ValueError:
                return False
            return True
        wait_until(copied_whole, 30, f"{self.path} to be saved whole")
        return copy

    def screenshot(self, name: str, focus: "Locator | None" = None) -> Path:
        """Save the page as artifacts/browser/<name>.png, ``focus`` scrolled into view."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        if focus is not None:
            focus.evaluate("e => e.scrollIntoView({block: 'start'})")
        self.page.evaluate("""async () => {
            await Promise.all([...document.images].map(i => i.decode().catch(() => null)));
            await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r))); }""")
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    # -- running
    def menu(self, top: str, item: str) -> None:
        """Click ``top`` in the menu bar, then ``item`` in its menu."""
        self.page.locator(f'.lm-MenuBar-itemLabel:text-is("{top}")').click()
        self.page.locator(f'.lm-Menu-itemLabel:text-is("{item}")').click()

    def wait_idle(self, timeout: float, what: str) -> None:
        """Wait until no cell is queued or running and the kernel indicator says idle."""
        def settled() -> bool:
            return self.kernel_status() == "idle" and not any("*" in p for p in self.prompts())

        def settled_twice() -> bool:          # idle, and still idle half a second later
            if not settled():
                return False
            time.sleep(0.5)
            return settled()
        wait_until(settled_twice, timeout, what)

    def run_all(self, timeout: float = RUN_ALL_S, above: int | None = None) -> float:
        """Run > Run All Cells (with ``above``: every cell above that one, Run > Run All
        Above Selected Cell), wait for the kernel; return the seconds it took."""
        t0 = time.monotonic()
        if above is None:
            self.menu("Run", "Run All Cells")
        else:
            self.cells.nth(above).locator(".jp-InputPrompt").click()
            self.menu("Run", "Run All Above Selected Cell")
        wait_until(lambda: any(re.search(r"\d|\*", p) for p in self.prompts()), 30,
                   "Run All Cells to start")
        self.wait_idle(timeout, f"Run All Cells of {self.path} to finish")
        return time.monotonic() - t0

    def run_cell(self, index: int, timeout: float = 120) -> None:
        """Click into cell ``index`` and press Shift+Enter; wait until it has run."""
        self.cells.nth(index).locator(".jp-InputArea-editor").click()
        self.page.keyboard.press("Shift+Enter")
        self.wait_idle(timeout, f"cell {index} of {self.path} to run")

    def set_source(self, index: int, source: str) -> None:
        """Replace the code of cell ``index`` as a learner does: select all, type."""
        self.cells.nth(index).locator(".jp-InputArea-editor .cm-content").click()
        self.page.keyboard.press("Control+a")
        self.page.keyboard.insert_text(source)

    def interrupt(self) -> None:
        self.menu("Kernel", "Interrupt Kernel")

    # -- widgets
    def panels(self) -> "Locator":
        """Experiment panels: boxes holding an output area and controls (outermost first)."""
        return (self.page.locator(".jp-Notebook .widget-vbox")
                .filter(has=self.page.locator(".widget-output"))
                .filter(has=self.page.locator(CONTROLS)))

    def snapshot(self, panel: "Locator") -> Snapshot:
        return Snapshot.of(panel.locator(".widget-output").first.evaluate(_SNAPSHOT_JS))

    def panel_status(self, panel: "Locator") -> str:
        """The panel's status line(s): 'running…', 'run 2 done in 0.52 s', 'run 3 failed after …'."""
        return " | ".join(panel.locator(".widget-html-content").evaluate_all(
            "es => es.map(e => e.textContent)"))

    def panel_started(self, panel: "Locator", status_before: str) -> bool:
        """Has the panel itself begun a run? (Not the kernel's busy light: that also flickers
        while the kernel takes a control's new value, which a loaded machine lets us see.)"""
        status = self.panel_status(panel)
        return "running" in status or status != status_before

    def panel_busy(self, panel: "Locator") -> bool:
        return "running" in self.panel_status(panel) or self.kernel_status() != "idle"

    def find_control(self, panel: "Locator", label: str | None) -> "Locator":
        """The panel's control described ``label``; its first control for None."""
        controls = panel.locator(CONTROLS)
        if label is None:
            return controls.first
        names = controls.evaluate_all(
            "cs => cs.map(c => { const ls = [...c.querySelectorAll('.widget-label, "
            ".widget-label-basic')].map(l => l.textContent.replace(/[\\u200b\\s]+/g, ' ')"
            ".trim()).filter(t => t); "
            "return ls.length ? ls[0] : c.textContent.trim(); })")
        if label not in names:
            raise PageError(f"{self.path}: no control labelled {label!r} in the panel; "
                            f"it has {names}")
        return controls.nth(names.index(label))

    def change(self, control: "Locator") -> str:
        """Move ``control`` to another value as a learner would; say what was done."""
        kind = control.get_attribute("class") or ""
        before = self.control_value(control)
        if "widget-slider" in kind:
            handle = control.locator(".noUi-handle").first
            at_max = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
            handle.focus()
            self.page.keyboard.press("ArrowLeft" if at_max else "ArrowRight")
        elif "widget-dropdown" in kind:
            select = control.locator("select")
            options = select.locator("option").all_text_contents()
            now = select.evaluate("s => s.selectedIndex")
            select.select_option(label=options[(now + 1) % len(options)])
        elif "widget-toggle-buttons" in kind:
            control.locator(".widget-toggle-button:not(.mod-active)").first.click()
        elif "widget-radio" in kind:
            control.locator(".widget-radio-box input:not(:checked)").first.click()
        elif "widget-checkbox" in kind:
            control.locator("input").click()
        else:
            control.click()
            return f"button {(control.text_content() or '').strip()!r} clicked"

        def moved() -> tuple[str] | None:
            value = self.control_value(control)
            return (value,) if value != before else None
        (after,) = wait_until(moved, 10, f"the control showing {before!r} to move")
        name = next(k for k in ("slider", "dropdown", "toggle-buttons", "radio", "checkbox")
                    if f"widget-{k}" in kind.split())
        return f"{name} {before} → {after}"

    def control_value(self, control: "Locator") -> str:
        """The value a control shows."""
        return control.evaluate("""c => {
            const q = (s) => c.querySelector(s);
            if (c.classList.contains('widget-slider')) return q('.widget-readout').textContent;
            if (c.classList.contains('widget-dropdown'))
                return q('select').selectedOptions[0]?.textContent ?? '';
            if (c.classList.contains('widget-toggle-buttons'))
                return q('.mod-active')?.textContent ?? '';
            if (c.classList.contains('widget-radio'))
                return q('input:checked')?.parentElement.textContent ?? '';
            if (c.classList.contains('widget-checkbox')) return String(q('input').checked);
            return c.textContent; }""")

    def run_button(self, panel: "Locator") -> "Locator | None":
        buttons = panel.locator(".widget-button.mod-primary")
        return buttons.last if buttons.count() else None

    def wait_for_run(self, panel: "Locator", before: Snapshot, status_before: str,
                     timeout: float = INTERACTION_S) -> Snapshot:
        """Wait until the run a control started is over: the panel's output differs from
        ``before``, or a run was seen and the page stayed quiet for 2 s. Returns the output."""
        start = time.monotonic()
        ran, quiet_since = False, None
        while time.monotonic() - start < timeout:
            busy = self.panel_busy(panel)
            ran = ran or self.panel_started(panel, status_before)
            now = time.monotonic()
            quiet_since = None if busy else (quiet_since or now)
            snap = self.snapshot(panel)
            quiet = 0.0 if quiet_since is None else now - quiet_since
            if (snap != before and quiet >= 0.5) or (ran and quiet >= 2):
                return snap
            time.sleep(POLL_S)
        raise PageError(f"{self.path}: no new output within {timeout:.0f} s of changing "
                        "a control" + ("" if ran else " (the experiment never ran)"))


@dataclass
class Interaction:
    """What happened when a control of a lesson's panel was moved."""
    action: str
    before: Snapshot
    after: Snapshot
    panel: "Locator"


def exercise_panel(nb: NotebookPage, spec: Control = Control()) -> Interaction:
    """Move one control of an experiment panel (and press its Run button unless the panel
    re-ran by itself), then prove the page changed the way a learner expects: new output,
    the same number of figures (updated in place, none piled up), and no error shown."""
    panels = nb.panels()
    n = panels.count()
    if n <= spec.panel:
        raise PageError(f"{nb.path}: expected an experiment panel #{spec.panel}, the page "
                        f"shows {n} (did the widgets render? is jupyterlab_widgets installed?)")
    panel = panels.nth(spec.panel)
    panel.scroll_into_view_if_needed(timeout=10_000)
    before, images_before = nb.snapshot(panel), nb.image_count()
    status_before = nb.panel_status(panel)
    control = nb.find_control(panel, spec.label)
    action = nb.change(control)
    button = nb.run_button(panel)
    if button is not None and "mod-primary" not in (control.get_attribute("class") or ""):
        ran_by_itself = _started(nb, panel, before, status_before, 2.0)
        if not ran_by_itself:
            button.click(timeout=INTERACTION_S * 1000)
            action += ", Run pressed"
    after = nb.wait_for_run(panel, before, status_before)
    nb.assert_no_errors(f"after {action} in panel #{spec.panel}")
    if after == before:
        raise PageError(f"{nb.path}: after {action}, the experiment ran but its output did "
                        "not change (same figure and text as before)")
    if len(after.images) != len(before.images) or nb.image_count() != images_before:
        raise PageError(f"{nb.path}: after {action}, the panel shows {len(after.images)} "
                        f"figure(s) (before: {len(before.images)}) and the notebook "
                        f"{nb.image_count()} (before: {images_before}): figures must be "
                        "redrawn in place, not piled up")
    return Interaction(action, before, after, panel)


def check_lesson(nb: NotebookPage, spec: Control = Control(), keep: Path | None = None,
                 more: tuple[Control, ...] = ()) -> tuple[float, list[Interaction]]:
    """What a learner does with a lesson: run it, see no error, every cell run, each widget
    shown once; then move a control (``spec``, then each of ``more``) and see the experiment
    redraw in place; last, the lesson's closing cell (``close_shared()``) shuts down the
    clusters the panels ran on. A lesson that ends so is run up to that cell first (Run All
    Above Selected Cell), as a learner who tries the panels before leaving does: the panels
    re-run on the lesson's warm workers, not on fresh ones that import the lesson's modules
    again. With ``keep``, the lesson as it ran (its panels at their default run, the closing
    cell's output included) is saved there: the website is built from it (tests/site).
    Returns the seconds the run took and what each control did."""
    closing = nb.closing_cell()
    took = nb.run_all(above=closing)
    nb.assert_no_errors("after Run All Cells" if closing is None
                        else "after Run All Above Selected Cell (the closing cell)")
    prompts = nb.prompts()[:-1] if closing is not None else nb.prompts()
    not_run = [i for i, p in enumerate(prompts) if not re.fullmatch(r"\[\d+\]:", p)]
    if not_run:
        raise PageError(f"{nb.path}: code cells {not_run} did not run: {nb.prompts()}")
    nb.assert_widgets_shown_once()
    kept = nb.save_copy(keep) if keep is not None else None
    changes = [exercise_panel(nb, c) for c in (spec, *more)]
    if closing is not None:
        nb.run_cell(closing)
        nb.assert_no_errors("after the closing cell")
        said = nb.output_text(closing)
        if not re.search(r"shut down \d+ shared cluster", said):
            raise PageError(f"{nb.path}: the closing cell, run after the panels, says "
                            f"{said.strip()!r}, not how many shared clusters it shut down")
        if kept is not None:
            _keep_output(nb, kept, closing)
    return took, changes


def _keep_output(nb: NotebookPage, kept: Path, cell: int) -> None:
    """Put cell ``cell`` as the page now shows it (saved again) into the copy ``kept``."""
    with tempfile.TemporaryDirectory(prefix="ddl-lab-closing-") as tmp:
        with_it = json.loads(nb.save_copy(Path(tmp)).read_text())["cells"][cell]
    saved = json.loads(kept.read_text())
    for key in ("outputs", "execution_count"):
        saved["cells"][cell][key] = with_it[key]
    kept.write_text(json.dumps(saved, indent=1, ensure_ascii=False))


def _started(nb: NotebookPage, panel: "Locator", before: Snapshot, status_before: str,
             within: float) -> bool:
    """Did a live panel start a run by itself within ``within`` seconds?"""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if nb.panel_started(panel, status_before) or nb.snapshot(panel) != before:
            return True
        time.sleep(POLL_S)
    return False
