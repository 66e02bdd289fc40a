"""Lesson 05's large-batch runs: the learning-rate rules, and the runs on 1 and 2 real
workers equal to one process replaying the same global batches (synchronous SGD)."""
import pytest
import torch

from ddl_lab.data_parallel.batches import lr_at, predicted_steps, run_batches, steps_to
from ddl_lab.data_parallel.measure import replay_single_process
from ddl_lab.runtime import shared_cluster


def test_rules_scale_and_warm_up_the_rate():
    assert lr_at(0, "none", 0.1, 4, 10) == 0.1
    assert lr_at(0, "linear", 0.1, 4, 10) == pytest.approx(0.4)
    assert [lr_at(t, "warmup", 0.1, 4, 10) for t in (0, 5, 10, 50)] == \
        pytest.approx([0.1, 0.25, 0.4, 0.4])
    assert lr_at(3, "warmup", 0.1, 1, 10) == 0.1          # one worker: nothing to scale
    with pytest.raises(ValueError, match="rule must be one of"):
        lr_at(0, "sqrt", 0.1, 4, 10)


def test_runs_on_real_workers_are_synchronous_sgd_with_the_scaled_rate():
    runs = run_batches(shared_cluster(5), ("none", "linear"), (1, 2), steps=12, base_lr=0.2,
                       eval_every=4)
    assert runs["none", 1].batch == 32 and runs["linear", 2].batch == 64
    assert torch.equal(runs["none", 1].params, runs["linear", 1].params)     # one run, shared
    assert runs["linear", 1].rule == "linear"
    assert torch.allclose(runs["none", 1].params, replay_single_process("digits-mlp", 12, 32, 0.2, 1),
                          atol=1e-5)
    for rule, lr in (("none", 0.2), ("linear", 0.4)):
        replay = replay_single_process("digits-mlp", 12, 64, lr, 2)
        assert torch.allclose(runs[rule, 2].params, replay, atol=1e-5), rule
    assert runs["linear", 2].eval_steps == [0, 4, 8, 12]
    assert runs["linear", 2].loss[-1] < runs["none", 2].loss[-1] < runs["none", 2].loss[0]


def test_steps_to_a_loss_and_the_model_of_steps():
    from ddl_lab.data_parallel.batches import BatchRun
    run = BatchRun("none", 1, 32, [0, 10, 20], [2.0, 1.0, 0.5], 0.9, torch.zeros(1))
    assert steps_to(run, 0.75) == pytest.approx(15.0)
    assert steps_to(run, 0.1) == float("inf") and steps_to(run, 3.0) == 0.0
    assert predicted_steps(64, 64, 100) == 200 and predicted_steps(128, 64, 100) == 150
