"""The layout rule (CONTRIBUTING.md): a lesson's slug names its package, check, tests,
benchmark and exercise; the package has no import cycle and no oversized module; code
follows the course's order (a lesson imports earlier lessons only, shared layers import no
lesson, lessons import no checks or tooling, checks use lessons' public names only)."""
import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddl_lab.tools.notebooks import ROOT

PKG = ROOT / "ddl_lab"
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))
SLUGS = {p.stem[3:]: p.stem for p in LESSONS}
ORDER = {slug: int(stem[:2]) for slug, stem in SLUGS.items()}
# What stands in for a lesson's own benchmark, and why.
BENCH_ELSEWHERE = {"welcome": "runtime_bench.py measures what lesson 00 shows (start-up, round trip)"}
MAX_LINES = 520
# A lesson's checks are one module, named by its slug as its package is: a catalogue of the
# task's named mistakes, read one task (one section) at a time. Cutting it at MAX_LINES drew
# private satellite files (``_ring_allreduce_beyond.py`` …) that no concept called for.
MAX_CHECK_LINES = 1100


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


# ------------------------------------------------------------------ the course's order

# Code that several lessons share; none of it imports a lesson package, not even inside a
# function (what two lessons need moves down into a shared layer, CONTRIBUTING.md).
SHARED = ("ddl_lab/runtime/", "ddl_lab/ml/", "ddl_lab/timeline.py", "ddl_lab/widgets.py",
          "ddl_lab/active.py", "ddl_lab/torchrun.py")


@dataclass(frozen=True)
class Use:
    """A file's reference to ddl_lab: ``import module`` (name None), ``from module import
    name``, or reading ``alias.name`` where ``alias`` is bound by an import to ``module``."""
    line: int
    module: str
    name: str | None

    @property
    def path(self) -> list[str]:
        return self.module.split(".") + ([self.name] if self.name else [])


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _import_base(node: ast.ImportFrom, package: list[str]) -> str:
    base = node.module or ""
    if node.level:
        base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
    return base


