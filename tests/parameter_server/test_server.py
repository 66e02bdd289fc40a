"""The parameter server: a shard's rules and gates in-process, then real shard processes."""
import time

import numpy as np
import pytest
from multiprocess import AuthenticationError

from ddl_lab.parameter_server import errors, rules, server as P
from ddl_lab.parameter_server.roles import Roles
from ddl_lab.parameter_server.shard import Shard
from ddl_lab.parameter_server.wire import ShardClient
from ddl_lab.ml.optim import Adagrad


def grads(n, k, seed=0):
    return list(np.random.default_rng(seed).normal(size=(k, n)))


# ------------------------------------------------------------------ rules and gates

def test_shard_ranges_are_equal_slices_covering_everything():
    assert rules.shard_ranges(10, 3) == [(0, 3), (3, 7), (7, 10)]
    sizes = [hi - lo for lo, hi in rules.shard_ranges(2410, 4)]
    assert sum(sizes) == 2410 and max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="at most 3"):
        rules.shard_ranges(3, 4)
    with pytest.raises(ValueError, match="positive integer"):
        rules.shard_ranges(10, 0)


@pytest.mark.parametrize("clock, clocks, s, wait", [
    (3, [3, 3], 0, False), (4, [4, 3], 0, True), (5, [5, 2], 3, False), (6, [6, 2], 3, True),
    (2, [7, 2], 3, False)])
def test_ssp_gate(clock, clocks, s, wait):
    assert rules._ssp_must_wait(clock, clocks, s) is wait


def test_adagrad_push_is_lesson_01s_adagrad_applied_per_shard():
    theta, G = np.ones(6), np.zeros(6)
    rule, ref = Adagrad(0.1, eps=1e-8), np.ones(6)
    for g in grads(6, 5):
        theta, G = rules._adagrad_push(theta, g, G, 0.1, 1e-8)
        ref = rule.step(ref, g)
    np.testing.assert_allclose(theta, ref)


def test_staleness_lr_divides_by_staleness_and_keeps_fresh_gradients_whole():
    assert [rules._staleness_lr(0.5, t) for t in (0, 1, 2, 32)] == [0.5, 0.5, 0.25, 0.5 / 32]


# ------------------------------------------------------------------ one shard, in-process

def params(replies, who):
    return [m for w, m in replies if w == who and m[0] == "params"]


def test_async_push_applies_sgd_and_records_staleness():
    shard = Shard(0, np.zeros(3), rule="sgd", lr=0.5)
    shard.handle("a", ("join",))
    (_, reply), = shard.handle("a", ("pull",))
    assert reply[0] == "params" and reply[2] == 0
    shard.handle("a", ("push", np.ones(3), 0))
    shard.handle("a", ("push", np.ones(3), 0))            # computed on version 0, now stale
    np.testing.assert_allclose(shard.theta, -np.ones(3))
    assert shard.report()["staleness"].tolist() == [0, 1] and shard.version == 2


def test_ssp_holds_a_pull_more_than_s_clocks_ahead_until_the_slowest_pushes():
    shard = Shard(0, np.zeros(2), mode="ssp", s=1)
    shard.handle("fast", ("join",))
    shard.handle("slow", ("join",))
    for _ in range(2):
        shard.handle("fast", ("push", np.zeros(2), shard.version))
    assert shard.handle("fast", ("pull",)) == []          # 2 ahead of "slow" > s = 1
    released = shard.handle("slow", ("push", np.zeros(2), 0))
    assert len(params(released, "fast")) == 1             # now 1 ahead: it may go
    assert shard.gaps[-1][1:] == ("fast", 1)


def test_bsp_applies_a_clock_when_every_replica_pushed_and_all_of_it_is_fresh():
    shard = Shard(0, np.zeros(2), mode="bsp", rule="sgd", lr=1.0)
    for who in "abc":
        shard.handle(who, ("join",))
    shard.handle("a", ("push", np.ones(2), 0))
    shard.handle("b", ("push", 2 * np.ones(2), 0))
    assert shard.version == 0 and shard.handle("a", ("pull",)) == []
    released = shard.handle("c", ("push", 3 * np.ones(2), 0))
    np.testing.assert_allclose(shard.theta, [-6, -6])     # θ − lr·(g_a + g_b + g_c)
    assert params(released, "a") and shard.report()["staleness"].tolist() == [0, 0, 0]


