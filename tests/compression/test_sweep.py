"""Lesson 08's sweep over Strom's τ: the encoder's bytes fall as τ grows, the sweep trains
on real workers and reports what its messages measured, and its picture draws both curves."""
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from ddl_lab.compression import plots
from ddl_lab.compression import training as ct
from ddl_lab.compression.compressors import ErrorFeedback, Scheme, Threshold
from ddl_lab.compression.sweep import FACTORS, TauSweep, first_gradient, tau_grid, tau_sweep


@pytest.fixture(scope="module")
def grad():
    return first_gradient()


def minibatch_gradients(steps=20):
    """The first ``steps`` minibatch gradients of rank 0's shard at the initial model."""
    net, X, y, _, per_epoch, gen = ct.setup("mlp", 0, 16, 4, 0)
    return [ct.gradient(net, X[b], y[b])[0]
            for b in ct.batches(len(y), 16, per_epoch, steps, gen)]


def test_first_gradient_is_the_runs_first_minibatch_gradient(grad):
    assert grad.shape == (8970,) and grad.dtype == torch.float32
    assert torch.equal(grad, minibatch_gradients(1)[0])


def test_tau_grid_is_ascending_and_scaled_to_the_largest_entry(grad):
    taus = tau_grid(grad)
    top = float(grad.abs().max())
    assert len(taus) == len(FACTORS) and np.all(np.diff(taus) > 0)
    assert np.allclose(taus, np.array(FACTORS) * top, rtol=0.05)     # two significant digits
    assert np.allclose(tau_grid(16 * grad), 16 * taus, rtol=0.05)   # τ grows with the gradient


@pytest.mark.parametrize("bad, match", [
    ((torch.zeros(5), FACTORS), "all zeros"),
    ((torch.ones(5), ()), "positive"),
    ((torch.ones(5), (0.5, -1)), "positive"),
])
def test_tau_grid_refuses_what_gives_no_scale(bad, match):
    with pytest.raises(ValueError, match=match):
        tau_grid(*bad)


def test_uncoded_message_shrinks_as_tau_grows_on_a_fixed_gradient(grad):
    # A larger τ sends a subset of the entries: fewer sign bits, and two gaps merged into one
    # varint never take more bytes than the two did, so without an entropy coder it is exact.
    taus = np.geomspace(1e-5, 1.0, 40)
    sizes = [len(Threshold(float(t), coder="none").encode(grad)) for t in taus]
    assert all(b <= a for a, b in zip(sizes, sizes[1:]))
    assert sizes[0] > 20 * sizes[-1]


def test_coded_message_shrinks_as_tau_grows_over_the_sweeps_range(grad):
    # deflate is not monotone in its input: below the sweep's range, where nearly every
    # entry is sent, the gaps are all 1 and code to almost nothing, so a slightly larger τ
    # (fewer entries, irregular gaps) can cost more. From max|g|/128 up it shrinks, give or
    # take a few bytes of the coder's.
    taus = np.geomspace(1e-5, 1.0, 40)
    sizes = np.array([len(Threshold(float(t)).encode(grad)) for t in taus])
    assert sizes[0] < sizes.max()                                  # the hump below the range
    ours = sizes[taus >= tau_grid(grad).min()]
    assert all(b <= a + 8 for a, b in zip(ours, ours[1:]))
    assert ours[0] > 20 * ours[-1]


def test_with_error_feedback_traffic_falls_over_the_sweeps_grid(grad):
    # The sweep's setting: error feedback over a fixed sequence of real gradients.
    gradients = minibatch_gradients()
    totals = []
    for tau in tau_grid(grad):
        ef = ErrorFeedback(Threshold(float(tau)))
        totals.append(sum(len(ef.encode(g)) for g in gradients))
    assert all(b < a for a, b in zip(totals, totals[1:]))
    assert totals[0] < 4 * grad.numel() * len(gradients) / 10     # sign bits, not floats


@pytest.fixture(scope="module")
def sweep(cluster4):
    return tau_sweep(cluster4, factors=(1 / 128, 8.0), epochs=1)


def test_sweep_reports_what_the_runs_measured(sweep, cluster4, grad):
    assert isinstance(sweep, TauSweep)
    assert sweep.epochs == 1 and sweep.world_size == 4
    assert sweep.scale == float(grad.abs().max())
    assert np.array_equal(sweep.taus, tau_grid(grad, (1 / 128, 8.0)))
    assert sweep.fp32_bytes == 4 * 8970
    # synchronous runs with fixed seeds are deterministic: the same run again gives the same
    fp32 = ct.run(cluster4, Scheme("fp32"), epochs=1)
    big = ct.run(cluster4, Scheme("threshold", float(sweep.taus[-1]), ef=True), epochs=1)
    assert sweep.fp32_accuracy == fp32.final_accuracy
    assert sweep.update_bytes[-1] == big.update_bytes
    assert sweep.accuracy[-1] == big.final_accuracy
    assert np.allclose(sweep.reduction, 100 * (1 - sweep.update_bytes / sweep.fp32_bytes))


def test_sweep_spans_most_sent_to_almost_nothing_sent(sweep):
    low, high = sweep.reduction
    assert 80 < low < high < 100
    assert high > 99.9                         # τ beyond every entry: almost nothing sent
    assert 0 <= sweep.accuracy.min() and sweep.accuracy.max() <= 1
    assert sweep.accuracy[-1] < sweep.fp32_accuracy    # too little sent to keep up in 1 epoch


def test_sweep_table_has_a_row_per_tau_and_fp32(sweep):
    text = sweep.rows()
    lines = text.splitlines()
    assert len(lines) == 2 + len(sweep.taus)
    assert "fp32" in lines[1] and f"{100 * sweep.fp32_accuracy:.1f}%" in lines[1]
    assert f"{sweep.reduction[-1]:.2f}%" in lines[-1]


def made_up_sweep():
    return TauSweep(taus=np.array([0.001, 0.01, 0.1, 1.0]),
                    update_bytes=np.array([1000.0, 400.0, 100.0, 20.0]),
                    accuracy=np.array([0.5, 0.9, 0.8, 0.3]), fp32_bytes=40_000,
                    fp32_accuracy=0.92, scale=0.15, epochs=3, world_size=4)


def test_plot_tau_sweep_draws_accuracy_reference_and_reduction():
    s = made_up_sweep()
    fig, ax = plt.subplots()
    assert plots.plot_tau_sweep(s, ax=ax) is ax
    assert ax.get_xscale() == "log"
    acc, fp32 = ax.get_lines()
    assert np.allclose(acc.get_ydata(), 100 * s.accuracy)
    assert np.allclose(fp32.get_ydata(), 92.0)                  # the reference line
    right = next(a for a in fig.axes if a is not ax)
    assert right.get_yscale() == "logit"
    saved, mark = right.get_lines()
    assert np.allclose(saved.get_xdata(), s.taus)
    assert np.allclose(saved.get_ydata(), s.reduction / 100)
    assert np.allclose(mark.get_ydata(), 0.996) and "99.6%" in mark.get_label()
    assert len(ax.get_legend().get_texts()) == 4
    assert [t.get_text() for t in right.texts] == ["97.50%", "99.00%", "99.75%", "99.95%"]
    plt.close(fig)


def test_plot_tau_sweep_without_a_mark_on_the_current_axes():
    fig = plt.figure()
    ax = plots.plot_tau_sweep(made_up_sweep(), mark=None)
    assert ax is fig.axes[0] and len(fig.axes[1].get_lines()) == 1
    plt.close(fig)
