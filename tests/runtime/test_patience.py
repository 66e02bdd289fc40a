"""DDL_LAB_PATIENCE (runtime/patience.py): a factor from 1 to 100 that stretches every
default wait of the runtime and the checks (the suite sets 4); anything else is refused,
saying what to set. A torchrun job's deadline: tests/scaling_out/test_elastic.py."""
import inspect

import pytest

from ddl_lab.check import _core
from ddl_lab.runtime import Cluster, launch_with, worlds
from ddl_lab.runtime.cluster import RUN_TIMEOUT_S
from ddl_lab.runtime.patience import patience


def test_the_factor_is_read_and_what_is_not_a_factor_is_refused(monkeypatch):
    monkeypatch.setenv("DDL_LAB_PATIENCE", "2.5")
    assert patience() == 2.5
    monkeypatch.delenv("DDL_LAB_PATIENCE")
    assert patience() == 1.0
    for bad in ("slow", "0.5", "1e9"):
        monkeypatch.setenv("DDL_LAB_PATIENCE", bad)
        with pytest.raises(ValueError, match=r"set a number from 1 to 100"):
            patience()


def test_every_default_wait_is_stretched_and_a_passed_one_is_kept():
    factor = patience()                      # the suite's, read when the modules were imported
    if factor == 1:
        pytest.skip("DDL_LAB_PATIENCE=1: nothing is stretched (the suite's conftest sets 4)")
    assert (RUN_TIMEOUT_S, worlds.OP_TIMEOUT_S, worlds.CASES_TIMEOUT, _core.DEFAULT_TIMEOUT) \
        == (30.0 * factor, 15.0 * factor, 60.0 * factor, 20.0 * factor)
    assert inspect.signature(Cluster).parameters["timeout"].default == RUN_TIMEOUT_S
    assert inspect.signature(launch_with).parameters["timeout"].default == RUN_TIMEOUT_S
