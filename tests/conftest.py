"""Shared fixtures: warm clusters, notebook-defined functions, solutions as the single source.

- ``cluster4``: one warm 4-rank cluster per test module (fast on 2 cores).
- ``cell(source, **globals)``: define functions as a notebook cell does (in ``__main__``, so
  they travel to the workers by value).
- ``solution(stem, name)``: the function ``name`` exactly as ``solutions/<stem>.ipynb`` writes
  it, so "the solution passes" tests the notebook, not a copy typed into a test.
"""
import textwrap
from pathlib import Path
from typing import Any, Callable

import matplotlib
import pytest
import torch

from ddl_lab.runtime import Cluster

matplotlib.use("Agg")
# The tests compute with one torch thread, as the course's workers do: `make test` runs three
# test processes on two cores, where a thread per core only makes them wait on each other
# (a test that needs more threads asks for them and puts the number back).
torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]


def define_cell(source: str, **globals_: Any) -> dict[str, Any]:
    """Run ``source`` as a notebook cell would and return its namespace."""
    ns = {"__name__": "__main__", **globals_}
    exec(textwrap.dedent(source), ns)
    return ns


def load_solution(stem: str, name: str) -> Callable:
    """``name`` as defined in ``solutions/<stem>.ipynb``: the notebook's first code cell (its
    imports) and the untagged code cell that defines ``name`` run as notebook cells."""
    import nbformat
    nb = nbformat.read(ROOT / "solutions" / f"{stem}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("tags")]
    defining = [c for c in code if f"def {name}(" in c.source or f"class {name}" in c.source]
    if not defining:
        raise LookupError(f"solutions/{stem}.ipynb defines no {name!r}")
    ns = define_cell(code[0].source)
    exec(defining[0].source, ns)
    return ns[name]


@pytest.fixture
def cell() -> Callable[..., dict[str, Any]]:
    return define_cell


@pytest.fixture
def solution() -> Callable[[str, str], Callable]:
    return load_solution


@pytest.fixture(scope="module")
def cluster4():
    with Cluster(4, timeout=20) as c:
        yield c


@pytest.fixture(scope="session")
def spark():
    """One local Spark session (local[2]) per test process; skips, saying how to install
    what is missing, without the ``engines`` extra or Java 17+ (lessons 04 and 11)."""
    from ddl_lab.runtime.engines import missing, spark_session
    why = missing("spark")
    if why:
        pytest.skip(f"Spark tests skipped: {why}")
    session = spark_session()
    yield session
    session.stop()
