"""The MoE GPT trained in one process (lesson 14, experts, §1): what the router did is
recorded every step, and the pictures' helpers lay a mesh out as torch numbers its ranks."""
import pytest

from ddl_lab.experts import plots
from ddl_lab.experts import train as T
from ddl_lab.experts.moe import MoEConfig
from ddl_lab.transformers.train import TrainConfig


@pytest.mark.parametrize("k", [1, 2])
def test_every_step_records_the_routing_of_every_layer(k):
    tc = TrainConfig(steps=3, batch=4, eval_every=3, eval_windows=4)
    run = T.train_moe(MoEConfig(hidden=64, experts=4, k=k, capacity_factor=1.0), tc)
    assert len(run.losses) == len(run.aux) == len(run.dropped) == len(run.load) == 3
    tokens = 4 * T.MOE_MODEL.seq
    for step in run.load:
        assert len(step) == T.MOE_MODEL.layers
        assert all(len(layer) == 4 and sum(layer) == tokens * k for layer in step)
    assert all(0 <= d < 1 for d in run.dropped) and all(a >= 1 - 1e-6 for a in run.aux)
    assert 1 <= T.imbalance(run, last=3) <= 4
    assert run.evals[-1][0] == 3 and run.val_loss < run.unigram + 2


def test_mesh_groups_follow_init_device_mesh_s_numbering():
    shape = {"pp": 2, "dp": 2, "tp": 2}
    assert plots.mesh_groups(shape, "tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert plots.mesh_groups(shape, "dp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert plots.mesh_groups(shape, "pp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
