# Two commands do everything on a fresh clone:  make lab   and   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of torch lies on the course machines' disk; elsewhere pip fetches it.
# The package itself accepts any torch >= 2.6 (see pyproject.toml and CONTRIBUTING.md).
TORCH  ?= torch==2.13.0
PYTEST_ARGS ?=
# xdist workers of the main phase: 3 keep 2 cores busy while a test waits on a kernel, a page
# or a timeout (the main phase is CPU-bound; the last phase times faults and keeps 2)
WORKERS ?= 3
# the repository the website's Binder / JupyterHub links open (make site REPO=https://github.com/o/r)
REPO   ?=
HUB    ?=

.PHONY: setup lab lessons site exercises browser sandbox engines java lint test test-gpu bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev,site]"
	touch $@

lab: setup                      ## open the course in JupyterLab (HEADLESS=1: execute every lesson instead)
ifeq ($(HEADLESS),1)
	$(PY) -m ddl_lab execute lessons
else
	$(VENV)/bin/jupyter lab lessons/
endif

lessons: setup                  ## execute every lesson headlessly into build/lessons/
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
	$(PY) -m pip install -q -e ".[engines]"
	touch $@

java: setup                     ## a Java 17+ runtime for PySpark (Debian's headless JRE when root)
	$(call apt,$(PY) -c "from ddl_lab.runtime.engines import java_problem as j; exit(bool(j()))" 2>/dev/null,openjdk-17-jre-headless,PySpark,the Spark cells and tests will be skipped)

# After the main suite, one bounded phase runs the reliability tests (tests/reliability:
# faults, soak, scale, properties, bad input, loopback; DDL_SOAK_SCALE=20 soaks longer)
# beside the site tests (tests/site: the website built from the lessons the main suite's
# browser tests ran and saved into build/lessons/, then browsed — no lesson runs twice).
test: setup engines | browser sandbox   ## the whole test suite: notebooks, browser, engines, site
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n $(WORKERS) --dist loadscope -m "not reliability and not site" $(PYTEST_ARGS)
	$(PY) -m pytest -n 2 --dist loadscope -m "reliability or site" --timeout=300 \
		tests/reliability tests/site

test-gpu: setup                 ## the tests that need CUDA and nccl (marker gpu; they skip without a GPU)
	$(PY) -m pytest -m gpu -p no:xdist tests $(PYTEST_ARGS)

lint: setup                     ## ruff (configured in pyproject.toml); make test runs it first
	$(VENV)/bin/ruff check .

bench: setup                    ## benchmarks: ratios measured side by side (a quiet machine)
	for b in benchmarks/*_bench.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build artifacts
