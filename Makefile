# Two commands do everything on a fresh clone:  make lab   and   make test
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CPU build of torch lies on the course machines' disk; elsewhere pip fetches it.
# The package itself accepts any torch >= 2.2 (see pyproject.toml).
TORCH  ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: setup lab lessons exercises test bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

lab: setup                      ## open the course in JupyterLab (HEADLESS=1: execute every lesson instead)
ifeq ($(HEADLESS),1)
	$(PY) -m ddl_lab execute lessons
else
	$(VENV)/bin/jupyter lab lessons/
endif

lessons: setup                  ## execute every lesson headlessly into build/lessons/
	$(PY) -m ddl_lab execute lessons

exercises: setup                ## regenerate exercises/ from solutions/
	$(PY) -m ddl_lab make-exercises

test: setup                     ## the whole test suite, notebooks included
	$(PY) -m pytest -n 2 --dist loadscope $(PYTEST_ARGS)

bench: setup                    ## benchmarks: ratios measured side by side
	$(PY) benchmarks/runtime_bench.py

clean:
	rm -rf $(VENV) build artifacts
