"""The website (``python -m ddl_lab site``), built once per session from the lessons the
test suite already executed, and served on 127.0.0.1 to Chromium.

``make test`` runs these tests in a phase of their own, after the main suite: its browser
tests save every lesson as it ran into build/lessons/, so no lesson is executed twice. Where
no browser ran the lessons (no Chromium), there is nothing to build from and the tests skip,
saying so (``make site`` executes the lessons itself).
"""
from __future__ import annotations

import functools
import http.server
import threading
import time
from pathlib import Path

import pytest

from ddl_lab.tools import site

ROOT = Path(__file__).resolve().parents[2]
EXECUTED = ROOT / "build" / "lessons"
REPOSITORY = "https://github.com/ddl-lab/ddl_lab"    # any URL: the tests read the links it makes


@pytest.fixture(scope="session")
def site_dir(tmp_path_factory) -> Path:
    stale = site.stale_lessons(ROOT, EXECUTED)
    if stale and len(stale) == len(list((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))):
        pytest.skip(f"no executed lessons in {EXECUTED}: the browser tests save them "
                    "(`make test` with Chromium), or `make lessons`")
    t0 = time.perf_counter()
    out = site.build(ROOT, EXECUTED, ROOT / "build" / "site", site.Launch(REPOSITORY))
    print(f"site built in {time.perf_counter() - t0:.1f} s")
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="session")
def served(site_dir):
    """The site over HTTP on a free loopback port: its base URL."""
    handler = functools.partial(_Quiet, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    thread.join(10)
