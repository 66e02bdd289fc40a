"""Lesson 07's replica loops as the papers write them: what the lesson prints.

``downpour.py`` runs the same loops with a timeline, a straggler's slowdown, staleness on
purpose and local steps; ``tests/parameter_server/test_textbook.py`` runs both on the same
shards and gets the same model. Either plugs into ``downpour.run(..., replica=...)`` (with
a fifth argument for the timeline, which these ignore).
"""
from __future__ import annotations

import numpy as np

from ddl_lab.parameter_server.downpour import Setup
from ddl_lab.parameter_server.problem import Problem
from ddl_lab.parameter_server.wire import ShardClient

__all__ = ["downpour_replica", "easgd_replica"]


def downpour_replica(client: ShardClient, problem: Problem, setup: Setup, rid: int) -> None:
    """Downpour SGD (Dean et al. 2012): fetch θ every n_fetch steps, push the accumulated
    gradient every n_push steps, never wait for the other replicas."""
    rng = np.random.default_rng(1000 * setup.seed + rid)
    rows = np.arange(rid, len(problem), setup.replicas)          # my part of the data
    acc = np.zeros(problem.n_params)
    client.join()
    for step in range(setup.steps):
        if step % setup.n_fetch == 0:
            got = client.pull()                                  # θ from every shard
            if got is None:                                      # the run is over
                break
        _, grad = problem.loss_grad(got.theta, rng.choice(rows, setup.batch))
        acc += grad
        if (step + 1) % setup.n_push == 0 or step + 1 == setup.steps:
            client.push(acc, got.versions)                       # shard i applies its slice
            acc[:] = 0.0
    client.leave()


def easgd_replica(client: ShardClient, problem: Problem, setup: Setup, rid: int) -> None:
    """Asynchronous EASGD (Zhang, Choromanska, LeCun 2015): SGD on my own x_i; every tau
    steps x_i and the centre x̃ on the shards move toward each other by α(x_i − x̃)."""
    rng = np.random.default_rng(1000 * setup.seed + rid)
    rows = np.arange(rid, len(problem), setup.replicas)
    alpha, lr = setup.elastic_alpha, setup.local_lr or setup.lr
    client.join()
    centre = client.pull()
    x = centre.theta.copy()
    for step in range(setup.steps):
        if step and step % setup.tau == 0:
            centre = client.pull()
            if centre is None:
                break
            elastic = alpha * (x - centre.theta)                 # the force between x_i and x̃
            x -= elastic
            client.push(elastic, centre.versions)                # the shards: x̃ += elastic
        _, grad = problem.loss_grad(x, rng.choice(rows, setup.batch))
        x -= lr * grad
    client.leave()
