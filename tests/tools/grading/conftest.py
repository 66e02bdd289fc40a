"""The toy course of the grading suites (toy_course.py), written once per module."""
import os

import pytest

from .toy_course import write_course


@pytest.fixture(scope="module")
def toy_course(tmp_path_factory):
    """The toy course, its checks module importable here and in every process the grader
    starts (PYTHONPATH)."""
    folder = tmp_path_factory.mktemp("toy")
    course = write_course(folder)
    checks = str(folder / "checks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(
            [checks] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        yield course
