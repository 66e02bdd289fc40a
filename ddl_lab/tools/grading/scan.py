"""What a submission's source reaches for, and what it justifies (``ddl-lab grade``).

``flags(nb)``: a static scan of the learner's code cells for what answers never need and
forgeries do — the checks' and the grader's private modules, frames (``sys._getframe``,
``inspect`` on callers, ``f_back``), ``gc`` referrers, ``builtins``, a function's code or
globals, assignments into imported modules (``dist.all_reduce = …``), ``setattr`` on
them, exits, the grader's environment or ``/proc``, a module or a course name looked up by
a name built at run time (``importlib.import_module``, ``__import__``, ``getattr``). A flag is for the instructor to look
at; it costs no points.

``justifications(nb, ex)``: the text of each markdown cell tagged ``justification``
(``metadata.ddl_lab.task``), without the exercise's own lines (what to justify, the
prompt); None where nothing was written.
"""
from __future__ import annotations

import ast
import re

import nbformat

from .discover import Exercise

PRIVATE = re.compile(r"\b(ddl_lab\.check\._\w+|_record|_core|_diagnose|_answers|"
                     r"ddl_lab\.tools\.grading|handover|wiretap|GRADING_SEED|SINK|grade_with|"
                     r"CheckFailed|DDL_LAB_GRADE\w*)\b")
CALLS = {"_getframe": "reads the call stack (sys._getframe)",
         "currentframe": "reads the call stack (inspect.currentframe)",
         "stack": None, "getouterframes": "reads callers' frames (inspect.getouterframes)",
         "get_referrers": "looks objects up through gc referrers",
         "get_referents": "looks objects up through gc referents",
         "get_objects": "walks every object through gc.get_objects",
         "_exit": "exits the process (os._exit)", "exit": None,
         "setattr": "sets attributes with setattr()", "settrace": "installs a tracer",
         "setprofile": "installs a profiler", "addaudithook": "installs an audit hook",
         "dup2": "rewires file descriptors (os.dup2)", "fdopen": "opens a file descriptor",
         "write": None, "read": None}
ATTRS = {"f_back": "walks frames (f_back)", "f_globals": "reads a frame's globals",
         "f_locals": "reads a frame's locals", "tb_frame": "reads a traceback's frames",
         "__code__": "reaches a function's code (__code__)",
         "__globals__": "reaches a function's globals (__globals__)",
         "__closure__": "reaches a function's closure", "__subclasses__": "walks subclasses",
         "__builtins__": "reaches builtins", "stdin": "reads the process's stdin"}
PROMPT = "_Your justification here (3–5 sentences)._"


def _imported(tree: ast.AST) -> set[str]:
    """The names modules are bound to in the cell (``dist``, ``torch``, ``check`` …)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _course(tree: ast.AST) -> set[str]:
    """The names the cell bound to the course's modules (``import ddl_lab.x as y`` …)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names
                      if a.name.startswith("ddl_lab")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ddl_lab"):
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                getattr(node.value.func, "attr", getattr(node.value.func, "id", "")) in (
                    "import_module", "__import__"):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def cell_flags(source: str, modules: set[str]) -> list[tuple[int, str]]:
    """``(line, what)`` for everything flagged in one cell's source; ``modules`` are the
    names the notebook bound to modules so far (extended in place)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    modules |= _imported(tree) | {"check", "builtins", "sys", "os"}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            text = " ".join([getattr(node, "module", "") or ""] + [a.name for a in node.names])
            if PRIVATE.search(text) or re.search(r"\b(builtins|gc|ctypes)\b", text):
                found.append((line, f"imports {text.strip()}"))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                and _root(node) in modules:
            found.append((line, f"assigns {ast.unparse(node)} (a module's attribute)"))
        elif isinstance(node, ast.Attribute) and PRIVATE.fullmatch(node.attr):
            found.append((line, f"reaches {ast.unparse(node)}"))
        elif isinstance(node, ast.Attribute) and ATTRS.get(node.attr):
            found.append((line, ATTRS[node.attr]))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else \
                getattr(node.func, "id", "")
            owner = _root(node.func) if isinstance(node.func, ast.Attribute) else None
            what = CALLS.get(name)
            if (name in ("stack", "exit") and owner in ("inspect", "sys")) or \
                    (name in ("write", "read") and owner == "os"):
                what = f"calls {owner}.{name} (a raw file descriptor)" if owner == "os" \
                    else f"calls {owner}.{name}"
            if what:
                found.append((line, what))
            if name in ("import_module", "__import__", "getattr") and any(
                    not isinstance(a, ast.Constant) for a in node.args[1 if name ==
                                                                         "getattr" else 0:2]) \
                    and (name != "getattr" or _root(node.args[0]) in _course(tree)):
                found.append((line, f"looks a {'module' if name != 'getattr' else 'name'} up "
                                    f"by a name built at run time ({name})"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.search(r"/proc/|DDL_LAB_GRADE|record\.jsonl|events\.jsonl|manifest-\d|link\.sock",
                                        node.value):
            found.append((line, f"names {node.value[:60]!r}"))
        elif isinstance(node, ast.ClassDef) and any(
                PRIVATE.search(ast.unparse(b)) for b in node.bases):
            found.append((line, f"subclasses {', '.join(ast.unparse(b) for b in node.bases)}"))
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "CheckFailed"):
            found.append((line, f"reaches {node.id}"))
    return sorted(set(found))


def flags(nb: nbformat.NotebookNode, limit: int = 40) -> list[str]:
    """Everything the scan flags in the learner's code cells (not the check cells, which
    grading replaces), as ``cell N, line L: what``."""
    said: list[str] = []
    modules: set[str] = set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "check" in cell.get("metadata", {}).get("tags", []):
            continue
        said += [f"cell {i + 1}, line {line}: {what}"
                 for line, what in cell_flags(cell.source, modules)]
    return said[:limit] + ([f"and {len(said) - limit} more"] if len(said) > limit else [])


def justification_cells(nb: nbformat.NotebookNode) -> dict[str, str]:
    """``{task: text}`` of the markdown cells tagged ``justification``."""
    found = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {})
        task = (meta.get("ddl_lab") or {}).get("task") if isinstance(meta.get("ddl_lab"),
                                                                    dict) else None
        if cell.cell_type == "markdown" and "justification" in meta.get("tags", []) and task:
            found[task] = cell.source
    return found


def justifications(nb: nbformat.NotebookNode, ex: Exercise) -> dict[str, str | None]:
    """What the learner wrote for each task the exercise asks to justify (None: nothing)."""
    asked = justification_cells(ex.nb)
    theirs = justification_cells(nb)
    out: dict[str, str | None] = {}
    for task, given in asked.items():
        keep = {ln.strip() for ln in given.splitlines() if ln.strip()} | {PROMPT}
        text = "\n".join(ln for ln in theirs.get(task, "").splitlines()
                         if ln.strip() and ln.strip() not in keep).strip()
        out[task] = text or None
    return out
