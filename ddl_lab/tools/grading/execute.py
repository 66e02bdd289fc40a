"""Running one submission for ``ddl-lab grade``: a fresh kernel, a private folder, limits.

The grader never runs learner code itself. For each submission it starts this module as a
runner process (``python -m ddl_lab.tools.grading.execute WORK CELL_TIMEOUT``) in its own
session; the runner starts a fresh kernel (nbclient) in WORK, a private temporary folder,
and runs the grading notebook cell by cell with a per-cell limit. It writes what happened
to ``WORK/events.jsonl``, one line as each cell starts and one as it ends, so what was
reached survives a runner killed at the per-notebook limit. A pristine check cell only
hands its arguments over (``WORK/payload-<k>.bin``, ``handover.py``): the verdicts are
reached afterwards, in the judge (``judge.py``).

When a run ends (done, crashed or killed at its limit) the grader kills the kernel's whole
process group, then every process that still carries this run's token in its environment
(workers, clusters, anything the learner started in a session of its own).
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

import nbformat
import psutil

from .pristine import cell_line, check_index

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


def run_submission(nb: nbformat.NotebookNode, work: Path, cell_timeout: float,
                   timeout: float) -> Run:
    """Run the grading notebook ``nb`` in ``work`` (a private folder) and clean up."""
    nbformat.write(nb, work / "graded.ipynb")
    token = secrets.token_hex(8)
    env = {**os.environ, TOKEN_ENV: token, "DDL_LAB_PROGRESS": "off",
           "MPLBACKEND": "Agg", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("DDL_LAB_GRADE_RECORD", None)
    t0 = time.perf_counter()
    with open(work / "runner.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ddl_lab.tools.grading.execute", str(work), str(cell_timeout)],
            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        _RUNNING[proc.pid] = (proc, work, token)
        try:
            proc.wait(timeout=timeout)
            killed = False
        except subprocess.TimeoutExpired:
            killed = True
        finally:
            _RUNNING.pop(proc.pid, None)
            end_run(proc, _read_int(work / "kernel.pid"), token)
    return Run(read_jsonl(work / "events.jsonl"), _read_int(work / "kernel.pid"), killed,
               time.perf_counter() - t0, _tail(work / "runner.log"))


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


def runner(work: Path, cell_timeout: float) -> None:
    """Run ``work/graded.ipynb`` in a fresh kernel, one event line per cell start and end."""
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
        try:
            _run_cells(client, nb, events)
        finally:
            nbformat.write(nb, work / "executed.ipynb")


def _run_cells(client, nb: nbformat.NotebookNode, events) -> None:
    """Each cell in turn; stop where the kernel died or could not be interrupted."""
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
            return
        timed_out = client.timed_out
        _emit(events, event="done", cell=i, check=k, line=first, error=_error_of(cell),
              timed_out=timed_out, seconds=round(time.perf_counter() - t0, 2))
        if timed_out and not _responds(client, i):
            _emit(events, event="stuck", cell=i, check=k, line=first)
            return

if __name__ == "__main__":
    runner(Path(sys.argv[1]), float(sys.argv[2]))
