"""Graded checks, one function per task: ``check.rank(my_rank)`` prints a pass line or raises
``CheckFailed`` saying what is wrong. Each lesson's checks live in ``check/<slug>.py``, are
declared with ``@task`` (``_core.TASKS``, the one registry) and are listed here, lesson by
lesson (``tests/tools/test_tasks.py``)."""
from importlib import import_module as _import

from ._core import CheckFailed

# the lessons' check modules in the course's order; each module's __all__ lists its checks
LESSONS = ("welcome", "gradient_descent", "parallel_models", "hogwild", "message_passing",
           "data_parallel", "ring_allreduce", "parameter_server", "compression", "model_parallel",
           "memory", "scaling_out", "transformers", "performance", "experts", "capstone")
__all__ = ["CheckFailed"]
for _slug in LESSONS:
    _lesson = _import(f"{__name__}.{_slug}")
    globals().update({name: getattr(_lesson, name) for name in _lesson.__all__})
    __all__ += _lesson.__all__
