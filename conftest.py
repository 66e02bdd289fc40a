"""Each lesson runs once per test session (CONTRIBUTING.md, \"Budgets\"): where the browser suite can
drive JupyterLab, it runs every lesson top to bottom and asserts no error, so nbval's run of
the same lesson is deselected; without a browser, nbval runs the lessons. Under xdist
(`make test`), the browser lessons and the solution notebooks spread over the workers, longest
first (``pytest_xdist_make_scheduler`` below)."""
import importlib.util
import os
import uuid
from pathlib import Path

import pytest

# Checks run by the tests are not the learner's: they leave the course's progress alone.
os.environ.setdefault("DDL_LAB_PROGRESS", "off")
# Two pytest workers, a browser and their clusters share two cores: a rank can wait many
# seconds for a peer that is merely unscheduled, so checks wait 4× their usual timeouts (a
# deadlock that tests provoke sets its own short wait).
os.environ.setdefault("DDL_LAB_PATIENCE", "4")

CHROMIUM = Path("/usr/bin/chromium")
LESSONS = Path(__file__).resolve().parent / "lessons"


def pytest_configure(config):
    # this test run's id, the same in every xdist worker (the browser lessons and the site
    # meet by it: tests/browser/conftest.py, tests/site/conftest.py)
    config.ddl_run = getattr(config, "workerinput", {}).get("testrunuid") or uuid.uuid4().hex


@pytest.fixture(scope="session")
def playwright_browser():
    """Debian's Chromium, headless, driven by Playwright (which cannot fetch its own here):
    one per test process, shared by the browser tests and the website's (tests/browser,
    tests/site: one process cannot hold two of Playwright's synchronous drivers)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser tests skipped: the Python package playwright is not installed "
                    "(`make setup` installs the dev extras)")
    if not CHROMIUM.exists():
        pytest.skip(f"browser tests skipped: no Chromium at {CHROMIUM} (`make browser` "
                    "installs Debian's chromium; as root: apt-get install chromium)")
    from tests.browser.lab_harness import CHROMIUM_ARGS
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=CHROMIUM_ARGS)   # a fresh temporary profile
        yield browser
        browser.close()


START_METHOD = "DDL_LAB_START_METHOD"


@pytest.fixture(autouse=True)
def _start_method_left_as_found():
    """A test that leaves another start method behind fails (and the setting is put back):
    every later test in its process would start its workers that way. One did, once: the
    rest of its xdist worker's tests spawned every worker, importing torch anew each time."""
    before = os.environ.get(START_METHOD)
    yield
    after = os.environ.get(START_METHOD)
    if after != before:
        if before is None:
            os.environ.pop(START_METHOD, None)
        else:
            os.environ[START_METHOD] = before
        pytest.fail(f"the test left {START_METHOD}={after!r} (it was {before!r}): set it "
                    "with monkeypatch.setenv, which puts it back", pytrace=False)


def browser_available() -> bool:
    return CHROMIUM.exists() and importlib.util.find_spec("playwright") is not None


def pytest_collection_modifyitems(config, items):
    in_browser = {i.callspec.params.get("lesson") for i in items
                  if getattr(i, "originalname", "") == "test_lesson_runs_and_its_widgets_redraw"}
    if not in_browser or not browser_available():
        return
    twice = [i for i in items if Path(str(i.fspath)).parent == LESSONS
             and Path(str(i.fspath)).stem in in_browser]
    if twice:
        items[:] = [i for i in items if i not in twice]
        config.hook.pytest_deselected(items=twice)


# ---------------------------------------------------------------- xdist: who runs what
# `make test` runs `pytest -n 2 --dist loadscope` (Makefile WORKERS): a module's tests stay on
# one worker, so its module-scoped fixtures (a warm cluster, a graded class) are made once.
# Two kinds of module hold one expensive, independent run per notebook instead, and group
# per notebook so that the workers share them: the browser lessons and the solution notebooks. Groups go out
# longest first (LONGEST_FIRST, measured with --durations on 2 cores; then every other
# group, most tests first; the reliability tests and the site last: LAST), so that no worker
# is left with a long group at the end while the others idle. A group named nowhere (a new
# lesson) only loses its place in the queue.
PER_NOTEBOOK = ("tests/browser/test_lessons_in_browser.py",
                "tests/tools/test_solution_notebooks.py")
IN_BROWSER = "tests/browser/test_lessons_in_browser.py"
LONGEST_FIRST = (f"{IN_BROWSER}::[11_scaling_out]", f"{IN_BROWSER}::[14_experts]",
                 f"{IN_BROWSER}::[10_memory]",
                 "tests/tools/grading/test_tampering.py",
                 "tests/tools/grading/test_real_class.py",
                 f"{IN_BROWSER}::[06_ring_allreduce]", f"{IN_BROWSER}::[08_compression]",
                 "tests/scaling_out/test_engines.py", "tests/scaling_out/test_elastic.py",
                 f"{IN_BROWSER}::[09_model_parallel]", f"{IN_BROWSER}::[12_transformers]",
                 f"{IN_BROWSER}::[05_data_parallel]",
                 f"{IN_BROWSER}::[15_capstone]", IN_BROWSER,
                 "tests/tools/grading/test_nbgrader.py", "tests/tools/test_solution_notebooks.py")


# Modules that start Spark run in one group: one JVM (the session fixture) for the test run.
ONE_SPARK = ("tests/message_passing/test_spark_rdd.py", "tests/scaling_out/test_engines.py")
# Modules whose workers run torch's DTensor, FSDP2 and pipelining (about 1.5 CPU-s a worker
# to import) run in one group too: their shared clusters (2, 4 and 8 ranks) import them once.
ONE_MESH = ("tests/transformers/test_tensor.py", "tests/experts/test_reshard.py",
            "tests/experts/test_compose.py")
TOGETHER = (ONE_SPARK, ONE_MESH)
# Queued after everything else: the reliability tests (faults, soak, scale, loopback: they
# fill the cores the last long groups leave idle) and the website, one group (one build),
# which waits for this run's browser lessons (tests/site/conftest.py) and browses them.
SITE = "tests/site"
LAST = ("tests/reliability/", SITE)


def scope_of(nodeid: str) -> str:
    """The group a test runs in: its module (or class), its module and notebook, or the
    group of modules that share what they start (TOGETHER: Spark, the mesh workers)."""
    module, _, rest = nodeid.partition("::")
    for together in TOGETHER:
        if module in together:
            return together[-1]
    if module.startswith(SITE + "/"):
        return SITE
    if module in PER_NOTEBOOK and "[" in rest:
        return f"{module}::[{rest.split('[', 1)[1].split('-')[0].rstrip(']')}]"
    return nodeid.rsplit("::", 1)[0]


def rank_of(scope: str) -> int:
    """Where ``scope`` goes in the queue: its own entry in LONGEST_FIRST, else its module's."""
    for name in (scope, scope.partition("::")[0]):
        if name in LONGEST_FIRST:
            return LONGEST_FIRST.index(name)
    if scope.startswith(LAST):
        return len(LONGEST_FIRST) + 1
    return len(LONGEST_FIRST)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    class Queue(OrderedDict):
        """xdist's queue of groups, handing out the highest ranked first (then in order)."""

        def popitem(self, last: bool = True):
            scope = min(self, key=rank_of)
            return scope, self.pop(scope)

    class PerNotebook(LoadScopeScheduling):
        def __init__(self, config, log=None):
            super().__init__(config, log)
            self.workqueue = Queue()

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return PerNotebook(config, log)
