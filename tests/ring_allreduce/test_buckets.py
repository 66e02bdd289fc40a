"""DDP-style gradient buckets on real workers: DDP's rule for cutting the gradients, the
buckets' allreduces averaging like one allreduce of everything (lesson 06)."""
from ddl_lab.data_parallel.workloads import build
from ddl_lab.ring_allreduce import buckets as B


def test_a_bucket_takes_gradients_until_it_holds_bucket_bytes():
    assert B.bucket_indices([40, 4, 100, 4, 4], 44) == [[0, 1], [2], [3, 4]]
    assert B.bucket_indices([40, 4, 100], 1) == [[0], [1], [2]]
    assert B.bucket_indices([40, 4, 100], 1 << 20) == [[0, 1, 2]]
    assert B.bucket_indices([], 8) == [[]]


def _buckets_match_one_allreduce():
    import torch.distributed as dist
    from ddl_lab.ml.models import flat_grads
    model, train, _, loss_fn = build("digits-mlp")
    X, y = train.tensors()
    rank = dist.get_rank()
    X, y = X[32 * rank:32 * rank + 32], y[32 * rank:32 * rank + 32]
    model.zero_grad()
    loss_fn(model(X), y).backward()
    want = flat_grads(model)
    dist.all_reduce(want)
    bucketed = B.GradientBuckets(model, bucket_bytes=1024)
    model.zero_grad()
    loss_fn(model(X), y).backward()
    bucketed.wait()
    bucketed.remove()
    return len(bucketed.buckets), float((flat_grads(model) - want / 3).abs().max())


def test_gradient_buckets_average_like_one_allreduce(cluster3):
    for count, err in cluster3.run(_buckets_match_one_allreduce):
        assert count > 2 and err < 1e-6
    out = cluster3.run(B.overlap_backward, "digits-mlp", 32, 1024, 1)[0]
    assert out["buckets"] > 2 and out["backward only"] > 0
