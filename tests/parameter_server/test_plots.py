"""Lesson 07's pictures, drawn from real runs: one panel per plot_*, a figure per figure_*."""
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ddl_lab.parameter_server import downpour as D
from ddl_lab.parameter_server import plots
from ddl_lab.parameter_server import sandblaster as S
from ddl_lab.parameter_server.problem import emulation


@pytest.fixture(scope="module")
def runs():
    problem = D.digits_problem(example_cost=10e-6)
    base = D.Setup(replicas=2, shards=1, steps=30, batch=16, timeout=15.0)
    return D.compare(problem, {"BSP": dict(mode="bsp"), "async": dict(mode="async")}, base)


def test_one_panel_plots_draw_every_run_on_the_axes_they_are_given(runs):
    fig, (a, b, c) = plt.subplots(1, 3)
    assert plots.plot_loss(runs, a, target=0.5) is a
    assert [line.get_label() for line in a.lines][:2] == ["BSP", "async"]
    assert plots.plot_staleness(runs, b) is b
    assert len(b.patches) == 2                       # one step histogram per run
    assert plots.plot_time_split(runs, c) is c
    assert len(c.get_yticklabels()) == 4             # 2 runs × 2 replicas
    plt.close(fig)


def test_figures_hold_a_timeline_per_run(runs):
    fig = plots.figure_consistency(runs, target=0.5)
    assert len(fig.axes) == 4                        # 2 timelines, loss, staleness
    assert [ax.get_title(loc="left") for ax in fig.axes[:2]] == ["BSP", "async"]
    assert len(plots.figure_run(runs["async"]).axes) == 3
    assert len(plots.figure_timelines(runs).axes) == 2
    plt.close("all")


def test_times_say_they_are_emulated(runs):
    """Padded compute and a straggler are named, with their numbers, where times are shown."""
    assert "10 µs per example" in runs["async"].emulated
    fig = plots.figure_consistency(runs)
    assert "emulated" in fig._suptitle.get_text()
    assert "emulated" in plots.plot_loss(runs, note=True).get_xlabel()
    assert "(times emulated: compute padded to 10 µs" in D.time_to_target_table(runs, 0.5)
    slow = D.Setup(replicas=2, slow=3.0)
    assert "replica 1 ×3" in emulation(0.0, 16, slow.slowness())
    assert emulation(0.0, 16, [1.0, 1.0]) == ""
    plt.close("all")


def test_distbelief_figure_has_loss_accuracy_and_work():
    problem = D.digits_problem(example_cost=0.0)
    lbfgs = S.run(problem, replicas=2, shards=1, iterations=2, slices=4)
    fig = plots.figure_distbelief({"L-BFGS": lbfgs})
    assert len(fig.axes) == 3
    np.testing.assert_array_equal(fig.axes[0].lines[0].get_ydata(), lbfgs.loss)
    assert plots.plot_batch_times({"L-BFGS": lbfgs}).get_ylabel() == "ms"
    assert lbfgs.emulated == "" and fig._suptitle is None     # real numpy compute
    plt.close("all")
