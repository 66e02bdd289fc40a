# Two commands do everything on a fresh clone:  make lab   and   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of torch lies on the course machines' disk; elsewhere pip fetches it.
# The package itself accepts any torch >= 2.6 (see pyproject.toml and CONTRIBUTING.md).
TORCH  ?= torch==2.13.0
PYTEST_ARGS ?=
# xdist workers: 2 on 2 cores. A test's own processes (a cluster's ranks, a kernel, a browser)
# keep both cores busy; a third pytest worker only made them contend: a fresh clone took
# 1,079 s and 2,049 CPU-s with 3, 907 s and 1,498 CPU-s with 2 (the same tests, same machine)
WORKERS ?= 2
# the repository the website's Binder / JupyterHub links open (make site REPO=https://github.com/o/r)
REPO   ?=
HUB    ?=

.PHONY: setup bytecode lab lessons site exercises browser sandbox engines java lint test test-gpu bench clean

setup: $(VENV)/.installed

# Packages install with uv (from PyPI, into the venv): it fetches, unpacks and compiles in
# parallel and links from its cache, about 30 s less than pip on a fresh clone here. Compiled
# at install, as pip does: otherwise the first processes of a run (workers importing torch's
# compiler side by side) each compile the same modules. pip's own find-links (where the
# course machines keep the CPU build of torch) is handed on to it.
UV     := $(VENV)/bin/uv
INSTALL = $(UV) pip install -q --compile-bytecode --python $(PY) \
	$$($(PY) -m pip config get global.find-links 2>/dev/null | tr ' ' '\n' | sed '/^$$/d; s/^/--find-links /')

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv
	$(PY) -c "import torch" 2>/dev/null || $(INSTALL) "$(TORCH)"
	$(INSTALL) -e ".[dev,site]"
	touch $@

# The course's own modules compiled once, beside their sources: where PYTHONDONTWRITEBYTECODE
# is set (as on the course machines) Python never writes them, and every process the course
# starts (a kernel, a judge, a forkserver, each test process) would compile anew each module
# it imports. compileall rewrites only what changed since.
bytecode: setup
	$(PY) -m compileall -q -j 0 ddl_lab tests >/dev/null || \
		echo "could not write the course's bytecode: each process compiles what it imports"

lab: setup bytecode             ## open the course in JupyterLab (HEADLESS=1: execute every lesson instead)
ifeq ($(HEADLESS),1)
	$(PY) -m ddl_lab execute lessons
else
	$(VENV)/bin/jupyter lab lessons/
endif

lessons: setup bytecode         ## execute every lesson headlessly into build/lessons/
	$(PY) -m ddl_lab execute lessons

site: setup                     ## the course as a static website in build/site/ (executes stale lessons)
	$(PY) -m ddl_lab site --repository "$(REPO)" --hub "$(HUB)"

exercises: setup                ## regenerate exercises/ from solutions/
	$(PY) -m ddl_lab make-exercises

# $(call apt,PRESENT-TEST,PACKAGE,PURPOSE,WITHOUT-IT): nothing when PRESENT-TEST succeeds;
# else Debian's PACKAGE when root (the package lists fetched only when they are missing or
# stale); else how to install it. A failed install only says what is skipped without it.
define apt
	@if $(1); then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing $(2) for $(3) (apt-get)"; \
		(DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) 2>/dev/null || \
		 (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2))) \
			|| echo "could not install $(2): $(4)"; \
	else \
		echo "no $(2): $(4). Install it with: sudo apt-get install $(2) (Debian/Ubuntu)"; \
	fi
endef

browser:                        ## Debian's Chromium for tests/browser (Playwright cannot fetch its own here)
	$(call apt,[ -x /usr/bin/chromium ],chromium,the browser tests,the browser tests will be skipped)

sandbox:                        ## bubblewrap, the OS sandbox `ddl-lab grade` runs learner code in (Debian's, when root)
	$(call apt,command -v bwrap >/dev/null,bubblewrap,ddl-lab grade's sandbox,ddl-lab grade will refuse to grade and its tests run unsandboxed)

engines: $(VENV)/.engines java  ## Spark and Ray (lesson 04's RDD job, lesson 11's Options): optional

$(VENV)/.engines: $(VENV)/.installed
	[ -x $(UV) ] || $(PY) -m pip install -q uv      # a venv set up before uv was used
	$(INSTALL) -e ".[engines]"
	touch $@

java: setup                     ## a Java 17+ runtime for PySpark (Debian's headless JRE when root)
	$(call apt,$(PY) -c "from ddl_lab.runtime.engines import java_problem as j; exit(bool(j()))" 2>/dev/null,openjdk-17-jre-headless,PySpark,the Spark cells and tests will be skipped)

# One pytest session, every test in it (conftest.py queues the groups: the longest first; the
# reliability tests — faults, soak, scale, properties, bad input, loopback; DDL_SOAK_SCALE=20
# soaks longer — and the website last: tests/site builds it from the lessons this run's
# browser tests saved into build/lessons/, waiting for them, so no lesson runs twice).
test: setup engines bytecode | browser sandbox   ## the whole test suite: notebooks, browser, engines, site
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n $(WORKERS) --dist loadscope $(PYTEST_ARGS)

test-gpu: setup                 ## the tests that need CUDA and nccl (marker gpu; they skip without a GPU)
	$(PY) -m pytest -m gpu -p no:xdist tests $(PYTEST_ARGS)

lint: setup                     ## ruff (configured in pyproject.toml); make test runs it first
	$(VENV)/bin/ruff check .

bench: setup                    ## benchmarks: ratios measured side by side (a quiet machine)
	for b in benchmarks/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build artifacts
