"""DDP against lesson 05's synchronous SGD (lesson 11): same losses and parameters, with and
without gradient accumulation, fewer allreduces under no_sync, buckets set by bucket_mb."""
import pytest
import torch

from ddl_lab import shared_cluster
from ddl_lab.data_parallel import engine as D
from ddl_lab.scaling_out import ddp as P


@pytest.fixture(scope="module")
def cluster():
    c = shared_cluster(3)
    c.run_with(P.ddp_train, ("digits-mlp", 1, 60, 0.1), timeout=300)   # DDP's first import
    return c


@pytest.fixture(scope="module")
def sync(cluster):
    return cluster.run(D.sync_sgd, "digits-mlp", 12, 60, 0.1, barrier=False)


def test_ddp_takes_the_same_steps_as_the_course_s_synchronous_sgd(cluster, sync):
    ddp = cluster.run(P.ddp_train, "digits-mlp", 12, 60, 0.1)
    for s, d in zip(sync, ddp):
        assert s.loss == pytest.approx(d.loss, abs=1e-5)
        assert torch.allclose(s.params, d.params, atol=1e-6)
    assert ddp[0].rounds == 12 * len(ddp[0].buckets)         # one allreduce per bucket


@pytest.mark.parametrize("no_sync", [True, False])
def test_accumulating_micro_batches_gives_the_same_step(cluster, sync, no_sync):
    acc = cluster.run(P.ddp_train, "digits-mlp", 12, 60, 0.1, accumulate=4, no_sync=no_sync)
    assert torch.allclose(sync[0].params, acc[0].params, atol=1e-6)
    assert acc[0].rounds == 12 * len(acc[0].buckets) * (1 if no_sync else 4)


def test_smaller_buckets_mean_more_of_them(cluster):
    sizes = {mb: cluster.run(P.ddp_train, "digits-wide-mlp", 2, 30, 0.1, bucket_mb=mb)[0].buckets
             for mb in (0.01, 25.0)}
    assert len(sizes[0.01]) > len(sizes[25.0]) == 1
    assert sum(sizes[0.01]) == sum(sizes[25.0]) == 4 * 301066


def test_the_fp16_hook_trains_close_to_fp32(cluster, sync):
    half = cluster.run(P.ddp_train, "digits-mlp", 12, 60, 0.1, hook="fp16")
    assert 0 < (half[0].params - sync[0].params).abs().max() < 1e-2


def test_batch_that_does_not_split_is_a_clear_error(cluster):
    from ddl_lab import WorkerError
    with pytest.raises(WorkerError, match="must divide by the world size 3"):
        cluster.run(P.ddp_train, "digits-mlp", 2, 64, 0.1)
