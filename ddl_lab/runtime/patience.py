"""How long the course's default waits are on this machine (``DDL_LAB_PATIENCE``).

Every default wait of the runtime — a cluster's run, a check's deadlock limit, a job
started with ``run_jobs`` — is a number of seconds chosen for a learner's laptop. On a
machine so busy that a rank can sit unscheduled for seconds (the test suite runs two
pytest workers and a browser on two cores, and sets 4), those defaults would read a slow
peer as a hang; the factor stretches them. A timeout a caller passes is left as it is.
"""
from __future__ import annotations

import os


def patience() -> float:
    """How many times longer than usual the course's default waits are (``DDL_LAB_PATIENCE``,
    a number from 1 to 100; default 1)."""
    value = os.environ.get("DDL_LAB_PATIENCE", "1")
    try:
        factor = float(value)
    except ValueError:
        factor = 0.0
    if not 1 <= factor <= 100:
        raise ValueError(f"DDL_LAB_PATIENCE={value!r}: set a number from 1 to 100 (how many "
                         "times the usual timeouts a check waits), or unset it")
    return factor
