"""What a lesson shows as code, and how close a graded answer comes to it (issue 35: "a lesson
never shows a graded answer").

A lesson shows code two ways: its own code cells, and package code it prints with
``inspect.getsource(X)``. Each is cut into units (a top-level function or class, or a whole
cell without one). A solution's learner function is compared with every unit by the
similarity of their normalised token streams: names become ``N``, numbers ``0``, strings
``S``; comments, docstrings and layout are dropped, so renaming and reformatting do not hide
a copy. The similarity is difflib's ratio 2·M/T over the two token lists (M tokens matched
in order, T tokens in all): 1.0 for a copy, about 0.3 for two unrelated functions of a size.
"""
from __future__ import annotations

import ast
import difflib
import functools
import importlib
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ddl_lab.tools.notebooks import ROOT

GETSOURCE = re.compile(r"inspect\.getsource\(\s*([\w.]+)\s*\)")
SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
        tokenize.ENCODING, tokenize.ENDMARKER}


@dataclass(frozen=True)
class Unit:
    where: str          # "lessons/06_ring_allreduce.ipynb cell 12" or "printed ddl_lab.x.f"
    name: str           # the function's name, or "cell"
    source: str


@functools.lru_cache(maxsize=None)
def tokens(source: str) -> tuple[str, ...]:
    """The normalised token stream of ``source`` (see the module's docstring)."""
    tree = ast.parse(textwrap.dedent(source))
    for node in ast.walk(tree):                         # docstrings out
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            body.pop(0)
            if not body:
                body.append(ast.Pass())
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(ast.unparse(tree)).readline):
        if tok.type in SKIP:
            continue
        if tok.type == tokenize.NAME:
            out.append(tok.string if tok.string in KEYWORDS else "N")
        elif tok.type == tokenize.NUMBER:
            out.append("0")
        elif tok.type == tokenize.STRING:
            out.append("S")
        else:
            out.append(tok.string)
    return tuple(out)


KEYWORDS = {"def", "class", "return", "for", "in", "if", "else", "elif", "while", "with",
            "as", "not", "and", "or", "is", "None", "True", "False", "lambda", "yield",
            "try", "except", "finally", "raise", "import", "from", "pass", "break",
            "continue", "global", "nonlocal", "assert", "del", "await", "async"}


def similarity(a: str, b: str) -> float:
    ta, tb = tokens(a), tokens(b)
    return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio() if ta and tb else 0.0


def _units_of(source: str, where: str) -> list[Unit]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef,
                                                   ast.AsyncFunctionDef))]
    if not defs:
        return [Unit(where, "cell", source)] if source.strip() else []
    out = []
    for d in defs:
        out.append(Unit(where, d.name, ast.get_source_segment(source, d) or ""))
        if isinstance(d, ast.ClassDef):                 # each method too
            out += [Unit(where, f"{d.name}.{m.name}", ast.get_source_segment(source, m) or "")
                    for m in d.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return out


def _code(cell_source: str) -> str:
    """A cell's Python without IPython's magics and shell lines."""
    return "\n".join(line for line in cell_source.splitlines()
                     if not line.lstrip().startswith(("%", "!")))


def _resolve(dotted: str, names: dict[str, object]) -> object | None:
    head, *rest = dotted.split(".")
    obj = names.get(head)
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def _imported_names(cells: list[str]) -> dict[str, object]:
    """The names the lesson's import statements bind (only imports are run)."""
    names: dict[str, object] = {}
    for source in cells:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                for a in node.names:
                    mod = importlib.import_module(a.name)
                    names[a.asname or a.name.split(".")[0]] = (
                        mod if a.asname else importlib.import_module(a.name.split(".")[0]))
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                mod = importlib.import_module(node.module)
                for a in node.names:
                    value = getattr(mod, a.name, None)
                    if value is None:
                        try:
                            value = importlib.import_module(f"{node.module}.{a.name}")
                        except ImportError:
                            continue
                    names[a.asname or a.name] = value
    return names


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _printed(source: str) -> list[str]:
    """The dotted names a cell passes to ``inspect.getsource``, a loop's names expanded
    (``for fn in (a.f, a.g): print(inspect.getsource(fn))``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return GETSOURCE.findall(source)
    loops = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) \
                and isinstance(node.iter, (ast.Tuple, ast.List)):
            loops[node.target.id] = [d for d in map(_dotted, node.iter.elts) if d]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) == "inspect.getsource" \
                and node.args:
            name = _dotted(node.args[0])
            out += loops.get(name, [name]) if name else []
    return out


def shown_units(lesson: Path) -> list[Unit]:
    """Every unit of code ``lesson`` shows: its code cells and the package code it prints."""
    import inspect
    nb = nbformat.read(lesson, as_version=4)
    cells = [_code(c.source) for c in nb.cells if c.cell_type == "code"]
    rel = lesson.relative_to(ROOT)
    units = [u for i, s in enumerate(cells) for u in _units_of(s, f"{rel} code cell {i}")]
    names = _imported_names(cells)
    for source in cells:
        for dotted in _printed(source):
            obj = _resolve(dotted, names)
            if obj is None:
                raise LookupError(f"{rel} prints inspect.getsource({dotted}), which the "
                                  "lesson's imports do not resolve")
            units += _units_of(textwrap.dedent(inspect.getsource(obj)), f"{rel} prints {dotted}")
    return units


def learner_functions(solution: Path) -> list[Unit]:
    """Each function a solution's learner writes: a top-level def in a cell holding
    ``### BEGIN SOLUTION``, with the whole cell's defs (helpers included)."""
    nb = nbformat.read(solution, as_version=4)
    out = []
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code" and "### BEGIN SOLUTION" in c.source:
            source = "\n".join(line for line in c.source.splitlines()
                               if "### BEGIN SOLUTION" not in line
                               and "### END SOLUTION" not in line)
            out += [u for u in _units_of(_code(source), f"{solution.relative_to(ROOT)} cell {i}")
                    if u.name.startswith("my_")]
    return out


def closest(answer: Unit, shown: list[Unit]) -> tuple[float, Unit | None]:
    """The shown unit most like ``answer``, and how alike (pairs whose upper bound cannot
    beat the best so far are skipped)."""
    best: tuple[float, Unit | None] = (0.0, None)
    mine = tokens(answer.source)
    matcher = difflib.SequenceMatcher(None, autojunk=False)
    matcher.set_seq2(mine)
    for unit in shown:
        matcher.set_seq1(tokens(unit.source))
        if matcher.real_quick_ratio() > best[0] and matcher.quick_ratio() > best[0]:
            s = matcher.ratio()
            if s > best[0]:
                best = (s, unit)
    return best
