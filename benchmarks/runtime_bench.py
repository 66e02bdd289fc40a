"""Benchmark for lesson 00's runtime, measured side by side in one run.

- cold start of a 4-rank Cluster, started by spawn and from the forkserver that preloads
  torch (``runtime.process``), vs the floor: a bare ``os.fork`` of this process (torch
  imported) 4 times (forkserver target <= 3x the floor and <= 0.5 s); spawn is also
  compared with spawning 4 bare processes that import torch (target <= 1.5x);
- a check's verdict (``check.ring_allreduce`` on lesson 06's solution) in a fresh kernel,
  cold (its first call: the warm cluster starts) and warm (the second), spawn vs forkserver;
- median round trip of a no-op ``run`` on 4 ranks (target <= 20 ms);
- PyTorch's mnist_hogwild example (a small CNN, ``model.share_memory()``, 2 processes) on
  sklearn's bundled digits, launched through the course runtime vs through
  ``torch.multiprocessing``'s own ``Process``: test accuracy and wall time;
- how long after a deadlocked run's timeout the per-rank report arrives (target <= 2 s).

    python benchmarks/runtime_bench.py [--repeats 3] [--epochs 4] [--verdict-repeats 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import multiprocess as mp
import torch
import torch.distributed as dist
import torch.multiprocessing as tmp
import torch.nn.functional as F

from ddl_lab import Cluster, WorkerTimeout
from ddl_lab.runtime.process import Child, start_method, stop_all, use_start_method

ROOT = Path(__file__).resolve().parents[1]


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


def bare_fork(n: int) -> float:
    """The floor: seconds to ``os.fork`` this process (torch imported) n times, each child
    reporting back through a pipe."""
    t0 = time.perf_counter()
    pids, reads = [], []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                     # the child runs no torch op: it reports and exits
            os.write(w, b"r")
            os._exit(0)
        os.close(w)
        pids.append(pid)
        reads.append(r)
    for r in reads:
        os.read(r, 1)
        os.close(r)
    took = time.perf_counter() - t0
    for pid in pids:
        os.waitpid(pid, 0)
    return took


def _ready(conn) -> None:
    conn.send("ready")


def children_start(n: int) -> float:
    """Seconds until n course processes (``process.Child``) answer: no process group."""
    t0 = time.perf_counter()
    children = [Child.start(_ready) for _ in range(n)]
    for c in children:
        if not c.conn.poll(120):
            raise TimeoutError("a course process did not start within 120 s")
        c.conn.recv()
    took = time.perf_counter() - t0
    stop_all(children)
    return took


def cluster_start(n: int, method: str | None = None) -> float:
    """Seconds until ``Cluster(n)`` is ready, its processes started by ``method``."""
    before = start_method()
    use_start_method(method or before)
    try:
        t0 = time.perf_counter()
        c = Cluster(n)
        took = time.perf_counter() - t0
        c.shutdown()
    finally:
        use_start_method(before)
    return took


VERDICT = """
import sys, time
sys.path.insert(0, {root!r})
from tests.conftest import load_solution
from ddl_lab import check
fn = load_solution("06_ring_allreduce", "my_ring_allreduce")
times = []
for _ in range(2):
    t0 = time.perf_counter()
    check.ring_allreduce(fn)
    times.append(time.perf_counter() - t0)
print("SECONDS", *times)
"""


def verdict(method: str) -> tuple[float, float]:
    """A fresh kernel's cold and warm ``check.ring_allreduce`` on the solution (seconds)."""
    out = subprocess.run([sys.executable, "-c", VERDICT.format(root=str(ROOT))], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "DDL_LAB_START_METHOD": method})
    said = [ln for ln in out.stdout.splitlines() if ln.startswith("SECONDS")]
    if out.returncode or not said:
        raise RuntimeError(f"the check did not pass under {method}:\n{out.stderr[-3000:]}")
    cold, warm = map(float, said[0].split()[1:])
    return cold, warm


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
    ap.add_argument("--verdict-repeats", type=int, default=2)
    a = ap.parse_args()
    n = a.world_size
    print(f"machine load (1/5/15 min): {_load()} on {os.cpu_count()} cores")
    use_start_method("forkserver")
    server = children_start(1)            # the first start in this process starts the server
    starts: dict[str, list[float]] = {"floor": [], "bare": [], "children": [], "spawn": [],
                                      "forkserver": []}
    for _ in range(a.repeats):            # interleaved, so all see the same machine load
        starts["floor"].append(bare_fork(n))
        starts["bare"].append(bare_spawn(n))
        starts["children"].append(children_start(n))
        starts["spawn"].append(cluster_start(n, "spawn"))
        starts["forkserver"].append(cluster_start(n, "forkserver"))
    m = {k: statistics.median(v) for k, v in starts.items()}
    floor = m["floor"]
    rt = round_trip(n)
    print(f"cold start, {n} ranks (median of {a.repeats}):")
    print(f"  floor: os.fork x{n} of this process (torch imported) : {floor * 1e3:8.1f} ms")
    print(f"  bare spawn + import torch, x{n}                       : {m['bare']:8.2f} s")
    print(f"  {n} course processes from the forkserver, no group    : {m['children']:8.2f} s"
          f"   ({m['children'] / floor:.1f}x floor)")
    print(f"  Cluster({n}) ready, spawn                             : {m['spawn']:8.2f} s"
          f"   ({m['spawn'] / m['bare']:.2f}x bare spawn; target <= 1.5x)")
    print(f"  Cluster({n}) ready, forkserver                        : {m['forkserver']:8.2f} s"
          f"   ({m['forkserver'] / floor:.1f}x floor; target <= 3x and <= 0.5 s)")
    print(f"  spawn / forkserver                                  : "
          f"{m['spawn'] / m['forkserver']:8.1f}x")
    print(f"  the forkserver's own start (once per kernel)        : {server:8.2f} s")
    print(f"no-op run() round trip, {n} ranks, median of 200: {rt * 1e3:.2f} ms (target <= 20 ms)")

    verdicts: dict[str, list[tuple[float, float]]] = {"spawn": [], "forkserver": []}
    for _ in range(a.verdict_repeats):    # interleaved
        for method, runs in verdicts.items():
            runs.append(verdict(method))
    print(f"\ncheck.ring_allreduce on the solution in a fresh kernel (median of "
          f"{a.verdict_repeats}; load now {_load()}):")
    cold = {k: statistics.median(c for c, _ in v) for k, v in verdicts.items()}
    warm = {k: statistics.median(w for _, w in v) for k, v in verdicts.items()}
    for method in verdicts:
        print(f"  {method:10s}: cold {cold[method]:6.2f} s   warm {warm[method]:6.2f} s")
    print(f"  spawn / forkserver: cold {cold['spawn'] / cold['forkserver']:.2f}x   "
          f"warm {warm['spawn'] / warm['forkserver']:.2f}x")

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
    print(f"machine load (1/5/15 min): {_load()} on {os.cpu_count()} cores")


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
