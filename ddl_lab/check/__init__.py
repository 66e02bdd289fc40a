"""Graded checks, one function per task, called from the cell after the learner's code.

``check.welcome_rank(my_rank)`` prints a pass line or raises ``CheckFailed`` with a
message that says what is wrong. Each lesson's checks live in
``ddl_lab/check/<topic>.py`` (named like the lesson's module) and are exported here
through that module's ``__all__``.
"""
import importlib
import pkgutil

from ._core import CheckFailed

__all__ = ["CheckFailed"]

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        _mod = importlib.import_module(f".{_info.name}", __name__)
        for _name in _mod.__all__:
            globals()[_name] = getattr(_mod, _name)
            __all__.append(_name)
