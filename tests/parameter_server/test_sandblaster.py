"""Sandblaster L-BFGS: vector operations on the shards, the coordinator, backup tasks."""
import numpy as np
import pytest

from ddl_lab.parameter_server import downpour as D
from ddl_lab.parameter_server import sandblaster as S
from ddl_lab.parameter_server.server import ParameterServer


@pytest.fixture(scope="module")
def problem():
    return D.digits_problem(example_cost=10e-6)


def load(client, name, vec, batch):
    """Put an arbitrary vector on the shards under ``name`` (through one accumulate)."""
    client.ops([("new_batch", batch)])
    client.accumulate(batch, 0, vec)
    client.ops([("copy", name, "g_new")], batch, 1)


def two_loop(g, S_, Y_):
    q, alphas = g.copy(), []
    for s, y in zip(reversed(S_), reversed(Y_)):
        a = (s @ q) / (s @ y)
        alphas.append(a)
        q -= a * y
    q *= (S_[-1] @ Y_[-1]) / (Y_[-1] @ Y_[-1])
    for (s, y), a in zip(zip(S_, Y_), reversed(alphas)):
        q += (a - (y @ q) / (s @ y)) * s
    return -q


def test_the_two_loop_recursion_on_the_shards_equals_numpy():
    rng = np.random.default_rng(0)
    n, m = 9, 3
    g = rng.normal(size=n)
    S_ = [rng.normal(size=n) for _ in range(m)]
    Y_ = [s + 0.1 * rng.normal(size=n) for s in S_]            # s·y > 0
    with ParameterServer(np.zeros(n), shards=3, timeout=10) as ps:
        client = ps.connect("coordinator")
        load(client, "g", g, 1)
        coord = S.Coordinator(client, ps, None, n, 1, False, m, 10)
        for i, (s, y) in enumerate(zip(S_, Y_)):
            load(client, f"s{i}", s, 2 + 2 * i)
            load(client, f"y{i}", y, 3 + 2 * i)
            coord.history.append((i, 1.0 / (s @ y)))
        coord.gamma = (S_[-1] @ Y_[-1]) / (Y_[-1] @ Y_[-1])
        dg = coord.direction()
        d = client.get("d")
    want = two_loop(g, S_, Y_)
    np.testing.assert_allclose(d, want, rtol=1e-10)
    assert dg == pytest.approx(want @ g)
    assert coord.round_trips == 2 * m + 1                     # scalars only, batched ops


def test_sandblaster_lbfgs_decreases_the_loss_every_iteration(problem):
    r = S.run(problem, replicas=3, shards=2, iterations=12, slices=6)
    assert np.all(np.diff(r.loss) < 0)                        # Armijo: never uphill
    assert r.final_loss < 0.2 * r.loss[0]
    assert r.examples[-1] == len(r.batches) * len(problem)
    assert sum(x["slices"] for x in r.replicas) >= 6 * len(r.batches)


def test_backup_tasks_finish_batches_sooner_and_change_nothing_else():
    costly = D.digits_problem(example_cost=50e-6)             # compute dominates the noise
    slow = dict(replicas=4, shards=2, iterations=4, slices=4, slow=6.0)
    on, off = S.run(costly, backup=True, **slow), S.run(costly, backup=False, **slow)
    np.testing.assert_allclose(on.loss, off.loss, rtol=1e-9)   # every slice counted once
    assert sum(b["backups"] for b in on.batches) > 0 and sum(b["backups"] for b in off.batches) == 0
    assert on.report.shards[0]["discarded"] > 0               # the slower twin was dropped
    med = [np.median([b["seconds"] for b in r.batches]) for r in (on, off)]
    assert med[0] < med[1]


def test_bad_arguments_are_explained(problem):
    with pytest.raises(ValueError, match="slices must be a positive integer"):
        S.run(problem, slices=0)
    with pytest.raises(ValueError, match="cannot cut 1347 examples into 5000 slices"):
        S.run(problem, slices=5000)
