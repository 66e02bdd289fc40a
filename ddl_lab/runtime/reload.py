"""Workers never run stale copies of the learner's own modules (lesson 00).

A learner's ``helpers.py`` next to the notebook, edited after the workers imported it,
is reloaded in each worker before the next task; the parent prints one line naming it.
Installed packages (``ddl_lab`` included, even as an editable install), the standard
library and everything under the Python prefix are never reloaded.
"""
from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import types

_PREFIXES = tuple({os.path.realpath(p) + os.sep for p in
                   (sys.prefix, sys.base_prefix, sys.exec_prefix,
                    *sysconfig.get_paths().values())})


class ModuleWatch:
    """Remembers when each candidate module's file last changed (worker side)."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, int] | None] = {}   # name -> (mtime_ns, size)
        self.installed: set[str] | None = None              # top-level installed names

    def record(self) -> None:
        """Note every module imported since the last call."""
        for name, module in list(sys.modules.items()):
            if name not in self.seen:
                path = _source(module)
                self.seen[name] = _stamp(path) if path else None

    def reload_changed(self) -> list[str]:
        """Reload the learner's modules whose file changed; their names, in import order."""
        changed = []
        for name, stamp in list(self.seen.items()):
            module = sys.modules.get(name)
            if stamp is None or module is None:
                continue
            now = _stamp(_source(module) or "")
            if now != stamp and now is not None:
                self.seen[name] = now
                if self._is_users(name):
                    changed.append(name)
        for name in changed:
            importlib.reload(sys.modules[name])
        return changed

    def _is_users(self, name: str) -> bool:
        if self.installed is None:
            from importlib.metadata import packages_distributions
            self.installed = set(packages_distributions())
        return name.partition(".")[0] not in self.installed


def _source(module: types.ModuleType) -> str | None:
    """The module's .py file when it may be the learner's own, else None."""
    path = getattr(module, "__file__", None)
    name = getattr(module, "__name__", "")
    if (not isinstance(path, str) or not path.endswith(".py") or name in ("__main__", "__mp_main__")
            or name.partition(".")[0] in sys.stdlib_module_names):
        return None
    return None if os.path.realpath(path).startswith(_PREFIXES) else path


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size
