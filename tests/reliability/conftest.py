"""The reliability tests: every test here carries the ``reliability`` marker and
runs with a private temporary folder, so any file the runtime leaves behind is seen.

``make test`` queues them after every other group (conftest.py), where they fill the
cores the last long tests leave idle; alone: ``pytest -m reliability tests/reliability``. ``DDL_SOAK_SCALE`` (default 1) multiplies
the soak's cycles and runs and adds the larger worlds (``DDL_SOAK_SCALE=10``:
the full soak's 200 cycles and 2,000 runs... and Cluster(16)).
"""
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ddl_lab.runtime import cluster as runtime_cluster
from ddl_lab.runtime.process import server_socket

from .system import files_under, leaked_shm_segments, shm_segments

HERE = Path(__file__).resolve().parent
SCALE = float(os.environ.get("DDL_SOAK_SCALE", "1"))


@pytest.hookimpl(tryfirst=True)          # before -m "not reliability" deselects
def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.reliability)
            if not sys.platform.startswith("linux"):
                item.add_marker(pytest.mark.skip(reason="reads /proc (Linux)"))


@pytest.fixture(scope="session", autouse=True)
def private_tmp(tmp_path_factory):
    """TMPDIR for this session and every process it starts (pytest's own tmp_path stays
    where it was)."""
    tmp_path_factory.getbasetemp()
    path = Path(tempfile.mkdtemp(prefix="ddl_rel_"))
    old_env, old_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(path), str(path)
    yield path
    tempfile.tempdir = old_dir
    if old_env is None:
        del os.environ["TMPDIR"]
    else:
        os.environ["TMPDIR"] = old_env
    shutil.rmtree(path, ignore_errors=True)


def live_cluster_dirs() -> set[str]:
    """The private folders (file stores) of the clusters alive in this process, and the
    folder of the live forkserver's socket (both go as this process ends)."""
    socket = server_socket()
    return ({Path(c._tmpdir).name for c in list(runtime_cluster._LIVE) if c._tmpdir}
            | ({Path(socket).parent.name} if socket else set()))


@pytest.fixture
def leftovers(private_tmp):
    """``leftovers()``: the temporary files (beside live clusters' stores) and the new
    /dev/shm segments no process holds since the test began — what a fault left
    behind."""
    shm_before, t0 = shm_segments(), time.time()

    def left() -> list[str]:
        live = live_cluster_dirs()
        temp = {f for f in files_under(private_tmp) if Path(f).parts[0] not in live}
        return sorted(temp) + sorted(f"/dev/shm/{n}" for n in leaked_shm_segments(shm_before, t0))
    return left
