"""Graded checks, one function per task, called from the cell after the learner's code.

``check.rank(my_rank)`` prints a pass line or raises ``CheckFailed`` with a
message that says what is wrong. Each lesson's checks live in
``ddl_lab/check/<slug>.py`` (named by the lesson's slug) and are exported here through
that module's ``__all__``; each is declared once with ``@task(lesson, refuses=...)``
(``check/_core.py``), which names the task its verdicts are recorded under. Two modules
exporting one name, or an undeclared check, is an error.
"""
import importlib
import pkgutil

from ._core import CheckFailed

__all__ = ["CheckFailed"]
_owner: dict[str, str] = {"CheckFailed": "_core"}

for _info in pkgutil.iter_modules(__path__):
    if not _info.name.startswith("_"):
        _mod = importlib.import_module(f".{_info.name}", __name__)
        for _name in _mod.__all__:
            if _name in _owner:
                raise ImportError(f"check {_name!r} is exported by both check/{_owner[_name]}.py "
                                  f"and check/{_info.name}.py: rename one")
            _owner[_name] = _info.name
            _declared = getattr(getattr(_mod, _name), "task", None)
            if _declared is None or _declared.lesson != _info.name:
                raise ImportError(f"check {_name!r} in check/{_info.name}.py is not declared "
                                  f'with @task("{_info.name}") (check/_core.py)')
            globals()[_name] = getattr(_mod, _name)
            __all__.append(_name)
