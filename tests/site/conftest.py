"""The website (``python -m ddl_lab site``), built once per session from the lessons the
test suite already executed, and served on 127.0.0.1 to Chromium.

``make test`` queues these tests last, as one group; its browser tests save every lesson as
it ran into build/lessons/, and the site waits for this run's (``wait_for_the_browser``),
so no lesson is executed twice. Where
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
from tests.browser.lab_harness import LESSON_TEST

ROOT = Path(__file__).resolve().parents[2]
EXECUTED = ROOT / "build" / "lessons"
REPOSITORY = "https://github.com/ddl-lab/ddl_lab"    # any URL: the tests read the links it makes


WAIT_S = 900        # for this run's browser lessons: longer than any lesson's browser test


def browser_lessons(session: pytest.Session) -> set[str]:
    """The lessons this test run drives in the browser."""
    return {i.callspec.params["lesson"] for i in session.items
            if getattr(i, "originalname", "") == LESSON_TEST}


def wait_for_the_browser(session: pytest.Session, run: str) -> list[str]:
    """Wait until every lesson that this test run drives in the browser has finished
    there, however it ended (its ``<lesson>.run`` in EXECUTED names ``run``: written by
    tests/browser/conftest.py); return those still running
    after WAIT_S seconds. None are waited for where the run has no browser lessons."""
    lessons = browser_lessons(session)

    def running() -> list[str]:
        marks = {name: EXECUTED / f"{name}.run" for name in lessons}
        return sorted(n for n, m in marks.items() if not m.exists() or m.read_text() != run)
    deadline = time.monotonic() + WAIT_S
    while running() and time.monotonic() < deadline:
        time.sleep(1)
    return running()


@pytest.fixture(scope="session")
def site_dir(request) -> Path:
    late = wait_for_the_browser(request.session, request.config.ddl_run)
    if late:
        print(f"the browser tests of {late} had not finished after {WAIT_S} s")
    stale = site.stale_lessons(ROOT, EXECUTED, smaller_ok=True)     # the browser suite's runs
    if stale and len(stale) == len(list((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))):
        pytest.skip(f"no executed lessons in {EXECUTED}: the browser tests save them "
                    "(`make test` with Chromium), or `make lessons`")
    failed = sorted(n for n in browser_lessons(request.session)
                    if not (EXECUTED / f"{n}.ipynb").exists())
    if failed:      # their own failures say why, once: no site to build from this run
        pytest.skip(f"the browser runs of {', '.join(failed)} failed (see their tests), so "
                    "this run has no executed copy to build the site from")
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
