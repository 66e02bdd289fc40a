"""Browser tests: one JupyterLab per test session, in the session's headless Chromium (conftest.py).

They skip, saying why, only where no browser can be had: no Python ``playwright`` or no
Debian ``chromium`` at /usr/bin/chromium (``make browser`` installs it). Under
``pytest -n 2 --dist loadscope`` each module stays on one worker.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab_harness import ARTIFACTS, EXECUTED, LESSON_TEST, Lab, NotebookPage, copy_course



def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium "
                                       "(deselect with -m 'not browser')")


@pytest.fixture(scope="session")
def lab(playwright_browser, tmp_path_factory):
    """JupyterLab serving a temporary copy of the course (lessons, exercises, solutions)."""
    root = copy_course(tmp_path_factory.mktemp("course"))
    server = Lab(root, tmp_path_factory.mktemp("jupyter"))
    yield server
    server.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """After a lesson's browser test, however it ended (passed, failed, skipped), write
    ``<lesson>.run`` beside where it saves the lesson: the website's tests, queued last in
    the same test run, wait for these (tests/site/conftest.py)."""
    yield
    if getattr(item, "originalname", "") == LESSON_TEST:
        EXECUTED.mkdir(parents=True, exist_ok=True)
        (EXECUTED / f"{item.callspec.params['lesson']}.run").write_text(item.config.ddl_run)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.browser_call_failed = report.failed


@pytest.fixture(scope="session")
def reusable() -> dict:
    """The page a test left behind in good order, for the next test's first notebook
    (``open_notebook``): one JupyterLab load per test process instead of one per test."""
    return {}


@pytest.fixture
def open_notebook(lab, playwright_browser, request, reusable):
    """``open_notebook(path)`` → a NotebookPage. A test's first notebook opens in the page the
    last test left (JupyterLab's own documents closed, ``NotebookPage(reopen=True)``), any
    other in a fresh browser context. On teardown every kernel, with its workers, is shut
    down; a failed test's pages are saved as artifacts/browser/failed-*.png and closed, so
    the next test starts from a fresh page."""
    pages: list[NotebookPage] = []

    def open_(path: str) -> NotebookPage:
        page = reusable.pop("page", None) if not pages else None
        if page is None or page.is_closed():
            ctx = playwright_browser.new_context(viewport={"width": 1400, "height": 1000})
            ctx.set_default_timeout(30_000)
            page, reopen = ctx.new_page(), False
        else:
            reopen = True
        try:
            nb = NotebookPage(page, lab, path, reopen=reopen)
        except BaseException:
            page.context.close()
            raise
        pages.append(nb)
        return nb

    yield open_
    failed = getattr(request.node, "browser_call_failed", False)
    for i, nb in enumerate(pages):
        if failed:
            nb.page.screenshot(path=str(failure_shot(request.node.name)))
        if i == 0 and not failed:
            nb.close_all()
            reusable["page"] = nb.page
        else:
            nb.page.context.close()
    lab.shutdown_kernels()


def failure_shot(test_name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / ("failed-" + re.sub(r"[^\w.-]+", "_", test_name) + ".png")
