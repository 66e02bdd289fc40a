"""The layout rule (CONTRIBUTING.md): a lesson's slug names its package, check, tests,
benchmark and exercise; the package has no import cycle and no oversized module."""
import ast
import re
from pathlib import Path

import pytest

from ddl_lab.tools.notebooks import ROOT

PKG = ROOT / "ddl_lab"
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
SLUGS = {p.stem[3:]: p.stem for p in LESSONS}
# What stands in for a lesson's own benchmark, and why.
BENCH_ELSEWHERE = {"welcome": "runtime_bench.py measures what lesson 00 shows (start-up, round trip)"}
MAX_LINES = 520


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every ddl_lab module ``path`` imports, at the top or inside a function."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("ddl_lab")}


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PKG.rglob("*.py")}
    return {name: {m for m in imports_of(p) if m in files and m != name}
            for name, p in files.items()}


def test_there_are_lessons():
    assert len(SLUGS) >= 9


def test_the_package_has_no_import_cycle():
    g = graph()
    # a package's __init__ importing its own submodules is not a cycle back into it
    g = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in g.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for d in sorted(g[m]):
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [m, d]) if d in stack
                              else f"{m} -> {d}")
            elif d not in state:
                visit(d, stack + [m])
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_is_too_long_to_read_in_one_sitting():
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


@pytest.mark.parametrize("slug", sorted(SLUGS))
def test_a_lesson_slug_names_everything_about_it(slug):
    stem = SLUGS[slug]
    need = [PKG / slug / "__init__.py", PKG / "check" / f"{slug}.py", ROOT / "tests" / slug,
            ROOT / "solutions" / f"{stem}.ipynb", ROOT / "exercises" / f"{stem}.ipynb"]
    if slug not in BENCH_ELSEWHERE:
        need.append(ROOT / "benchmarks" / f"{slug}_bench.py")
    missing = [str(p.relative_to(ROOT)) for p in need if not p.exists()]
    assert not missing, f"lesson {stem} lacks {missing}"
    assert any((ROOT / "tests" / slug).glob("test_*.py")), f"tests/{slug}/ has no tests"


def test_every_lesson_is_in_the_readme_table():
    readme = (ROOT / "README.md").read_text()
    absent = [stem for stem in SLUGS.values() if not re.search(rf"^\| `{stem}` \|", readme, re.M)]
    assert not absent, f"README's lesson table lacks {absent}"


def test_learners_do_not_import_the_tooling():
    tooling = {m for m in graph() if m.startswith("ddl_lab.tools")}
    users = {m for m, deps in graph().items() if deps & tooling and not m.startswith("ddl_lab.tools")
             and m != "ddl_lab.__main__"}
    assert not users, f"these modules import ddl_lab.tools: {sorted(users)}"


def test_check_names_clash_loudly(tmp_path, monkeypatch):
    import importlib
    import shutil
    import sys
    pkg = tmp_path / "ddl_lab_copy" / "check"
    shutil.copytree(PKG / "check", pkg)
    (pkg / "zz_clash.py").write_text("__all__ = ['CheckFailed']\nCheckFailed = None\n")
    (pkg.parent / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = (pkg / "__init__.py").read_text()
    assert "exported by both" in text
    with pytest.raises(ImportError, match="exported by both"):
        importlib.import_module("ddl_lab_copy.check")
    sys.modules.pop("ddl_lab_copy.check", None)
