"""Grading a class: ``ddl-lab grade SUBMISSIONS`` and the nbgrader course export.

``grade(submissions, out)`` runs every submitted exercise notebook in a fresh kernel with
the course's own check cells and writes ``gradebook.csv``, ``report.html`` and one feedback
page per learner to ``out``. See ``grade.py`` for the pipeline and ``nbgrader.py`` for
the export.
"""
from .grade import Limits, grade
from .record import Learner

__all__ = ["grade", "Limits", "Learner"]
