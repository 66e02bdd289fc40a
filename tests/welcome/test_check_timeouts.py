"""A check's timeout says where each rank was: a deadlock reads as one, slow work as slow."""
import pytest

from ddl_lab.check import CheckFailed
from ddl_lab.check._core import on_workers


def test_a_deadlock_in_a_check_names_it_and_where_each_rank_waits(cell):
    ns = cell("""
        import torch, torch.distributed as dist
        def my_stuck():
            buf = torch.zeros(1)
            dist.recv(buf, src=(dist.get_rank() + 1) % dist.get_world_size())
    """)
    with pytest.raises(CheckFailed) as e:
        on_workers(ns["my_stuck"], 2, fn=ns["my_stuck"], timeout=3)
    msg = str(e.value)
    assert "probably a deadlock" in msg
    assert "rank 0: waiting in dist.recv" in msg and "rank 1: waiting in dist.recv" in msg


def test_slow_work_in_a_check_is_called_slow_not_a_deadlock(cell):
    ns = cell("""
        def my_spin():
            x = 0
            while True:
                x += 1
    """)
    with pytest.raises(CheckFailed) as e:
        on_workers(ns["my_spin"], 2, fn=ns["my_spin"], timeout=3)
    msg = str(e.value)
    assert "still computing" in msg and "deadlock" not in msg
    assert "rank 0: computing" in msg
