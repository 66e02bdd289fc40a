"""Grading a class: ``ddl-lab grade SUBMISSIONS`` and the nbgrader course export.

``grade(submissions, out)`` runs every submitted exercise notebook in a fresh kernel with
the course's own check cells and writes ``gradebook.csv``, ``report.html`` and one feedback
page per learner to ``out``. See ``grade.py`` for the pipeline and ``nbgrader.py`` for
the export.

What it guards against: edited, deleted or untagged check cells, printed pass lines,
checks called from the learner's own cells, hangs, crashes, floods of output, stray
processes. What it does not: code written to forge the record from inside the kernel —
the learner's code and the checks share one process, as they do under nbgrader.
"""
from .grade import Limits, grade
from .record import Learner

__all__ = ["grade", "Limits", "Learner"]
