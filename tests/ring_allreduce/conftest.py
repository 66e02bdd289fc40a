"""Lesson 06's tests share one warm 3-rank cluster."""
import pytest

from ddl_lab.runtime import shared_cluster


@pytest.fixture(scope="module")
def cluster3():
    return shared_cluster(3)