def test_a_lost_replica_is_reported_and_no_longer_holds_the_barrier():
    shard = Shard(0, np.zeros(2), mode="bsp")
    shard.handle("a", ("join",))
    shard.handle("b", ("join",))
    shard.handle("a", ("push", np.ones(2), 0))
    assert shard.handle("a", ("pull",)) == []             # waits for b
    released = shard.lose("b")
    assert params(released, "a") and shard.version == 1
    assert [who for _, who in shard.lost] == ["b"]
    shard.handle("a", ("leave",))                         # a goodbye is not a loss
    assert len(shard.lost) == 1


def test_a_late_joiner_starts_at_the_slowest_clock():
    shard = Shard(0, np.zeros(1), mode="ssp", s=0)
    shard.handle("a", ("join",))
    for _ in range(5):
        shard.handle("a", ("push", np.zeros(1), shard.version))
    (_, joined), = shard.handle("b", ("join",))
    assert joined[:2] == ("joined", 5)
    assert params(shard.handle("b", ("pull",)), "b")      # level with a: no wait


def test_stop_answers_waiting_and_later_pulls():
    shard = Shard(0, np.zeros(1), mode="bsp")
    shard.handle("a", ("join",))
    shard.handle("b", ("join",))
    shard.handle("a", ("push", np.zeros(1), 0))
    assert shard.handle("a", ("pull",)) == []
    assert shard.stop() == [("a", ("stop",))]
    assert shard.handle("b", ("pull",)) == [("b", ("stop",))]


def test_staleness_aware_rate_is_recorded_per_update():
    shard = Shard(0, np.zeros(1), rule="sgd", lr=0.8, staleness_aware=True)
    for _ in range(5):
        shard.handle("a", ("push", np.ones(1), 0))
    np.testing.assert_allclose(shard.report()["lr"], [0.8, 0.8, 0.4, 0.8 / 3, 0.2])
    np.testing.assert_allclose(shard.theta, [-(0.8 + 0.8 + 0.4 + 0.8 / 3 + 0.2)])


def test_sandblaster_vector_ops_and_slices_counted_once():
    shard = Shard(0, np.array([1.0, 2.0]))
    shard.handle("c", ("ops", None, 0, [("new_batch", 1)]))
    assert shard.handle("c", ("ops", 1, 2, [("dot", "g_new", "theta")])) == []   # deferred
    shard.handle("r0", ("accumulate", 1, 0, np.array([1.0, 0.0])))
    shard.handle("r1", ("accumulate", 1, 0, np.array([1.0, 0.0])))     # a backup's twin
    out = shard.handle("r1", ("accumulate", 1, 1, np.array([0.0, 1.0])))
    assert out == [("c", ("results", [3.0]))] and shard.discarded == 1
    res = shard.handle("c", ("ops", None, 0, [("copy", "q", "theta"), ("axpy", "q", 2.0, "g_new"),
                                              ("scale", "q", 0.5), ("dot", "q", "q")]))
    assert res[0][1][1][-1] == pytest.approx(1.5 ** 2 + 2.0 ** 2)
    with pytest.raises(KeyError, match="no vector 'nope'"):
        shard.handle("c", ("ops", None, 0, [("dot", "nope", "theta")]))


@pytest.mark.parametrize("kwargs, message", [
    (dict(mode="sync"), "mode must be one of"), (dict(rule="adam"), "rule must be one of"),
    (dict(mode="ssp", s=-1), "integer >= 0"), (dict(lr=-1.0), "lr must be >= 0")])
