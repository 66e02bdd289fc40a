"""n-rank worlds carved out of the warm cluster (runtime.worlds): each case sees its own
world, and its failures come back structured — the stub, which rank raised what, a
deadlock in seconds, a send outside the world — with the cluster usable after each. And a
timeout's busy and waiting ranks, a failed run's exception types, as attributes."""
import time

import pytest
import torch
import torch.distributed as dist

from ddl_lab.runtime import Cluster, WorkerError, WorkerTimeout, shared_cluster
from ddl_lab.runtime.worlds import (MAX_WORLD, OP_TIMEOUT_S, Raised, WorldFailed, classify,
                                    in_worlds, run_cases, run_in_world)


def _where_am_i():
    return dist.get_rank(), dist.get_world_size()


def _sum_of_ranks():
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    return float(t[0])


def _usable():
    """The whole cluster still runs a collective over all its ranks."""
    assert shared_cluster(MAX_WORLD).run(_sum_of_ranks) == [10.0] * MAX_WORLD


def _helper_stub():
    raise NotImplementedError


def _stub_on_rank_1():
    if dist.get_rank() == 1:
        _helper_stub()
    return dist.get_rank()


def _rank_2_raises_the_rest_wait():
    if dist.get_rank() == 2:
        raise KeyError("no such key")
    dist.recv(torch.zeros(1), 2)


def _both_receive_first():
    dist.recv(torch.zeros(1), 1 - dist.get_rank())


def _send_outside():
    if dist.get_rank() == 0:
        dist.send(torch.zeros(1), 3)
    return dist.get_rank()


def _bare_stub(*args):
    raise NotImplementedError


def test_each_case_sees_a_world_of_its_own_size():
    outcomes = run_cases(_where_am_i, [(2, ()), (3, ()), (MAX_WORLD, ()), (1, ())],
                         fn=_where_am_i)
    assert [o.failure for o in outcomes] == [None] * 4
    assert [o.results for o in outcomes] == [[(r, n) for r in range(n)]
                                             for n in (2, 3, MAX_WORLD, 1)]
    assert run_in_world(_sum_of_ranks, 4, fn=_sum_of_ranks) == [6.0] * 4
    _usable()


def test_a_bare_stub_fails_as_a_stub_without_starting_workers():
    with pytest.raises(WorldFailed) as e:
        run_cases(_bare_stub, [(2, ())], fn=_bare_stub)
    f = e.value.failure
    assert (f.kind, f.rank, f.exception) == ("stub", 0, "NotImplementedError")
    assert f.message("_bare_stub", 2) == f.line and "not implemented yet" in f.line


def test_a_stub_on_the_workers_is_a_stub_failure_naming_its_rank():
    [outcome] = run_cases(_stub_on_rank_1, [(3, ())], fn=_stub_on_rank_1)
    f = outcome.failure
    assert (f.kind, f.rank, f.exception) == ("stub", 1, "NotImplementedError")
    assert "_helper_stub" in f.text
    _usable()


def test_a_raise_names_its_rank_and_exception_type_not_the_neighbours_closed_pipes():
    outcomes = run_cases(_rank_2_raises_the_rest_wait, [(3, ()), (2, ())],
                         fn=_rank_2_raises_the_rest_wait)
    assert len(outcomes) == 1                 # stopped at the first case that failed
    f = outcomes[0].failure
    assert (f.kind, f.rank, f.exception) == ("raised", 2, "KeyError")
    assert f.line == "KeyError: 'no such key'"
    assert f.message("fn", 3) == "fn failed on rank 2 of 3: KeyError: 'no such key'"
    _usable()


def test_a_deadlock_is_reported_as_one_within_seconds():
    cluster = shared_cluster(MAX_WORLD)        # started before the clock: a busy machine
    t0 = time.monotonic()                      # may take longer than OP_TIMEOUT_S to start it
    per_rank = cluster.run_with(in_worlds, (_both_receive_first, [(2, ())], 1.0), timeout=30)
    assert time.monotonic() - t0 < OP_TIMEOUT_S
    raised = {r: per_rank[r][0] for r in range(2)}
    # the first rank to time out closes the group, so its peer may see a closed connection
    assert all(isinstance(v, Raised) and (v.timed_out or v.closed) and not v.stub
               for v in raised.values())
    assert any(v.timed_out for v in raised.values())
    assert per_rank[2:] == [[None]] * (MAX_WORLD - 2)
    f = classify(raised, _both_receive_first)
    assert f.kind == "deadlock" and raised[f.rank].timed_out
    assert f.message("fn", 2).startswith("fn deadlocked on 2 ranks")
    _usable()


def test_a_deadlock_waits_as_long_as_the_caller_says():
    """Tests of deadlocks pass a short ``op_timeout`` instead of waiting out OP_TIMEOUT_S."""
    [outcome] = run_cases(_both_receive_first, [(2, ())], fn=_both_receive_first,
                          op_timeout=1.0)
    assert outcome.failure.kind == "deadlock"
    assert "every rank waited more than 1 s in a send" in outcome.failure.message("fn", 2)
    _usable()


def test_a_send_outside_the_world_is_refused_by_the_guard():
    [outcome] = run_cases(_send_outside, [(2, ())], fn=_send_outside)
    f = outcome.failure
    assert (f.kind, f.rank, f.exception) == ("raised", 0, "ValueError")
    assert f.line.startswith("ValueError: dist.send to rank 3, but the world has 2 ranks")
    _usable()


def _raise_by_rank():
    r = dist.get_rank()
    if r == 1:
        _helper_stub()
    if r == 2:
        try:
            _helper_stub()
        except NotImplementedError:
            raise RuntimeError("wrapped") from None    # not a stub: the cause is hidden
    if r == 3:
        raise KeyError(r)
    return r


def test_a_worker_error_says_which_ranks_raised_what():
    with pytest.raises(WorkerError) as e:
        shared_cluster(MAX_WORLD).run(_raise_by_rank)
    assert e.value.raised == {1: "NotImplementedError", 2: "RuntimeError", 3: "KeyError"}
    assert e.value.not_implemented == [1]
    _usable()


def _one_waits_one_computes():
    if dist.get_rank() == 0:
        dist.recv(torch.zeros(1), 1)
    a = torch.rand(100, 100) / 100
    while True:
        a = torch.tanh(a @ a)


def test_a_timeout_says_which_ranks_were_busy_and_which_waiting():
    with Cluster(3, timeout=30) as cluster:
        with pytest.raises(WorkerTimeout) as e:
            cluster.run_with(_one_waits_one_computes, timeout=1.5)
    assert (e.value.busy, e.value.waiting) == ([1, 2], [0])
    assert "still working, not stuck — rank(s) [1, 2] were computing" in str(e.value)


def _rank_0_waits_if(stuck):
    if stuck and dist.get_rank() == 0:
        dist.recv(torch.zeros(1), 1)          # rank 1 has returned: nobody sends
    return dist.get_rank()


def test_a_timeout_names_the_case_s_world_and_only_its_ranks_still_in_the_code():
    with pytest.raises(WorldFailed) as e:
        run_cases(_rank_0_waits_if, [(4, (False,)), (3, (True,))], fn=_rank_0_waits_if,
                  timeout=2)
    f = e.value.failure
    assert (f.kind, f.rank) == ("timeout", 0)
    assert f.message("fn", 0).startswith(
        "fn timed out after 2 s on 3 ranks: rank(s) [0] never finished — probably a deadlock")
    assert "Where each was:\n  rank 0: waiting in dist.recv — _rank_0_waits_if()" in f.line
    assert "rank 1:" not in f.line
    _usable()
