"""Browser tests: one JupyterLab and one headless Chromium per test session.

They skip, saying why, only where no browser can be had: no Python ``playwright`` or no
Debian ``chromium`` at /usr/bin/chromium (``make browser`` installs it). Under
``pytest -n 2 --dist loadscope`` each module stays on one worker.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from lab_harness import (ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, EXECUTED, Lab, NotebookPage,
                         copy_course)

SKIP = "browser tests skipped: {}"
IN_BROWSER = "test_lesson_runs_and_its_widgets_redraw"


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium "
                                       "(deselect with -m 'not browser')")


@pytest.fixture(scope="session")
def playwright_browser():
    """Debian's Chromium, headless, driven by Playwright (which cannot fetch its own here)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip(SKIP.format("the Python package playwright is not installed "
                                "(`make setup` installs the dev extras)"))
    if not CHROMIUM.exists():
        pytest.skip(SKIP.format(f"no Chromium at {CHROMIUM} (`make browser` installs "
                                "Debian's chromium; as root: apt-get install chromium)"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=CHROMIUM_ARGS)   # a fresh temporary profile
        yield browser
        browser.close()


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
    if getattr(item, "originalname", "") == IN_BROWSER:
        EXECUTED.mkdir(parents=True, exist_ok=True)
        (EXECUTED / f"{item.callspec.params['lesson']}.run").write_text(item.config.ddl_run)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.browser_call_failed = report.failed


@pytest.fixture
def open_notebook(lab, playwright_browser, request):
    """``open_notebook(path)`` → a NotebookPage in a fresh browser context; on teardown the
    page closes (saved as artifacts/browser/failed-*.png if the test failed) and every
    kernel, with its workers, is shut down."""
    pages = []

    def open_(path: str) -> NotebookPage:
        ctx = playwright_browser.new_context(viewport={"width": 1400, "height": 1000})
        ctx.set_default_timeout(30_000)
        page = ctx.new_page()
        pages.append(page)
        return NotebookPage(page, lab, path)

    yield open_
    for page in pages:
        if getattr(request.node, "browser_call_failed", False):
            page.screenshot(path=str(failure_shot(request.node.name)))
        page.context.close()
    lab.shutdown_kernels()


def failure_shot(test_name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / ("failed-" + re.sub(r"[^\w.-]+", "_", test_name) + ".png")
