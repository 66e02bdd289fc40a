"""Synchronous SGD, parameter averaging, local SGD and DMB on real workers (lesson 05)."""
import functools

import numpy as np
import pytest
import torch

from ddl_lab.data_parallel import measure, plots, workloads
from ddl_lab.data_parallel import engine as D
from ddl_lab.ring_allreduce import engine as R
from ddl_lab.runtime import shared_cluster


@pytest.fixture(scope="module")
def cluster3():
    return shared_cluster(3)


def test_sync_sgd_is_single_process_sgd(cluster3):
    runs = cluster3.run(D.sync_sgd, "linreg", 12, 48, 0.05, eval_every=4)
    ref = measure.replay_single_process("linreg", 12, 48, 0.05, 3)
    for r in runs:
        assert torch.allclose(r.params, ref, atol=1e-5)         # every replica, same model
    losses = [e[3] for e in runs[0].evals]
    assert [e[0] for e in runs[0].evals] == [4, 8, 12] and losses[-1] < losses[0]
    ring = cluster3.run(D.sync_sgd, "linreg", 12, 48, 0.05,
                        allreduce=functools.partial(R.allreduce, algorithm="ring"))
    assert torch.allclose(ring[0].params, ref, atol=1e-5)


def test_averaging_every_step_equals_sync_sgd(cluster3):
    sync = cluster3.run(D.sync_sgd, "linreg", 10, 30, 0.05)
    avg = cluster3.run(D.local_sgd, "linreg", 10, 30, 0.05, sync_every=1)
    assert torch.allclose(sync[0].params, avg[0].params, atol=1e-5)
    assert avg[0].rounds == 10


def test_local_sgd_periods(cluster3):
    runs = cluster3.run(D.local_sgd, "linreg", 12, 30, 0.05, sync_every=4)
    assert [e[0] for e in runs[0].evals] == [0, 4, 8, 12] and runs[0].rounds == 3
    assert all(torch.equal(r.params, runs[0].params) for r in runs)   # synced at the end
    assert runs[0].evals[-1][3] < runs[0].evals[0][3] / 2
    fig = plots.figure_loss_curves({"H = 4": runs})
    np.testing.assert_array_equal(fig.axes[1].lines[0].get_xdata(), [0, 1, 2, 3])   # rounds
    odd = cluster3.run(D.local_sgd, "linreg", 12, 30, 0.05, sync_every=[2, 3, 11])
    assert [e[0] for e in odd[0].evals] == [0, 2, 3, 11]
    assert not torch.equal(odd[0].params, odd[1].params)           # step 12 was local


def test_straggler_makes_everyone_wait(cluster3):
    # A straggler 20× slower: its compute spans hold 19× its own compute in sleep, so it
    # stands out even when a loaded machine slows the other ranks' compute several times
    # over (with 3×, a busy 2-core machine once gave rank 2 twice rank 1's raw compute).
    runs = cluster3.run(D.sync_sgd, "digits-cnn", 8, 96, 0.1,
                        straggler=workloads.Straggler(1, 20.0))
    compute = [r.timeline.total("compute") for r in runs]
    wait = [r.timeline.total("wait") for r in runs]
    assert compute[1] > 2 * max(compute[0], compute[2])
    assert min(wait[0], wait[2]) > wait[1]
    fig = plots.figure_timelines({"straggler": runs}, steps=range(1, 6))
    [title] = [ax.get_title() for ax in fig.axes]          # the sleep is said, with its factor
    assert title.startswith("straggler (emulated") and "rank 1 sleeps 19×" in title
    assert len(fig.axes[0].get_yticks()) == 3
    assert len(D.step_times(runs)) == 8 and 0 <= min(D.wait_fraction(runs))


def test_distributed_minibatch(cluster3):
    runs = cluster3.run(D.distributed_minibatch, "digits-mlp", 10, 48, 24, 0.5)
    assert all(torch.equal(r.params, runs[0].params) for r in runs)
    assert runs[0].served == 10 * (16 + 8)
    kinds = {s.kind for s in runs[0].timeline.spans}
    assert {"compute", "communicate", "wait", "update"} <= kinds
    reuse = cluster3.run(D.distributed_minibatch, "digits-mlp", 10, 48, 24, 0.5, use_extra=True)
    assert not torch.equal(reuse[0].params, runs[0].params)
    assert np.mean(reuse[0].loss[-3:]) < reuse[0].loss[0]


def test_compute_vs_communication(cluster3):
    out = cluster3.run(measure.compute_vs_communication, "digits-cnn", 16, 2)[0]
    assert out["compute"] > 0 and out["communicate"] > 0 and out["params"] == 9930


def test_bad_input_says_what_to_do(cluster3):
    with pytest.raises(ValueError, match="factor must be >= 1"):
        workloads.Straggler(0, 0.5)
    with pytest.raises(ValueError, match="unknown workload"):
        workloads.build("imagenet")
    from ddl_lab.runtime import WorkerError
    with pytest.raises(WorkerError, match="must divide by the world size"):
        cluster3.run(D.sync_sgd, "linreg", 2, 64, 0.1)


def test_allreduce_is_the_librarys_or_a_function(cluster3):
    from ddl_lab.runtime import WorkerError
    with pytest.raises(WorkerError, match="'dist.all_reduce' or a function"):
        cluster3.run(D.sync_sgd, "linreg", 2, 48, 0.1, allreduce="ring")
