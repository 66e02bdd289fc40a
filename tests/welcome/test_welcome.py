"""Lesson 00's worker functions on real ranks, and its picture drawn from them."""
import math

import matplotlib.pyplot as plt
import pytest

from ddl_lab import welcome
from ddl_lab.runtime import shared_cluster
from ddl_lab.welcome.plots import figure_pi


@pytest.fixture(scope="module")
def cluster2():
    return shared_cluster(2)


def test_sum_of_ranks_is_the_same_on_every_rank(cluster2):
    assert cluster2.run(welcome.sum_of_ranks) == [1, 1]


def test_monte_carlo_pi_combines_every_rank_and_the_picture_shows_it(cluster2):
    results = cluster2.run(welcome.monte_carlo_pi, 20_000, 3)
    assert [r["rank"] for r in results] == [0, 1]
    assert results[0]["pi"] == results[1]["pi"]                        # one all_reduce
    assert results[0]["pi"] == pytest.approx(sum(r["local_pi"] for r in results) / 2)
    assert abs(results[0]["pi"] - math.pi) < 0.1
    fig = figure_pi(results)
    estimates, times = fig.axes
    assert [p.get_height() for p in estimates.patches] == [r["local_pi"] for r in results]
    assert len(times.patches) == 4                                     # compute + comm per rank
    plt.close(fig)
