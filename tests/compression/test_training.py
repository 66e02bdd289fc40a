"""Training with encoded updates on real workers (lesson 08): bytes counted, replicas agree."""
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import torch.distributed as dist

from ddl_lab.compression import plots
from ddl_lab.compression import training as ct
from ddl_lab.compression.compressors import FP32, Scheme
from ddl_lab.ml.models import flat_params, set_flat_params
EPOCHS = 2          # 2 × 21 steps of 4 × 16 examples: about a second a run


def gather_messages():
    rank = dist.get_rank()
    return ct.all_gather_bytes(bytes([rank]) * (3 * rank))     # rank 0 sends nothing


def test_all_gather_bytes_delivers_messages_of_different_lengths(cluster4):
    got = cluster4.run(gather_messages)
    want = [bytes([r]) * (3 * r) for r in range(4)]
    assert got == [want] * 4


def test_all_gather_bytes_of_empty_messages(cluster4):
    assert cluster4.run(ct.all_gather_bytes, b"") == [[b""] * 4] * 4


def simulate_fp32(n=4, epochs=EPOCHS, batch_size=16, lr=0.3, seed=0):
    """The same synchronous SGD in one process: average the n ranks' gradients."""
    ranks = [ct.setup("mlp", seed, batch_size, n, r) for r in range(n)]
    net = ranks[0][0]
    theta = flat_params(net)
    per_epoch = ranks[0][4]
    batches = [ct.batches(len(y), batch_size, per_epoch, epochs * per_epoch, gen)
               for _, _, y, _, _, gen in ranks]
    for _ in range(epochs * per_epoch):
        update = torch.zeros_like(theta)
        for (_, X, y, *_), it in zip(ranks, batches):
            b = next(it)
            set_flat_params(net, theta)
            update += ct.gradient(net, X[b], y[b])[0]
        theta -= lr * update / n
    return theta


@pytest.fixture(scope="module")
def fp32_logs(cluster4):
    return cluster4.run(ct.train_worker, Scheme("fp32"), epochs=EPOCHS)


@pytest.fixture(scope="module")
def fp32(fp32_logs):
    return ct.merge_logs(fp32_logs)


def test_fp32_exchange_is_plain_synchronous_sgd(fp32_logs, fp32):
    assert np.allclose(fp32_logs[0].params, simulate_fp32().numpy(), atol=1e-6)
    assert fp32.spread == 0                      # every replica took the same steps
    assert fp32.final_accuracy > 0.6


def test_fp32_bytes_are_four_per_parameter_per_rank(fp32):
    assert fp32.numel == 64 * 64 + 64 + 64 * 64 + 64 + 64 * 10 + 10
    assert np.all(fp32.sent == 4 * fp32.numel * 4)
    assert fp32.update_bytes == fp32.fp32_bytes and fp32.reduction == 1
    assert fp32.total_bytes == len(fp32.loss) * 4 * fp32.fp32_bytes
    assert fp32.bytes_at_evals()[-1] == fp32.total_bytes


def test_threshold_with_residual_sends_far_fewer_bytes_and_still_learns(fp32, cluster4):
    r = ct.run(cluster4, Scheme("threshold", 0.1, ef=True), epochs=EPOCHS)
    assert r.label == "threshold τ=0.1 + EF" and r.spread == 0
    assert r.reduction > 100
    assert r.residual.min() > 0
    assert r.final_accuracy > 0.2                # slow at first (the lecture's first downside)
    assert set(r.times_ms) == {"gradient", "encode", "exchange", "decode"}


def test_a_compressor_object_runs_as_is(cluster4):
    r = ct.run(cluster4, FP32(), epochs=1)
    assert r.label == "fp32" and r.reduction == 1


def test_asynchronous_peers_end_with_the_same_model(cluster4):
    steps = 30
    r = ct.run_async(cluster4, Scheme("threshold", 0.1, ef=True), steps=steps)
    assert r.spread < 1e-5                        # all updates applied, in any order
    assert r.lag.size == 4 * 3 * steps            # every rank got every peer's updates
    assert r.reduction > 50
    assert len(r.loss) == steps and r.eval_steps[-1] == steps


def test_bounded_staleness_bounds_the_lag(cluster4):
    r = ct.run_async(cluster4, Scheme("top-k", 0.01, ef=True), steps=30, max_lag=1)
    assert r.lag.size == 4 * 3 * 30 and r.spread < 1e-5
    assert np.abs(r.lag).max() <= 2
    ax = plots.plot_lag({"bounded": r}, ax=plt.figure().gca())      # a fresh axes of its own
    assert sum(p.get_height() for p in ax.patches) == r.lag.size
    plt.close(ax.figure)


def test_ddp_hooks_count_what_they_allreduce(cluster4):
    res = {h: ct.run_ddp(cluster4, h, epochs=1) for h in ct.HOOKS}
    assert res["fp32"].update_bytes == res["fp32"].fp32_bytes
    assert res["fp16"].update_bytes == res["fp32"].fp32_bytes / 2
    assert res["powersgd"].reduction > 5
    assert all(r.spread < 1e-5 for r in res.values())
    assert res["powersgd"].label == "DDP powersgd rank 1"


def count_inside_and_after():
    with ct.count_allreduce_bytes() as counter:
        dist.all_reduce(torch.ones(10))
    dist.all_reduce(torch.ones(5))
    return counter.bytes


def test_allreduce_counter_counts_and_restores(cluster4):
    assert cluster4.run(count_inside_and_after) == [40] * 4


@pytest.mark.parametrize("call, match", [
    (lambda c: ct.run(c, Scheme("fp32"), model="resnet"), "unknown model"),
    (lambda c: ct.run(c, Scheme("fp32"), batch_size=1000), "larger than a shard"),
    (lambda c: ct.run_ddp(c, "int8"), "unknown hook"),
    (lambda c: ct.run(c, "fp32"), "expected a Scheme or a Compressor"),
    (lambda c: ct.run_async(c, Scheme("fp32"), max_lag=-1), "max_lag must be >= 0"),
])
def test_bad_options_are_clear_errors(cluster4, call, match):
    with pytest.raises(Exception, match=match):
        call(cluster4)


def test_table_and_pictures(fp32):
    text = ct.table([fp32, fp32])
    assert "58.4 MB" in text and "29.2 MB" in text and "35.9 KB" in text
    fig, axes = plt.subplots(2, 2)
    assert plots.plot_accuracy_vs_bytes([fp32], ax=axes[0, 0]).get_xscale() == "log"
    assert len(plots.plot_residual([fp32], ax=axes[0, 1]).lines) == 0    # fp32 has no residual
    assert len(plots.plot_early([fp32], steps=10, ax=axes[1, 0]).lines[0].get_xdata()) == 10
    assert len(plots.plot_step_costs([fp32], ax=axes[1, 1]).patches) == 4
    plt.close(fig)
    scheme = plots.figure_scheme(fp32, fp32)
    assert len(scheme.axes) == 2 and scheme.axes[1].get_title() == "training loss"
    plt.close(scheme)
