"""The shared-memory allreduce: exact, reusable, never hangs, leaves nothing behind (lesson 06)."""
import os

import pytest
import torch
import torch.distributed as dist

from ddl_lab.ring_allreduce import shm as S


def _sums():
    n, rank = dist.get_world_size(), dist.get_rank()
    bad = []
    for length in (1, 2, 10, 1001, 100_003, 7):          # grows, then shrinks (reuse)
        for dtype in (torch.float32, torch.float64, torch.float16):
            inputs = [torch.arange(length, dtype=torch.float64) % 5 + r for r in range(n)]
            t = inputs[rank].to(dtype, copy=True)
            S.shm_allreduce(t)
            if not torch.equal(t.double(), sum(inputs)):
                bad.append((length, dtype))
    t = (torch.arange(6.0).reshape(2, 3) + rank).t()       # not contiguous
    S.shm_allreduce(t)
    if not torch.equal(t, (torch.arange(6.0).reshape(2, 3) * n + n * (n - 1) / 2).t()):
        bad.append("transposed")
    S.close_shm()
    return bad


def test_sums_exactly(cluster3):
    assert cluster3.run(_sums) == [[], [], []]


def _buffer():
    rank = dist.get_rank()
    comm = S.ShmAllreduce(1000 * 4)
    try:
        out = []
        for k in range(3):
            buf = comm.buffer(999)
            buf.copy_(torch.arange(999.0) * (rank + k))
            res = comm.allreduce_buffer(999)
            out.append(bool(torch.equal(res, torch.arange(999.0) * (3 + 3 * k))))
            del buf, res
        return out
    finally:
        comm.close()


def test_buffer_variant(cluster3):
    assert cluster3.run(_buffer) == [[True] * 3] * 3


def _warm():
    S.shm_allreduce(torch.ones(4))


def test_missing_rank_times_out_with_a_message(cluster3):
    cluster3.run(_warm)                                     # segment made by all three
    out = cluster3.run(_absent_short)
    assert out[2] == "absent"
    assert "rank(s) [2] never arrived" in out[0]
    assert "waited 1 s" in out[1]
    assert cluster3.run(_sums) == [[], [], []]              # usable again afterwards


def _absent_short():
    if dist.get_rank() == 2:
        return "absent"
    try:
        S.shm_allreduce(torch.ones(4), timeout=1.0)
    except TimeoutError as e:
        return str(e)
    return "no error"


def _names_left():
    return sorted(f for f in os.listdir("/dev/shm") if f.startswith(("dl", "sem.dl")))


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (Linux)")
def test_nothing_left_behind(cluster3):
    before = set(_names_left())
    cluster3.run(_warm)
    assert set(_names_left()) <= before                     # names removed at once


def test_needs_distributed():
    with pytest.raises(RuntimeError, match="needs torch.distributed"):
        S.ShmAllreduce(100)
    with pytest.raises(TypeError, match="got list"):
        S.shm_allreduce([1.0])
