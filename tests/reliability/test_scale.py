"""Scale: more ranks than cores works (slowly), each worker's memory is what the
runtime's estimate says at most, and a world that cannot fit in memory is refused before a
single process starts. ``DDL_SOAK_SCALE`` > 1 adds Cluster(16)."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab import Cluster
from ddl_lab.runtime.memory import WORKER_BYTES, available_memory, check_fits, worker_memory

from ddl_lab.runtime.worlds import in_worlds
from tests.ring_allreduce.test_algorithms import sums

from .conftest import SCALE
from .system import descendants

MB = 1 << 20


def total():
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    return t.item()


@pytest.mark.parametrize("n", [8] + ([16] if SCALE > 1 else []))
def test_more_ranks_than_cores_work_and_each_fits_the_estimate(n):
    with Cluster(n, timeout=120) as c:
        assert c.run(total) == [n * (n - 1) / 2] * n
        if n == 8:            # lesson 06 §7's allreduces by hand on 6–8 ranks, = all_reduce
            assert c.run(in_worlds, sums, [(k, ()) for k in (6, 7, 8)])[0] == [[]] * 3
        uss = worker_memory(c.pids)
    print(f"\n  Cluster({n}): memory per worker (USS) {min(uss) / MB:.0f}–{max(uss) / MB:.0f} MB,"
          f" {sum(uss) / MB:.0f} MB in all; the estimate is {WORKER_BYTES / MB:.0f} MB")
    assert all(0 < u <= WORKER_BYTES for u in uss)


def test_a_world_that_does_not_fit_is_named_with_what_fits():
    with pytest.raises(ValueError, match=r"world_size=8 does not fit in memory: 8 workers need "
                                         r"about 1\.6 GB .* only 0\.5 GB is free now\. Use "
                                         r"world_size <= 2"):
        check_fits(8, available=512 * MB)
    with pytest.raises(ValueError, match="Not even one worker fits"):
        check_fits(1, available=150 * MB)
    check_fits(2, available=512 * MB)


def test_cluster_refuses_it_before_starting_any_process():
    free = available_memory()
    if free is None:
        pytest.skip("free memory cannot be read here")
    # twice what fits now: memory other tests free meanwhile cannot make it fit (with one
    # more than fits, a test that ended between the two readings once let 125 workers start)
    huge = 2 * (free // WORKER_BYTES) + 2
    before = descendants()
    with pytest.raises(ValueError, match=f"world_size={huge} does not fit in memory"):
        Cluster(huge).shutdown()            # shut down at once, should it ever start
    assert descendants() == before
