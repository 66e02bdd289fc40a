"""Grading a class: ``ddl-lab grade SUBMISSIONS`` and the nbgrader course export.

``grade(submissions, out)`` runs every submitted exercise notebook in a fresh kernel with
the course's own check cells and writes ``gradebook.csv``, ``report.html`` and one feedback
page per learner to ``out``. See ``grade.py`` for the pipeline and ``nbgrader.py`` for
the export.

What it guards against: edited, deleted or untagged check cells, printed pass lines,
checks called from the learner's own cells, hangs, crashes, floods of output, stray
processes; and, since verdicts are reached in a judge process no learner cell ran in
(``judge.py``), anything a learner's cells do to the checks in their kernel. The learner's
function still runs in the judge with its privileges: a change it leaves behind in the
check machinery (in the judge or on its workers) is caught by fingerprints and graded
"tampered"; source reaching for private state is flagged (``scan.py``). README, "Grading
a class", says what is and is not protected.
"""
from .grade import Limits, grade
from .record import Learner

__all__ = ["grade", "Limits", "Learner"]
