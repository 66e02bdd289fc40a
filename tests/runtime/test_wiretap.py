"""The wiretap (runtime): on 2–4 real ranks it records every message and collective with the
bytes lesson 06's ring model says; it refuses to start deaf (the canary); it composes with
the sub-world guard and with itself; the default group comes back even after an error;
``every_group`` records the other groups too (FSDP2's mesh, lesson 10); ``FunctionalTap``
records DTensor's functional collectives, which reach no wrapped group (lesson 14)."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab.ring_allreduce import cost
from ddl_lab.ring_allreduce.engine import ring_bytes
from ddl_lab.runtime.collectives import all_gather_single, reduce_scatter_single
from ddl_lab.runtime.costs import ring_time, sent_bytes, star_time, tree_time
from ddl_lab.runtime.wiretap import METHODS, Wiretap, forwarding
from ddl_lab.runtime.worlds import run_cases


def talk() -> dict:
    """Worker: a ring of messages and four collectives under the wiretap."""
    n, r = dist.get_world_size(), dist.get_rank()
    with Wiretap() as tap:
        works = [dist.isend(torch.ones(10), (r + 1) % n), dist.irecv(torch.zeros(10), (r - 1) % n)]
        for w in works:
            w.wait()
        dist.all_reduce(torch.ones(100))
        dist.broadcast(torch.ones(50, dtype=torch.float64), 0)
        dist.all_gather([torch.zeros(25) for _ in range(n)], torch.ones(25))
        all_gather_single(torch.zeros(25 * n), torch.ones(25))
        dist.barrier()
    return {"ops": [(o.op, o.call, o.nbytes, o.sent, o.src, o.dst, o.size, o.ranks)
                    for o in tap.ops], "sent": tap.sent, "by_op": dict(tap.by_op)}


def test_counts_on_two_to_four_ranks_equal_the_ring_model():
    outcomes = run_cases(talk, [(n, ()) for n in (2, 3, 4)], fn=talk)
    for outcome in outcomes:
        n = outcome.n
        assert outcome.failure is None, outcome.failure
        for r, got in enumerate(outcome.results):
            ranks = tuple(range(n))
            assert got["ops"] == [
                ("send", "isend", 40, 40.0, r, (r + 1) % n, n, ranks),
                ("recv", "irecv", 40, 0.0, (r - 1) % n, r, n, ranks),
                ("all_reduce", "all_reduce", 400, ring_bytes(n, 400), None, None, n, ranks),
                ("broadcast", "broadcast", 400, (n - 1) / n * 400, None, None, n, ranks),
                ("all_gather", "all_gather", 100, (n - 1) * 100.0, None, None, n, ranks),
                ("all_gather", all_gather_single.__name__, 100, (n - 1) * 100.0, None, None,
                 n, ranks),
                ("barrier", "barrier", 0, 0.0, None, None, n, ranks)]
            assert got["sent"] == pytest.approx(40 + ring_bytes(n, 400) + (n - 1) / n * 400
                                                + 2 * (n - 1) * 100)
            assert got["by_op"]["send"] == 40 and got["by_op"]["recv"] == 0


def exchange() -> list[tuple[str, int, float]]:
    """Worker: all-to-alls, even and uneven (rank r sends r + j + 1 rows of 4 floats to
    rank j, as lesson 14's experts do), and the list form (equal tensors, as gloo asks)."""
    n, r = dist.get_world_size(), dist.get_rank()
    rows = [r + j + 1 for j in range(n)]
    with Wiretap() as tap:
        dist.all_to_all_single(torch.zeros(4 * n), torch.ones(4 * n))
        dist.all_to_all_single(torch.zeros(sum(i + r + 1 for i in range(n)), 4),
                               torch.ones(sum(rows), 4),
                               [i + r + 1 for i in range(n)], rows)
        dist.all_to_all([torch.zeros(3) for _ in range(n)],      # gloo: equal tensors
                        [torch.ones(3) for _ in range(n)])
    return [(o.op, o.nbytes, o.sent) for o in tap.ops]


def test_an_all_to_all_counts_what_leaves_the_rank():
    """Even splits: the ring model's (n−1)/n·S; uneven: the bytes bound for the others,
    exactly (what a rank sends itself never leaves it)."""
    for outcome in run_cases(exchange, [(n, ()) for n in (2, 3)], fn=exchange):
        n = outcome.n
        assert outcome.failure is None, outcome.failure
        for r, got in enumerate(outcome.results):
            away = sum(r + j + 1 for j in range(n) if j != r)
            total = sum(r + j + 1 for j in range(n))
            assert got == [("all_to_all", 16 * n, (n - 1) / n * 16 * n),
                           ("all_to_all", 16 * total, 16 * away),
                           ("all_to_all", 12 * n, 12 * (n - 1))]


def test_the_ring_model_has_one_source():
    n, S = 4, 1000
    assert cost.sent_bytes is sent_bytes                  # lesson 06's name, the shared one
    assert ring_bytes(n, S) == sent_bytes("all_reduce", n, S) == 1500
    assert sent_bytes("all_gather", n, S) == 3000
    assert sent_bytes("reduce_scatter", n, S) == sent_bytes("broadcast", n, S) == 750
    assert sent_bytes("gather", n, S) == 1000 and sent_bytes("gather", n, S, root=True) == 0
    assert sent_bytes("send", 1, S) == S and sent_bytes("all_reduce", 1, S) == 0
    with pytest.raises(ValueError, match="no ring-model bytes"):
        sent_bytes("allreduce", n, S)


def test_the_alpha_beta_times_have_one_source():
    n, S, a, b, g = 4, 1000.0, 1e-5, 1e-9, 1e-10
    assert ring_time(n, S, a, b) == pytest.approx(6 * a + 1500 * b)
    assert ring_time(n, S, a, b, pieces=3) == pytest.approx(18 * a + 1500 * b)
    assert ring_time(n, S, a, b, g) == pytest.approx(6 * a + 1500 * b + 750 * g)
    assert tree_time(5, S, a, b, g) == pytest.approx(6 * (a + S * b) + 3 * S * g)
    assert star_time(n, S, a, b, g) == pytest.approx(6 * (a + S * b) + 3 * S * g)
    assert ring_time(1, S, a, b) == tree_time(1, S, a, b) == star_time(1, S, a, b) == 0
    for algorithm, model in (("ring", ring_time), ("tree", tree_time),
                             ("reduce_broadcast", star_time)):   # lesson 06 counts with them
        assert cost.cost_model(algorithm, n, S, a, b, g) == model(n, S, a, b, g)
    with pytest.raises(ValueError, match="n must be >= 1"):
        ring_time(0, S, a, b)


def test_one_table_names_each_method_and_its_function():
    assert METHODS["allreduce"] == ("all_reduce", 0, "all_reduce")
    assert METHODS["_reduce_scatter_base"].function == "reduce_scatter_tensor"
    assert METHODS["allgather"].collective and not METHODS["send"].collective
    assert not METHODS["barrier"].collective and METHODS["barrier"].payload is None


def deaf() -> dict:
    """Worker: a torch whose dist.isend no longer goes through the group's method."""
    from torch.distributed import distributed_c10d as c10d
    world, isend, out = c10d._get_default_group(), dist.isend, {}
    dist.isend = lambda tensor, dst=None, group=None, tag=0, group_dst=None: None
    try:
        with Wiretap():
            out["entered"] = True
    except RuntimeError as e:
        out["error"] = str(e)
    finally:
        dist.isend = isend
    out["restored"] = c10d._get_default_group() is world and all(
        type(g).__name__ != "_Tapped" for g in c10d._world.pg_map)
    return out


def test_a_deaf_wiretap_raises_instead_of_counting_zero():
    got = run_cases(deaf, [(2, ())], fn=deaf)[0].results
    for out in got:
        assert "entered" not in out and out["restored"]
        assert f"torch {torch.__version__}" in out["error"]
        assert "every byte count would read 0" in out["error"]


def nested_and_guarded() -> dict:
    """Worker: a wiretap inside a wiretap inside the sub-world guard; a refused call."""
    n, seen = dist.get_world_size(), []
    with Wiretap() as outer:
        with Wiretap(on_op=lambda op, args: seen.append((op.op, op.refused))) as inner:
            dist.all_reduce(torch.ones(4))
            try:
                dist.send(torch.ones(2), group_dst=n)         # past the guard's world
            except ValueError as e:
                guard = str(e)
        try:
            with Wiretap(on_op=lambda op, args: seen.append((op.op, op.dst, op.refused))):
                dist.send(torch.ones(2), None)                # torch refuses it itself
        except ValueError:
            pass
    return {"outer": [(o.op, o.nbytes) for o in outer.ops],
            "inner": [(o.op, o.nbytes) for o in inner.ops], "seen": seen, "guard": guard}


def test_nested_wiretaps_compose_with_the_sub_world_guard():
    for out in run_cases(nested_and_guarded, [(3, ())], fn=nested_and_guarded)[0].results:
        assert out["inner"] == [("all_reduce", 16), ("send", 8)]
        assert out["outer"][:2] == out["inner"]          # once each: no canary leaks out
        assert "the world has 3 ranks" in out["guard"]
        assert out["seen"] == [("all_reduce", False), ("send", False), ("send", None, True)]


def failing() -> dict:
    """Worker: an error inside the wiretap; everything it changed comes back."""
    from torch.distributed import distributed_c10d as c10d
    world, new_group = c10d._get_default_group(), dist.new_group
    try:
        with Wiretap(refuse_new_group="no new groups here"):
            assert dist.get_world_size() == 2 and c10d._get_default_group() is not world
            dist.new_group([0, 1])
    except RuntimeError as e:
        said = str(e)
    return {"said": said, "default": c10d._get_default_group() is world,
            "new_group": dist.new_group is new_group and c10d.new_group is new_group,
            "tables": all(type(g).__name__ != "_Tapped" for g in c10d._world.pg_group_ranks)}


def test_state_is_restored_after_an_exception():
    for out in run_cases(failing, [(2, ())], fn=failing)[0].results:
        assert out == {"said": "no new groups here", "default": True, "new_group": True,
                       "tables": True}


def every_group() -> dict:
    """Worker: calls on the default group and, by name, on the raw group behind the tap."""
    from torch._C._distributed_c10d import ProcessGroup
    from torch.distributed import distributed_c10d as c10d
    n, raw, before = dist.get_world_size(), c10d._get_default_group(), dict(vars(ProcessGroup))
    with Wiretap(every_group=True) as tap:
        inside = forwarding()
        named = c10d._get_default_group().group_name == raw.group_name   # a mesh finds it
        dist.all_reduce(torch.ones(100))
        all_gather_single(torch.zeros(25 * n), torch.ones(25), group=raw)
        reduce_scatter_single(torch.zeros(25), torch.ones(25 * n), group=raw)
    with Wiretap() as default_only:
        dist.all_reduce(torch.ones(4), group=raw)
    after = dict(vars(ProcessGroup))
    return {"ops": [(o.op, o.nbytes, o.sent, o.size) for o in tap.ops], "inside": inside,
            "named": named, "default_only": default_only.ops,
            "restored": all(after[m] is before[m] for m in METHODS if m in before)}


def test_every_group_records_the_other_groups_too():
    for outcome in run_cases(every_group, [(2, ()), (3, ())], fn=every_group):
        n = outcome.n
        assert outcome.failure is None, outcome.failure
        for out in outcome.results:
            assert out["ops"] == [                       # each once: the tap's own forward
                ("all_reduce", 400, ring_bytes(n, 400), n),            # is not recorded again
                ("all_gather", 100, (n - 1) * 100.0, n),
                ("reduce_scatter", 100 * n, (n - 1) * 100.0, n)]
            assert out["default_only"] == []             # without it, the raw group is unseen
            assert out["named"] and not out["inside"] and out["restored"]



def functional() -> list:
    """Worker: DTensor's functional collectives (lesson 14), which no wrapped group sees."""
    from torch.distributed import _functional_collectives as funcol
    from ddl_lab.runtime.wiretap import FunctionalTap
    n = dist.get_world_size()
    with Wiretap() as tap, FunctionalTap() as functional:
        funcol.all_reduce(torch.ones(10), "sum", dist.group.WORLD).wait()
        funcol.all_gather_tensor(torch.ones(3, dtype=torch.float64), 0,
                                 dist.group.WORLD).wait()
        funcol.reduce_scatter_tensor(torch.ones(2 * n), "sum", 0, dist.group.WORLD).wait()
    return [functional.ops, [o.op for o in tap.ops]]


def test_the_functional_tap_records_what_the_wiretap_cannot_see():
    for outcome in run_cases(functional, [(n, ()) for n in (2, 3)], fn=functional):
        n = outcome.n
        assert outcome.failure is None, outcome.failure
        ranks = tuple(range(n))
        for ops, tapped in outcome.results:
            assert ops == [("all_reduce", 40, ranks), ("all_gather", 24, ranks),
                           ("reduce_scatter", 8 * n, ranks)]
            assert tapped == []             # below the wrapped groups: the wiretap is deaf
