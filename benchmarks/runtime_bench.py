"""Benchmark for lesson 00's runtime, measured side by side in one run.

- cold start of a 4-rank Cluster vs the floor: spawning 4 bare processes that import torch
  (target <= 1.5x);
- median round trip of a no-op ``run`` on 4 ranks (target <= 20 ms);
- PyTorch's mnist_hogwild example (a small CNN, ``model.share_memory()``, 2 processes) on
  sklearn's bundled digits, launched through the course runtime vs through
  ``torch.multiprocessing``'s own ``Process``: test accuracy and wall time;
- how long after a deadlocked run's timeout the per-rank report arrives (target <= 2 s).

    python benchmarks/runtime_bench.py [--repeats 3] [--epochs 4]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import multiprocess as mp
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
import torch.nn.functional as F

from ddl_lab import Cluster, WorkerTimeout


def _import_torch(conn) -> None:
    import torch  # noqa: F401
    conn.send("ready")


def bare_spawn(n: int) -> float:
    """Seconds to spawn n processes that import torch and report back."""
    ctx = mp.get_context("spawn")
    t0 = time.perf_counter()
    pipes = [ctx.Pipe() for _ in range(n)]
    procs = [ctx.Process(target=_import_torch, args=(child,), daemon=True) for _, child in pipes]
    for p in procs:
        p.start()
    for parent, _ in pipes:
        if not parent.poll(120):
            raise TimeoutError("a bare process did not start within 120 s")
        parent.recv()
    took = time.perf_counter() - t0
    for p in procs:
        p.join(10)
    return took


def cluster_start(n: int) -> float:
    t0 = time.perf_counter()
    c = Cluster(n)
    took = time.perf_counter() - t0
    c.shutdown()
    return took


def round_trip(n: int, runs: int = 200) -> float:
    with Cluster(n) as c:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            c.run(int)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


# ------------------------------------------------- mnist_hogwild on the digits

class Net(torch.nn.Module):
    """pytorch/examples mnist_hogwild's CNN, sized for 8x8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, kernel_size=3, padding=1)
        self.fc1 = torch.nn.Linear(16 * 4 * 4, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def digits() -> tuple[torch.Tensor, ...]:
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    y = torch.tensor(d.target)
    return x[:1500], y[:1500], x[1500:], y[1500:]


def train(rank: int, model: Net, epochs: int, data: tuple) -> None:
    """mnist_hogwild's ``train``: SGD with momentum on the shared model, no locks."""
    torch.set_num_threads(1)
    torch.manual_seed(1 + rank)
    x, y = data[0], data[1]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    for _ in range(epochs):
        for idx in torch.randperm(len(x)).split(32):
            optimizer.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            optimizer.step()


def accuracy(model: Net, data: tuple) -> float:
    with torch.no_grad():
        return (model(data[2]).argmax(1) == data[3]).float().mean().item()


def fresh_model() -> Net:
    torch.manual_seed(0)
    model = Net()
    model.share_memory()
    return model


def hogwild_torch_mp(processes: int, epochs: int, data: tuple) -> tuple[float, float]:
    """Accuracy and seconds with mnist_hogwild's own launcher (spawned Processes)."""
    model = fresh_model()
    t0 = time.perf_counter()
    ctx = tmp.get_context("spawn")
    procs = [ctx.Process(target=train, args=(r, model, epochs, data)) for r in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    return accuracy(model, data), time.perf_counter() - t0


def _hogwild_rank(model: Net, epochs: int, data: tuple) -> None:
    train(dist.get_rank(), model, epochs, data)


def hogwild_runtime(cluster: Cluster | None, processes: int, epochs: int,
                    data: tuple) -> tuple[float, float]:
    """Accuracy and seconds through the course runtime (a fresh cluster when None)."""
    model = fresh_model()
    t0 = time.perf_counter()
    if cluster is None:
        with Cluster(processes, timeout=600) as c:
            c.run(_hogwild_rank, model, epochs, data)
    else:
        cluster.run(_hogwild_rank, model, epochs, data)
    return accuracy(model, data), time.perf_counter() - t0


def _deadlock() -> None:
    if dist.get_rank() == 0:
        dist.recv(torch.zeros(1), src=1)


def timeout_report(cluster: Cluster, timeout: float = 1.0) -> float:
    """Seconds from a deadlocked run's timeout to its per-rank report."""
    cluster.run(int)                      # fresh workers are started by the run after one
    t0 = time.perf_counter()
    try:
        cluster.run_with(_deadlock, timeout=timeout)
    except WorkerTimeout:
        return time.perf_counter() - t0 - timeout
    raise AssertionError("the deadlock did not time out")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=4)
    a = ap.parse_args()
    n = a.world_size
    floors, starts = [], []
    for _ in range(a.repeats):            # interleaved, so both see the same machine load
        floors.append(bare_spawn(n))
        starts.append(cluster_start(n))
    floor, start = statistics.median(floors), statistics.median(starts)
    rt = round_trip(n)
    print(f"cold start, {n} ranks (median of {a.repeats}):")
    print(f"  bare spawn + import torch : {floor:6.2f} s")
    print(f"  Cluster({n}) ready         : {start:6.2f} s")
    print(f"  ratio                     : {start / floor:6.2f}x   (target <= 1.5x)")
    print(f"no-op run() round trip, {n} ranks, median of 200: {rt * 1e3:.2f} ms (target <= 20 ms)")

    data = digits()
    print(f"\nmnist_hogwild on sklearn digits, 2 processes, {a.epochs} epochs "
          f"(median of {a.repeats}; untrained accuracy {accuracy(fresh_model(), data):.3f}):")
    rows: dict[str, list[tuple[float, float]]] = {"torch.multiprocessing Process": [],
                                                  "runtime, fresh Cluster": [],
                                                  "runtime, warm Cluster": []}
    with Cluster(2, timeout=600) as warm:
        for _ in range(a.repeats):        # interleaved
            rows["torch.multiprocessing Process"].append(hogwild_torch_mp(2, a.epochs, data))
            rows["runtime, fresh Cluster"].append(hogwild_runtime(None, 2, a.epochs, data))
            rows["runtime, warm Cluster"].append(hogwild_runtime(warm, 2, a.epochs, data))
        base = statistics.median(s for _, s in rows["torch.multiprocessing Process"])
        for name, runs in rows.items():
            acc, secs = statistics.median(r for r, _ in runs), statistics.median(s for _, s in runs)
            print(f"  {name:30s}: accuracy {acc:.3f}   wall {secs:6.2f} s   "
                  f"({secs / base:.2f}x torch.multiprocessing)")
        lags = [timeout_report(warm) for _ in range(a.repeats)]
    print(f"\ntimeout -> per-rank report (deadlock, 2 ranks): median "
          f"{statistics.median(lags):.2f} s, max {max(lags):.2f} s (target <= 2 s)")
    print("machine load (1/5/15 min): " + " / ".join(f"{x:.2f}" for x in os.getloadavg())
          + f" on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