def test_bad_settings_are_explained(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Shard(0, np.zeros(2), **kwargs)


def test_bad_pushes_and_gates_are_explained():
    shard = Shard(0, np.zeros(3))
    with pytest.raises(ValueError, match="pushed 2 values, but this shard holds 3"):
        shard.handle("a", ("push", np.zeros(2), 0))
    odd = Shard(0, np.zeros(1), mode="ssp", gate=lambda c, cs, s: "no")
    odd.handle("a", ("join",))
    with pytest.raises(TypeError, match="must return True .* or False"):
        odd.handle("a", ("pull",))


# ------------------------------------------------------------------ real shard processes

def test_two_shard_processes_match_one_in_process_shard():
    theta0, gs = np.arange(7.0), grads(7, 6)
    ref = Shard(0, theta0, rule="adagrad", lr=0.1)
    with P.ParameterServer(theta0, shards=2, rule="adagrad", lr=0.1, timeout=10) as ps:
        client = ps.connect(0)
        assert client.join() == 0
        for g in gs:
            got = client.pull()
            client.push(g, got.versions)
            ref.handle("x", ("push", g, ref.version))
        final = client.pull()
        client.leave()
        report = ps.finish()
    assert final.versions == (6, 6)
    np.testing.assert_allclose(report.theta, ref.theta)
    np.testing.assert_allclose(final.theta, ref.theta)
    assert report.shards[1]["pulls"] == 7 and report.lost == []


def test_learner_functions_from_a_closure_run_inside_the_shards():
    calls = 0.25                                          # captured by value (dill)

    def quarter_rate(lr, tau):
        return lr * calls

    with P.ParameterServer(np.zeros(4), shards=2, rule="sgd", lr=1.0, staleness_aware=True,
                           rate=quarter_rate, timeout=10) as ps:
        client = ps.connect(0)
        client.push(np.ones(4), (0, 0))
        np.testing.assert_allclose(client.snapshot()[0], -0.25 * np.ones(4))


def test_a_dead_shard_is_an_error_not_a_hang():
    with P.ParameterServer(np.zeros(4), shards=2, timeout=5) as ps:
        client = ps.connect(0)
        client.join()
        ps.kill_shard(1)
        t = time.perf_counter()
        with pytest.raises(errors.ShardLost, match="shard 1 closed the connection"):
            client.pull()
        with pytest.raises(errors.ShardDied, match=r"shard 1 died \(exit code -15 \(SIGTERM\)\).*"
                                              r"parameters 2\.\.3"):
            ps.check(ps.roles.events(2.0))
        assert time.perf_counter() - t < 4.5        # below the 5 s timeout: no wait for it


def test_a_pull_held_by_the_gate_times_out_instead_of_hanging():
    with P.ParameterServer(np.zeros(2), shards=1, mode="bsp", timeout=0.5) as ps:
        a, b = ps.connect("a"), ps.connect("b")
        a.join()
        b.join()
        a.push(np.zeros(2), (0,))
        with pytest.raises(TimeoutError, match="shard 0 did not answer within 0.5 s"):
            a.pull()                                      # b never pushes


def test_a_client_without_the_key_is_refused():
    with P.ParameterServer(np.zeros(2), shards=1, timeout=5) as ps:
        with pytest.raises(AuthenticationError):
            ShardClient(ps.addresses, ps.ranges, b"not the key", "intruder", 5)
        assert ps.connect("ok").snapshot()[1] == (0,)     # the shard still serves


def test_a_failing_role_reports_its_traceback_and_the_pool_recovers():
    def broken(parent):
        raise RuntimeError("replica could not read its data")

    roles = Roles(1, "replica")
    try:
        roles.start(0, broken)
        with pytest.raises(errors.ParameterServerError, match="replica 0 failed: RuntimeError: "
                                                             "replica could not read its data"):
            roles.expect(0, "ready", 30)
    finally:
        roles.close()
    with P.ParameterServer(np.zeros(2), shards=1, timeout=5) as ps:
        assert ps.connect(0).snapshot()[1] == (0,)


def test_shard_throughput_counts_pulls_and_pushes():
    out = P.shard_throughput(n_params=100, clients=2, seconds=0.3)
    assert out["pulls"] > 20 and out["pulls"] == out["pushes"]
    assert out["per_second"] > 0 and 0 < out["busy_fraction"] < 1
