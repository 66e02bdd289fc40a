"""The torch floor: pyproject.toml, ddl_lab.TORCH_FLOOR and CONTRIBUTING.md say one version,
and an older torch is refused at import with a message that names it."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import ddl_lab

ROOT = Path(__file__).resolve().parents[2]


def _floor() -> str:
    return ".".join(map(str, ddl_lab.TORCH_FLOOR))


def test_pyproject_asks_for_the_floor():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = [d for d in deps if re.match(r"torch\b", d)]
    assert torch == [f"torch>={_floor()}"]


def test_contributing_names_the_floor():
    assert f"`torch>={_floor()}`" in (ROOT / "CONTRIBUTING.md").read_text()


@pytest.mark.parametrize("version", ["2.5.1", "2.2.0+cpu", "1.13.1"])
def test_an_older_torch_is_refused_with_the_floor_named(version):
    with pytest.raises(ImportError, match=rf"torch >= {_floor()}.*torch {re.escape(version)}"):
        ddl_lab.require_torch(version)


@pytest.mark.parametrize("version", ["2.6.0", "2.13.0+cpu", "2.14.1", "3.0.0a0"])
def test_the_floor_and_newer_are_accepted(version):
    ddl_lab.require_torch(version)
