"""Tensors in shared memory reach the workers as the same memory (lesson 03; README, \"Bring your own code\").

Everything else is copied, as before: a worker's changes to a plain tensor stay in
the worker.
"""
import pytest
import torch
import torch.distributed as dist

from ddl_lab import Cluster

from .notebook import Notebook


@pytest.fixture(scope="module")
def cluster2():
    with Cluster(2, timeout=60) as c:
        yield c


def _write_my_slot(t):
    t[dist.get_rank()] += dist.get_rank() + 1
    return t.is_shared()


def test_a_shared_tensor_argument_is_the_notebooks_memory(cluster2):
    shared = torch.zeros(2).share_memory_()
    assert cluster2.run(_write_my_slot, shared) == [True, True]
    assert shared.tolist() == [1.0, 2.0]


def test_a_view_of_shared_memory_is_the_same_memory(cluster2):
    whole = torch.zeros(4).share_memory_()
    cluster2.run(_write_my_slot, whole[2:])
    assert whole.tolist() == [0.0, 0.0, 1.0, 2.0]


def _same(t):
    return t


def test_a_shared_tensor_comes_back_as_the_same_memory(cluster2):
    shared = torch.zeros(3).share_memory_()
    back = cluster2.run(_same, shared)[1]
    back[0] = 5.0
    assert shared[0].item() == 5.0


def test_a_tensor_not_in_shared_memory_is_copied(cluster2):
    plain = torch.zeros(2)
    assert cluster2.run(_write_my_slot, plain) == [False, False]
    assert plain.tolist() == [0.0, 0.0]


def test_a_captured_shared_model_with_a_buffer_is_the_same_memory(cluster2):
    nb = Notebook()
    nb.cell("""
        import torch
        import torch.distributed as dist

        model = torch.nn.Linear(3, 1)
        model.register_buffer("visits", torch.zeros(2))
        model.share_memory()

        def touch():                          # the model is captured, not passed
            with torch.no_grad():
                model.visits[dist.get_rank()] += 1
                model.bias[:] = 7.0
            return model.weight.is_shared()
    """)
    assert cluster2.run(nb["touch"]) == [True, True]
    assert nb["model"].visits.tolist() == [1.0, 1.0]
    assert nb["model"].bias.item() == 7.0


HOGWILD = """
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits

    digits = load_digits()
    X = torch.tensor(digits.data[:1500] / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target[:1500])
    X_test = torch.tensor(digits.data[1500:] / 16.0, dtype=torch.float32)
    y_test = torch.tensor(digits.target[1500:])

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(64, 32)
            self.fc2 = torch.nn.Linear(32, 10)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x)))

    def train(rank, model, epochs=3):           # as in pytorch/examples mnist_hogwild
        torch.manual_seed(rank)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        for _ in range(epochs):
            for idx in torch.randperm(len(X)).split(32):
                optimizer.zero_grad()
                F.cross_entropy(model(X[idx]), y[idx]).backward()
                optimizer.step()

    def accuracy(model):
        with torch.no_grad():
            return (model(X_test).argmax(1) == y_test).float().mean().item()

    torch.manual_seed(0)
    model = Net()
    model.share_memory()                      # gradients are allocated lazily
"""


def test_hogwild_written_the_pytorch_way_trains_the_notebooks_model(cluster2):
    nb = Notebook()
    nb.cell(HOGWILD)
    nb.cell("""
        import torch.distributed as dist
        hogwild = lambda: train(dist.get_rank(), model)     # as the README shows
    """)
    model, accuracy = nb["model"], nb["accuracy"]
    before = [p.detach().clone() for p in model.parameters()]
    assert accuracy(model) < 0.3                                   # untrained: chance
    cluster2.run(nb["hogwild"])
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    assert accuracy(model) > 0.8
