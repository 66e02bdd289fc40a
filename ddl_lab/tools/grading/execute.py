"""Running one submission for ``ddl-lab grade``: a fresh kernel in a sandbox, limits.

The grader never runs learner code itself. For each submission it starts this module as a
runner process (``python -m ddl_lab.tools.grading.execute WORK …``) in the OS sandbox
(``sandbox.py``); the runner starts a fresh kernel (nbclient) in WORK, the run's private
folder, and runs the grading notebook cell by cell with a per-cell limit. It writes what
happened to ``WORK/events.jsonl``, one line as each cell starts and one as it ends, so what
was reached survives a runner killed at the per-notebook limit. A pristine check cell only
keeps its arguments and writes a manifest (``WORK/manifest-<k>.json``, ``handover.py``);
after the last cell the kernel serves the judge (``judge.py``, outside the sandbox), which
reaches the verdicts by calling the learner's functions through it.

When a run ends (done, crashed or killed at its limit) the grader kills the sandbox — its
PID namespace takes every process the learner started with it — then every process that
still carries this run's token in its environment (where there is no sandbox).
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import psutil

from .pristine import cell_line, check_index

if TYPE_CHECKING:
    from .sandbox import Box

TOKEN_ENV = "DDL_LAB_GRADE_JOB"     # every process of one run carries this token
MAX_OUTPUT = 1 << 20                # bytes of output kept per notebook; the rest is dropped
TRUNCATED = "\n[ddl-lab grade: output truncated here, over {} bytes]\n"
PROBE = 10                          # seconds an interrupted kernel has to answer again


_RUNNING: dict[int, tuple[subprocess.Popen, Path, str]] = {}     # runner pid -> run


@dataclass
class Run:
    """What the runner reported: the events, the kernel's pid, whether it was cut off."""
    events: list[dict]
    kernel_pid: int | None
    killed_at_limit: bool
    seconds: float
    log_tail: str


@dataclass
class Running:
    """A submission's run under way: the runner (in its sandbox), its folder and token."""
    proc: subprocess.Popen
    work: Path
    token: str
    t0: float
    deadline: float
    link: str


def start_run(nb: nbformat.NotebookNode, work: Path, cell_timeout: float, timeout: float,
              box: "Box | None", key: str) -> Running:
    """Start running the grading notebook ``nb`` in ``work`` (a private folder): in the
    sandbox ``box``, or as it is where the instructor passed ``--trust-learner-code``
    (``box`` None). After the last cell the kernel serves the judge on ``work/link.sock``
    (``handover.serve``) until the judge says bye."""
    from . import sandbox
    nbformat.write(nb, work / "graded.ipynb")
    token, link = secrets.token_hex(8), str(work / "link.sock")
    argv = [sys.executable, "-m", "ddl_lab.tools.grading.execute", str(work), str(cell_timeout),
            str(timeout), link, key]
    if box is None:
        env = {**os.environ, TOKEN_ENV: token, "DDL_LAB_PROGRESS": "off", "MPLBACKEND": "Agg",
               "PYTHONDONTWRITEBYTECODE": "1"}
        cmd, limit = argv, None
    else:
        env = sandbox.environment(work, TOKEN_ENV, token)
        cmd, limit = sandbox.command(box, argv, env), sandbox.limits(box)
    t0 = time.perf_counter()
    with open(work / "runner.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=limit)
    _RUNNING[proc.pid] = (proc, work, token)
    return Running(proc, work, token, t0, t0 + timeout, link)


def wait_serving(run: Running) -> bool:
    """Wait until the kernel serves the judge (True), or the runner ended or ran out of
    time (False)."""
    ready = Path(run.link + ".ready")
    while time.perf_counter() < run.deadline:
        if ready.exists():
            return True
        if run.proc.poll() is not None:
            return ready.exists()
        time.sleep(0.05)
    return False


def finish_run(run: Running, killed: bool = False, grace: float = 30.0) -> Run:
    """Let the runner end (after the judge's bye), then end every process of the run;
    ``killed``: the run was stopped at its time limit."""
    try:
        run.proc.wait(timeout=0 if killed else grace)
    except subprocess.TimeoutExpired:
        pass
    finally:
        _RUNNING.pop(run.proc.pid, None)
        end_run(run.proc, _read_int(run.work / "kernel.pid"), run.token)
    return Run(read_jsonl(run.work / "events.jsonl"), _read_int(run.work / "kernel.pid"),
               killed, time.perf_counter() - run.t0, _tail(run.work / "runner.log"))


def run_submission(nb: nbformat.NotebookNode, work: Path, cell_timeout: float,
                   timeout: float, box: "Box | None" = None) -> Run:
    """The notebook run alone, with no judge (the limits' tests): started, waited for,
    ended as soon as its kernel would serve."""
    running = start_run(nb, work, cell_timeout, timeout, box, key="")
    serving = wait_serving(running)
    return finish_run(running, killed=not serving and running.proc.poll() is None,
                      grace=0 if serving else 30.0)


def stop_all() -> None:
    """End every run still going (the instructor pressed Ctrl-C)."""
    for proc, work, token in list(_RUNNING.values()):
        end_run(proc, _read_int(work / "kernel.pid"), token)


def end_run(proc: subprocess.Popen, kernel_pid: int | None, token: str) -> None:
    """Kill the runner's and the kernel's process groups, then every process left with
    ``token`` in its environment; wait until they are gone."""
    for group in (proc.pid, kernel_pid):
        if group:
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    proc.wait()
    for _ in range(3):
        left = carrying(token)
        if not left:
            return
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=5)


