# Two commands do everything on a fresh clone:  make lab   and   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of torch lies on the course machines' disk; elsewhere pip fetches it.
# The package itself accepts any torch >= 2.6 (see pyproject.toml and CONTRIBUTING.md).
TORCH  ?= torch==2.13.0
PYTEST_ARGS ?=
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

browser:                        ## Debian's Chromium for tests/browser (Playwright cannot fetch its own here)
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium for the browser tests (apt-get)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
			|| echo "could not install chromium: the browser tests will be skipped"; \
	else \
		echo "no /usr/bin/chromium: the browser tests will be skipped." \
		     "Install it with: sudo apt-get install chromium (Debian/Ubuntu)"; \
	fi

sandbox:                        ## bubblewrap, the OS sandbox `ddl-lab grade` runs learner code in (Debian's, when root)
	@if command -v bwrap >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing bubblewrap for ddl-lab grade's sandbox (apt-get)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap) \
			|| echo "could not install bubblewrap: grading tests run without a sandbox"; \
	else \
		echo "no bubblewrap: ddl-lab grade will refuse to grade (its tests run unsandboxed)." \
		     "Install it with: sudo apt-get install bubblewrap (Debian/Ubuntu)"; \
	fi

engines: $(VENV)/.engines java  ## Spark and Ray (lesson 04's RDD job, lesson 11's Options): optional

$(VENV)/.engines: $(VENV)/.installed
	$(PY) -m pip install -q -e ".[engines]"
	touch $@

java: setup                     ## a Java 17+ runtime for PySpark (Debian's headless JRE when root)
	@if $(PY) -c "from ddl_lab.runtime.engines import java_problem as j; exit(bool(j()))" \
		2>/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing openjdk-17-jre-headless for PySpark (apt-get)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			openjdk-17-jre-headless) || echo "could not install Java: the Spark tests will be skipped"; \
	else \
		echo "no Java 17+: the Spark cells and tests will be skipped." \
		     "Install it with: sudo apt-get install openjdk-17-jre-headless (Debian/Ubuntu)"; \
	fi

# After the main suite, one bounded phase runs the reliability tests (tests/reliability:
# faults, soak, scale, properties, bad input, loopback; DDL_SOAK_SCALE=20 soaks longer)
# beside the site tests (tests/site: the website built from the lessons the main suite's
# browser tests ran and saved into build/lessons/, then browsed — no lesson runs twice).
test: setup engines | browser sandbox   ## the whole test suite: notebooks, browser, engines, site
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n 2 --dist loadscope -m "not reliability and not site" $(PYTEST_ARGS)
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
