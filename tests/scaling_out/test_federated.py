"""Federated averaging (lesson 11): the engine on real workers equals the textbook
functions run in one process; FedSGD is a full-batch gradient step; drop-outs and bytes."""
import copy

import numpy as np
import pytest
import torch

from ddl_lab import shared_cluster
from ddl_lab.ml.models import MLP, flat_params
from ddl_lab.scaling_out import federated as F


@pytest.fixture(scope="module")
def cluster():
    return shared_cluster(3)


def textbook(K, rounds, E, B, C, lr, skew, drop, seed):
    """The same run with only the lesson's short functions, in this process."""
    clients, _ = F.make_clients(K, skew, seed)
    torch.manual_seed(seed)
    model = MLP(64, 64, 10)
    for t in range(1, rounds + 1):
        _, alive = F.choose(K, C, drop, seed, t)
        states, sizes = [], []
        for k in alive:
            local = copy.deepcopy(model)
            F.client_update(local, *clients[k].tensors(), E, B, lr, F._client_gen(seed, t, k))
            states.append(local.state_dict())
            sizes.append(len(clients[k]))
        if states:
            model.load_state_dict(F.fedavg(states, sizes))
    return flat_params(model)


@pytest.mark.parametrize("options", [dict(E=2, B=20, C=0.5, drop=0.0),
                                     dict(E=1, B=None, C=1.0, drop=0.3)],
                         ids=["fedavg", "fedsgd-with-dropouts"])
def test_engine_on_workers_equals_the_textbook_functions(cluster, options):
    common = dict(K=7, rounds=3, lr=0.1, skew=0.8, seed=3)
    got = F.run_federated(cluster, **common, **options)
    want = textbook(**common, **options)
    assert torch.allclose(got.params, want, atol=1e-5), (got.params - want).abs().max()


def test_a_learner_aggregate_runs_where_the_allreduce_does(cluster):
    mine = F.run_federated(cluster, rounds=3, aggregate=F.fedavg)
    fast = F.run_federated(cluster, rounds=3)
    assert torch.allclose(mine.params, fast.params, atol=1e-5)


def test_fedsgd_is_one_full_batch_gradient_step_on_everyone_s_data(cluster):
    run = F.run_federated(cluster, K=5, rounds=1, E=1, B=None, C=1.0, lr=0.5, skew=0.0, seed=1)
    clients, _ = F.make_clients(5, 0.0, 1)
    X = torch.cat([torch.from_numpy(c.X) for c in clients])
    y = torch.cat([torch.from_numpy(c.y) for c in clients])
    torch.manual_seed(1)
    model = MLP(64, 64, 10)
    F.client_update(model, X, y, 1, None, 0.5, torch.Generator())
    assert torch.allclose(run.params, flat_params(model), atol=1e-5)


def test_when_every_client_drops_out_the_model_stays_and_only_downloads_count(cluster):
    run = F.run_federated(cluster, rounds=2, drop=1.0)
    torch.manual_seed(0)
    assert torch.equal(run.params, flat_params(MLP(64, 64, 10)))
    nbytes = sum(p.numel() * 4 for p in MLP(64, 64, 10).parameters())
    assert run.alive == [0, 0] and run.bytes[-1] == 2 * run.picked[0] * nbytes


def test_clients_are_skewed_by_label_and_unequal_in_size():
    iid, _ = F.make_clients(10, 0.0, 0)
    skewed, test = F.make_clients(10, 1.0, 0)
    labels = lambda cs: np.mean([len(np.unique(c.y)) for c in cs])   # noqa: E731
    assert labels(skewed) <= 3 < 8 <= labels(iid)
    sizes = [len(c) for c in skewed]
    assert len(set(sizes)) > 5 and min(sizes) >= 1 and len(test) > 0


def test_choose_picks_a_fraction_and_drops_some():
    picked, alive = F.choose(20, 0.25, 0.5, seed=0, round_=4)
    assert len(picked) == 5 and set(alive) <= set(picked)
    assert F.choose(20, 0.25, 0.5, 0, 4) == (picked, alive)
    assert len(F.choose(20, 0.01, 0.0, 0, 1)[0]) == 1          # at least one client


def test_fedavg_weights_by_size():
    a, b = {"w": torch.tensor([0.0])}, {"w": torch.tensor([10.0])}
    assert F.fedavg([a, b], [1, 3])["w"].item() == pytest.approx(7.5)
