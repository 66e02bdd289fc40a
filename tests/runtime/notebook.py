"""A notebook's cells, emulated the way IPython runs them (for the runtime's tests).

Every cell runs in one namespace named ``__main__`` and compiles under a file name
of its own that is registered in ``linecache``, so dill pickles its functions by value
and a worker can show the cell's source lines.
"""
from __future__ import annotations

import itertools
import linecache
import os
import textwrap
from typing import Any

_CELLS = itertools.count(1)


class Notebook:
    """``nb = Notebook(torch=torch)``; ``nb.cell("def f(): ...")``; ``nb["f"]``."""

    def __init__(self, **names: Any):
        self.ns: dict[str, Any] = {"__name__": "__main__", **names}

    def cell(self, source: str) -> None:
        """Run one cell's source in the notebook's namespace."""
        source = textwrap.dedent(source)
        filename = f"/tmp/ipykernel_{os.getpid()}/{next(_CELLS)}.py"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), self.ns)

    def __getitem__(self, name: str) -> Any:
        return self.ns[name]