def carrying(token: str) -> list[psutil.Process]:
    """Every live process whose environment holds ``TOKEN_ENV=token``."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TOKEN_ENV) == token and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


def read_jsonl(path: Path, offset: int = 0) -> list[dict]:
    """The well-formed JSON objects of a JSON-lines file from ``offset``; the rest skipped."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            lines = f.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict):
            out.append(item)
    return out


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _tail(path: Path, size: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------- the runner process

def _client_class():
    from nbclient import NotebookClient

    class GradingClient(NotebookClient):
        """nbclient with a cap on the outputs kept and a note of the cells cut off."""
        kept = 0
        timed_out = False

        def output(self, outs, msg, display_id, cell_index):
            if msg["msg_type"] in ("stream", "display_data", "execute_result", "update_display_data"):
                size = len(json.dumps(msg["content"]))
                self.kept += size
                if self.kept > MAX_OUTPUT:
                    if self.kept - size <= MAX_OUTPUT:
                        outs.append(nbformat.v4.new_output(
                            "stream", name="stderr", text=TRUNCATED.format(MAX_OUTPUT)))
                    return None
            return super().output(outs, msg, display_id, cell_index)

        async def _async_handle_timeout(self, timeout, cell=None):
            self.timed_out = True
            return await super()._async_handle_timeout(timeout, cell)

    return GradingClient


def _emit(events, **event) -> None:
    events.write(json.dumps(event) + "\n")
    events.flush()


def _error_of(cell: nbformat.NotebookNode) -> dict | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return {"ename": out.get("ename", ""), "evalue": str(out.get("evalue", ""))[:2000]}
    return None


def _exit_status(client) -> int | None:
    try:
        return client.km.provisioner.process.poll()
    except AttributeError:
        return None


def _responds(client, index: int, seconds: int = PROBE) -> bool:
    """After a cell was interrupted at its limit: does the kernel run a `pass` again?"""
    limit, client.timeout, client.timed_out = client.timeout, seconds, False
    try:
        client.execute_cell(nbformat.v4.new_code_cell("pass"), index)
    finally:
        client.timeout = limit
    return not client.timed_out


def runner(work: Path, cell_timeout: float, timeout: float, link: str, key: str) -> None:
    """Run ``work/graded.ipynb`` in a fresh kernel, one event line per cell start and end;
    then let the kernel serve the judge (``handover.serve``) for what time is left."""
    from ddl_lab.tools.notebooks import _quiet_output_widgets
    _quiet_output_widgets()
    nb = nbformat.read(work / "graded.ipynb", as_version=4)
    client = _client_class()(
        nb, timeout=int(cell_timeout), kernel_name="python3", allow_errors=True,
        shutdown_kernel="immediate",
        interrupt_on_timeout=True, startup_timeout=120,
        error_on_timeout={"ename": "CellTimeout",
                          "evalue": f"the cell ran past the per-cell limit of {cell_timeout:g} s"},
        resources={"metadata": {"path": str(work)}})
    with open(work / "events.jsonl", "a") as events, client.setup_kernel():
        kernel_pid = client.km.provisioner.process.pid
        (work / "kernel.pid").write_text(str(kernel_pid))
        _emit(events, event="kernel", pid=kernel_pid)
        t0 = time.perf_counter()
        try:
            alive = _run_cells(client, nb, events)
        finally:
            nbformat.write(nb, work / "executed.ipynb")
        if alive:
            _serve(client, len(nb.cells), link, key, timeout - (time.perf_counter() - t0))


def _serve(client, index: int, link: str, key: str, left: float) -> None:
    """The kernel answers the judge until it says bye, or the time left runs out."""
    cell = nbformat.v4.new_code_cell(
        "from ddl_lab.tools.grading import handover as __ddl_lab_handover\n"
        f"__ddl_lab_handover.serve({link!r}, {key!r}, accept={max(1.0, left):.0f})")
    client.timeout = max(1, int(left))
    try:
        client.execute_cell(cell, index)
    except Exception:               # noqa: BLE001 — the kernel died while serving: the judge
        pass                        # sees its link end


def _run_cells(client, nb: nbformat.NotebookNode, events) -> bool:
    """Each cell in turn; stop where the kernel died or could not be interrupted (False)."""
    from nbclient.exceptions import DeadKernelError
    for i, cell in enumerate(nb.cells):
        k = check_index(cell)
        first = cell_line(cell)
        _emit(events, event="start", cell=i, check=k, line=first)
        client.timed_out, t0 = False, time.perf_counter()
        try:
            client.execute_cell(cell, i)
        except DeadKernelError:
            _emit(events, event="died", cell=i, check=k, line=first, code=_exit_status(client))
            return False
        timed_out = client.timed_out
        _emit(events, event="done", cell=i, check=k, line=first, error=_error_of(cell),
              timed_out=timed_out, seconds=round(time.perf_counter() - t0, 2))
        if timed_out and not _responds(client, i):
            _emit(events, event="stuck", cell=i, check=k, line=first)
            return False
    return True


if __name__ == "__main__":
    runner(Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5])
