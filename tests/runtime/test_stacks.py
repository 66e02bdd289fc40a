"""A timeout says where each rank was (README, \"The worker runtime in one cell\"): a deadlock reads as a deadlock, slow
work as slow work, and the report does not wait for fresh workers to start."""
import re
import sys
import time

import pytest
import torch
import torch.distributed as dist

from ddl_lab import Cluster, WorkerTimeout

from .notebook import Notebook


@pytest.fixture(scope="module")
def nb():
    nb = Notebook(torch=torch, dist=dist)
    nb.cell("""
        def deadlock():
            buf = torch.zeros(1)
            if dist.get_rank() in (0, 2):
                dist.recv(buf, src=1)
            return dist.get_rank()
    """)
    nb.cell("""
        def slow():
            a = torch.rand(200, 200) / 200
            if dist.get_rank() == 1:
                while True:
                    a = torch.tanh(a @ a)
            dist.barrier()
    """)
    return nb


@pytest.fixture(scope="module")
def cluster3():
    with Cluster(3, timeout=30) as c:
        yield c


def test_a_deadlock_shows_every_rank_waiting_in_its_recv(cluster3, nb):
    with pytest.raises(WorkerTimeout) as e:
        cluster3.run_with(nb["deadlock"], timeout=1.5)
    msg = str(e.value)
    assert re.search(r"rank\(s\) \[0, 2\] did not answer within [\d.]+ s: a deadlock", msg)
    recv = r"waiting in dist\.recv — deadlock\(\), cell line 5: dist\.recv\(buf, src=1\)"
    assert re.search(rf"rank 0: {recv}\n  rank 1: finished\n  rank 2: {recv}", msg), msg
    assert e.value.failures[0].startswith("did not answer: waiting in dist.recv")
    assert not cluster3.alive                 # reported first; fresh workers start later
    assert cluster3.run(dist.get_rank) == [0, 1, 2]


def test_slow_work_reads_as_slow_work_with_what_to_do(cluster3, nb):
    with pytest.raises(WorkerTimeout) as e:
        cluster3.run_with(nb["slow"], timeout=1.5)
    msg = str(e.value)
    assert "still working, not stuck — rank(s) [1] were computing" in msg
    assert "timeout=None (no limit)" in msg and "deadlock" not in msg
    assert re.search(r"rank 1: computing — slow\(\), cell line 6: a = torch\.tanh\(a @ a\)", msg)
    assert re.search(r"rank 0: waiting in dist\.barrier — slow\(\), cell line 7", msg)
    assert cluster3.run(dist.get_rank) == [0, 1, 2]


def test_timeout_none_means_no_limit():
    with Cluster(1, timeout=0.5) as c:
        assert c.run_with(time.sleep, (1.0,), timeout=None) == [None]
    with Cluster(1, timeout=None) as c:
        assert c.timeout is None and c.run(time.sleep, 1.0) == [None]


def test_the_timeout_counts_from_when_every_rank_began_the_function(tmp_path, monkeypatch):
    """A slow import on a busy laptop is not a stuck run: the limit starts at the function."""
    (tmp_path / "slow_to_import.py").write_text(
        "import time\ntime.sleep(2.5)\ndef answer():\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import slow_to_import
    with Cluster(2, timeout=1.5) as c:
        c.run(sys.path.insert, 0, str(tmp_path))
        assert c.run(slow_to_import.answer) == [42, 42]