def uses_of(path: Path, root: Path) -> list[Use]:
    """Every import of ddl_lab in ``path`` (module level and inside functions) and every
    ``alias._x`` read through a name an import binds to a ddl_lab module or object."""
    parts = path.relative_to(root).with_suffix("").parts
    here = list(parts[:-1] if parts[-1] == "__init__" else parts)
    package = here if path.name == "__init__.py" else here[:-1]
    tree = ast.parse(path.read_text())
    bound: dict[str, str] = {}                 # name -> the dotted path an import binds it to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update({a.asname: a.name for a in node.names if a.asname})
            bound.update({a.name.split(".")[0]: a.name.split(".")[0]
                          for a in node.names if not a.asname})
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, package)
            bound.update({a.asname or a.name: f"{base}.{a.name}" for a in node.names})
    found: list[Use] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(Use(node.lineno, a.name, None) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _import_base(node, package)
            found.extend(Use(node.lineno, base, a.name) for a in node.names)
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            dotted = _dotted(node.value, bound)
            if dotted:
                found.append(Use(node.lineno, dotted, node.attr))
    return [u for u in found if u.path[0] == "ddl_lab"]


def _dotted(node: ast.AST, bound: dict[str, str]) -> str | None:
    """``a.b.c`` as a dotted path from what an import bound ``a`` to (None: not bound so)."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value, bound)
        return f"{head}.{node.attr}" if head else None
    return None


def layer_violations(root: Path, order: dict[str, int]) -> list[str]:
    """Every breach of the course's order in ``root/ddl_lab``, as 'file:line: rule (x): …':
    (a) lesson k imports lessons ≤ k only; (b) shared layers import no lesson;
    (c) lessons import nothing from ddl_lab.check or ddl_lab.tools;
    (d) checks use no private (``_``) name of a lesson package."""
    out = []
    for file in sorted((root / "ddl_lab").rglob("*.py")):
        rel = file.relative_to(root).as_posix()
        mine = rel.split("/")[1] if rel.count("/") > 1 else None
        for u in uses_of(file, root):
            target = u.path[1] if len(u.path) > 1 else None
            what, at = ".".join(u.path), f"{rel}:{u.line}: "
            if mine in order and target in order and order[target] > order[mine]:
                out.append(at + f"rule (a): lesson {order[mine]:02d} ({mine}) imports {what}, from "
                           f"lesson {order[target]:02d}; move the code to the lesson that first "
                           "teaches it, or to a shared layer")
            if rel.startswith(SHARED) and target in order:
                out.append(at + f"rule (b): shared code imports the lesson package {what}")
            if mine in order and target in ("check", "tools"):
                out.append(at + f"rule (c): the lesson package {mine} imports {what}; lessons "
                           "import neither the checks nor the tooling")
            if mine == "check" and target in order and any(map(_private, u.path[2:])):
                out.append(at + f"rule (d): a check uses {what}, a private name of lesson "
                           f"{order[target]:02d}; make it public in its module, or do without")
    return out


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


def _cap(path: Path) -> int:
    return MAX_CHECK_LINES if path.parent == PKG / "check" and path.stem in SLUGS else MAX_LINES


def test_no_module_is_too_long_to_read_in_one_sitting():
    long = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > _cap(p)}
    assert not long, (f"modules over {MAX_LINES} lines (a lesson's check module: "
                      f"{MAX_CHECK_LINES}; split them): {long}")


def test_a_lesson_s_checks_live_in_its_one_check_module():
    satellites = [p.name for p in (PKG / "check").glob("_*.py")
                  if any(p.stem.startswith(f"_{slug}_") for slug in SLUGS)]
    assert not satellites, f"a lesson's checks belong in check/<slug>.py: {satellites}"


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


def test_code_follows_the_course_order():
    found = layer_violations(ROOT, ORDER)
    assert not found, "code out of the course's order:\n" + "\n".join(found)


PLANTED = {  # a small tree of lessons "early" (00), "late" (01), "ring_allreduce" (02)
    "ddl_lab/early/engine.py": "from ddl_lab.late.engine import helper\n"          # (a) 1
                               "def public():\n"
                               "    import ddl_lab.late\n"                         # (a) 3
                               "def _rows():\n"
                               "    return []\n",
    "ddl_lab/late/engine.py": "from ddl_lab.early.engine import public\n"          # fine
                              "from ..check import _core\n"                         # (c) 2
                              "def helper():\n"
                              "    from ddl_lab import tools\n"                     # (c) 4
                              "def _hidden():\n"
                              "    pass\n",
    "ddl_lab/ring_allreduce/cost.py": "FACTOR = 2\n",
    "ddl_lab/runtime/core.py": "from ddl_lab.early import engine\n",               # (b) 1
    "ddl_lab/runtime/wiretap.py": "from ddl_lab.ring_allreduce.cost import FACTOR\n"  # (b) 1
                                  "def factor():\n"
                                  "    from ddl_lab.ring_allreduce.cost import FACTOR\n"  # (b) 3
                                  "    from ddl_lab.ring_allreduce import cost\n"  # (b) 4
                                  "    from ddl_lab.ring_allreduce import engine\n",  # (b) 5
    "ddl_lab/timeline.py": "import ddl_lab.late.engine as late\n",                # (b) 1
    "ddl_lab/check/early.py": "from ddl_lab.early.engine import _rows, public\n"   # (d) 1
                              "from ddl_lab.early import engine as E\n"
                              "import ddl_lab.late.engine\n"
                              "from ._core import fail\n"                          # fine
                              "def check():\n"
                              "    E._rows()\n"                                   # (d) 6
                              "    ddl_lab.late.engine._hidden()\n"                # (d) 7
                              "    return E.__name__, public\n",                   # fine
    "ddl_lab/tools/peek.py": "from ddl_lab.late.engine import _hidden\n",          # fine
}


def test_the_order_rules_catch_planted_breaches(tmp_path):
    for rel, text in PLANTED.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    found = layer_violations(tmp_path, {"early": 0, "late": 1, "ring_allreduce": 2})
    got = sorted(re.match(r"(\S+:\d+): rule \((\w)\)", f).groups() for f in found)
    assert got == sorted([
        ("ddl_lab/check/early.py:1", "d"), ("ddl_lab/check/early.py:6", "d"),
        ("ddl_lab/check/early.py:7", "d"),
        ("ddl_lab/early/engine.py:1", "a"), ("ddl_lab/early/engine.py:3", "a"),
        ("ddl_lab/late/engine.py:2", "c"), ("ddl_lab/late/engine.py:4", "c"),
        ("ddl_lab/runtime/core.py:1", "b"), ("ddl_lab/runtime/wiretap.py:1", "b"),
        ("ddl_lab/runtime/wiretap.py:3", "b"), ("ddl_lab/runtime/wiretap.py:4", "b"),
        ("ddl_lab/runtime/wiretap.py:5", "b"),
        ("ddl_lab/timeline.py:1", "b")]), "\n".join(found)
    assert any("ddl_lab/early/engine.py:1: rule (a): lesson 00 (early) imports "
               "ddl_lab.late.engine.helper, from lesson 01" in f for f in found)
