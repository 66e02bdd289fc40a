"""The loops lesson 05 prints train exactly the model the instrumented engine trains."""
import pytest
import torch

from ddl_lab.data_parallel import engine, textbook
from ddl_lab.data_parallel.workloads import batch_indices
from ddl_lab.ml.models import flat_params
from ddl_lab.runtime import shared_cluster


def _same_model(workload: str, steps: int, batch: int, lr: float, H: int) -> list[bool]:
    """Engine and textbook on this rank's same mini-batches: equal final parameters?"""
    same = []
    for loop in ("sync", "local"):
        if loop == "sync":
            run = engine.sync_sgd(workload, steps, batch, lr)
        else:
            run = engine.local_sgd(workload, steps, batch, lr, sync_every=H)
        model, loss_fn, X, y, _, rank, b = engine._prepare(workload, batch, 0, 0.0)
        batches = [(X[i], y[i]) for i in batch_indices(len(y), b, steps, 0, rank)]
        if loop == "sync":
            textbook.sync_sgd(model, loss_fn, batches, lr)
        else:
            textbook.local_sgd(model, loss_fn, batches, lr, set(range(H, steps + 1, H)))
        same.append(torch.equal(flat_params(model).cpu(), run.params))
    return same


@pytest.mark.parametrize("world_size, workload, steps, batch, H", [
    (2, "digits-mlp", 7, 32, 3), (3, "linreg", 9, 48, 1), (3, "digits-cnn", 4, 30, 2)])
def test_textbook_loops_equal_the_engine(world_size, workload, steps, batch, H):
    out = shared_cluster(world_size).run(_same_model, workload, steps, batch, 0.1, H)
    assert out == [[True, True]] * world_size
