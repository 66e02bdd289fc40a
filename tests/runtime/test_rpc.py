"""torch.distributed.rpc on the course's workers, with functions and classes written in
notebook cells (README, \"Bring your own code\"; lesson 07's parameter server, the PyTorch way)."""
import os

import pytest

from ddl_lab import Cluster, rank_size

from .notebook import Notebook


@pytest.fixture(scope="module")
def cluster3():
    with Cluster(3, timeout=90) as c:
        yield c


def _env():
    keys = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")
    return {k: os.environ[k] for k in keys}


def test_each_cluster_gives_its_workers_a_loopback_master_port_of_its_own(cluster3):
    with Cluster(1) as other:
        mine, theirs = cluster3.run(_env), other.run(_env)[0]
    assert [e["RANK"] for e in mine] == ["0", "1", "2"]
    assert {e["MASTER_ADDR"] for e in mine} == {"127.0.0.1"} and mine[0]["WORLD_SIZE"] == "3"
    assert len({e["MASTER_PORT"] for e in mine}) == 1
    assert theirs["MASTER_PORT"] != mine[0]["MASTER_PORT"]


def test_cell_functions_and_classes_are_called_over_rpc_from_any_rank(cluster3):
    nb = Notebook()
    nb.cell("""
        import torch
        import torch.distributed as dist
        import torch.distributed.rpc as rpc

        def square(x):
            return x * x

        class Counter:
            def __init__(self, start):
                self.n = start

            def add(self, k):
                self.n += k
                return self.n
    """)
    nb.cell("""
        def ask_my_neighbour():
            rank, size = dist.get_rank(), dist.get_world_size()
            rpc.init_rpc(f"worker{rank}", rank=rank, world_size=size)
            peer = f"worker{(rank + 1) % size}"
            a = rpc.rpc_sync(peer, square, args=(rank + 2,))
            b = rpc.rpc_async(peer, square, args=(torch.tensor([rank + 1.0]),)).wait()
            counter = rpc.remote(peer, Counter, args=(10,))
            c = counter.rpc_sync().add(rank)
            del counter
            rpc.shutdown()
            return a, b.item(), c
    """)
    want = [(4, 1.0, 10), (9, 4.0, 11), (16, 9.0, 12)]
    assert cluster3.run(nb["ask_my_neighbour"]) == want
    assert cluster3.run(nb["ask_my_neighbour"]) == want     # RPC starts again next run


PARAMETER_SERVER = """
    # After pytorch/examples distributed/rpc/batch/parameter_server.py, made small.
    import threading
    import torch
    import torch.distributed.rpc as rpc

    torch.manual_seed(0)
    TRUE_W = torch.randn(5, 1)
    BATCHES, BATCH = 40, 16

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(5, 1, bias=False)

        def forward(self, x):
            return self.fc(x)

    class BatchUpdateParameterServer:
        def __init__(self, batch_update_size):
            self.model = Net()
            self.lock = threading.Lock()
            self.future_model = torch.futures.Future()
            self.batch_update_size = batch_update_size
            self.curr_update_size = 0
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
            for p in self.model.parameters():
                p.grad = torch.zeros_like(p)

        def get_model(self):
            return self.model

        @staticmethod
        @rpc.functions.async_execution
        def update_and_fetch_model(ps_rref, grads):
            self = ps_rref.local_value()
            for p, g in zip(self.model.parameters(), grads):
                p.grad += g
            with self.lock:
                self.curr_update_size += 1
                fut = self.future_model
                if self.curr_update_size >= self.batch_update_size:
                    for p in self.model.parameters():
                        p.grad /= self.batch_update_size
                    self.curr_update_size = 0
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=False)
                    fut.set_result(self.model)
                    self.future_model = torch.futures.Future()
            return fut

    class Trainer:
        def __init__(self, ps_rref):
            self.ps_rref, self.loss_fn = ps_rref, torch.nn.MSELoss()

        def get_next_batch(self):
            for _ in range(BATCHES):
                inputs = torch.randn(BATCH, 5)
                yield inputs, inputs @ TRUE_W

        def train(self):
            m = self.ps_rref.rpc_sync().get_model()
            for inputs, labels in self.get_next_batch():
                m.zero_grad()
                self.loss_fn(m(inputs), labels).backward()
                m = rpc.rpc_sync(self.ps_rref.owner(),
                                 BatchUpdateParameterServer.update_and_fetch_model,
                                 args=(self.ps_rref, [p.grad for p in m.parameters()]))

    def run_trainer(ps_rref):
        Trainer(ps_rref).train()

    def run_ps(trainers):
        ps_rref = rpc.RRef(BatchUpdateParameterServer(len(trainers)))
        futs = [rpc.rpc_async(t, run_trainer, args=(ps_rref,)) for t in trainers]
        torch.futures.wait_all(futs)
        return (ps_rref.local_value().model.fc.weight.detach().T - TRUE_W).norm().item()

    def run(rank, world_size):
        error = None
        if rank != 0:
            rpc.init_rpc(f"trainer{rank}", rank=rank, world_size=world_size)
        else:
            rpc.init_rpc("ps", rank=rank, world_size=world_size)
            error = run_ps([f"trainer{r}" for r in range(1, world_size)])
        rpc.shutdown()
        return error
"""


def test_the_rpc_parameter_server_example_runs_from_cells_unchanged(cluster3):
    nb = Notebook()
    nb.cell(PARAMETER_SERVER)
    start = (nb["Net"]().fc.weight.detach().T - nb["TRUE_W"]).norm().item()
    error, *trainers = cluster3.run(rank_size(nb["run"]))
    assert trainers == [None, None]
    assert error < 0.1 * start                                # the server's model learned
