"""Grading a class: ``ddl-lab grade SUBMISSIONS`` and the nbgrader course export.

``grade(submissions, out)`` runs every submitted exercise notebook in a fresh kernel with
the course's own check cells and writes ``gradebook.csv``, ``report.html`` and one feedback
page per learner to ``out``. See ``grade.py`` for the pipeline and ``nbgrader.py`` for
the export.

What it guards against: edited, deleted or untagged check cells, printed pass lines,
checks called from the learner's own cells, hangs, crashes, floods of output, stray
processes; and, by design, anything the learner's code does to the checks: the notebook
runs in an OS sandbox (``sandbox.py``), and the verdicts are reached in a judge process
that never runs learner code and reads only plain data from the sandbox (``judge.py``,
``link.py``, ``plain.py``). README, "Grading a class", says what is and is not protected.
"""
from ddl_lab.tools import skip_iri_check

skip_iri_check()            # before nbformat: every process of the grader imports it

from .grade import Limits, grade  # noqa: E402
from .record import Learner  # noqa: E402

__all__ = ["grade", "Limits", "Learner"]
