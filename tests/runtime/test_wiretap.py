"""The wiretap (runtime): on 2–4 real ranks it records every message and collective with the
bytes lesson 06's ring model says; it refuses to start deaf (the canary); it composes with
the sub-world guard and with itself; the default group comes back even after an error."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab.runtime.worlds import run_cases
from ddl_lab.ring_allreduce.cost import sent_bytes
from ddl_lab.ring_allreduce.engine import ring_bytes
from ddl_lab.runtime.wiretap import Wiretap


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
        dist.all_gather_into_tensor(torch.zeros(25 * n), torch.ones(25))
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
                ("all_gather", "all_gather_into_tensor", 100, (n - 1) * 100.0, None, None, n,
                 ranks),
                ("barrier", "barrier", 0, 0.0, None, None, n, ranks)]
            assert got["sent"] == pytest.approx(40 + ring_bytes(n, 400) + (n - 1) / n * 400
                                                + 2 * (n - 1) * 100)
            assert got["by_op"]["send"] == 40 and got["by_op"]["recv"] == 0


def test_the_ring_model_has_one_source():
    n, S = 4, 1000
    assert ring_bytes(n, S) == sent_bytes("all_reduce", n, S) == 1500
    assert sent_bytes("all_gather", n, S) == 3000
    assert sent_bytes("reduce_scatter", n, S) == sent_bytes("broadcast", n, S) == 750
    assert sent_bytes("gather", n, S) == 1000 and sent_bytes("gather", n, S, root=True) == 0
    assert sent_bytes("send", 1, S) == S and sent_bytes("all_reduce", 1, S) == 0
    with pytest.raises(ValueError, match="no ring-model bytes"):
        sent_bytes("allreduce", n, S)


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
