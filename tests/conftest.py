"""Shared fixtures: one warm cluster per test module keeps the suite fast on 2 cores."""
import pytest

from ddl_lab.runtime import Cluster


@pytest.fixture(scope="module")
def cluster4():
    with Cluster(4, timeout=20) as c:
        yield c
