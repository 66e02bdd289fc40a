"""Federated averaging (McMahan et al. 2017) on the course's workers (lesson 11).

K clients each hold their own shard of the digits — non-IID when ``skew`` > 0 (label skew:
a client sees mostly one or two digits) and of unequal sizes. Each round the server
picks a fraction C of the clients; each picked client that does not drop out runs
``client_update`` (E epochs of SGD with mini-batches of B on its own data, starting from
the global model) and the server replaces the global model by ``fedavg``: the average of
the client models weighted by their data sizes n_k. FedSGD is the special case E = 1,
B = ∞ (one full-batch gradient step per client).

``federated`` runs that on real workers: client k is simulated by rank k mod R, and the
server's weighted sum is one allreduce of Σ n_k·w_k and Σ n_k (or, with ``aggregate``, a
gather of the client models and a call of ``aggregate(states, sizes)``). Every random
choice comes from (seed, round, client), so the result does not depend on R.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.ml.data import Dataset, digits, shard
from ddl_lab.ml.models import MLP, flat_params, set_flat_params
from ddl_lab.runtime import progress

__all__ = ["fedavg", "client_update", "make_clients", "choose", "federated", "FedRun",
           "centralised", "run_federated", "summary"]


# ---------------------------------------------------------------- the textbook version

def fedavg(states: list[dict[str, torch.Tensor]], sizes: list[int]) -> dict[str, torch.Tensor]:
    """The server's step: w ← Σ_k n_k·w_k / Σ_k n_k, each client weighted by its data."""
    total = sum(sizes)
    return {key: sum(n * s[key] for n, s in zip(sizes, states)) / total for key in states[0]}


def client_update(model: nn.Module, X: torch.Tensor, y: torch.Tensor, epochs: int,
                  batch: int | None, lr: float, gen: torch.Generator) -> None:
    """ClientUpdate: ``epochs`` passes of mini-batch SGD over the client's own data
    (``batch=None``: the whole shard at once, FedSGD's B = ∞)."""
    loss_fn = nn.functional.cross_entropy
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=gen).split(batch or len(y)):
            model.zero_grad()
            loss_fn(model(X[idx]), y[idx]).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= lr * p.grad


# ---------------------------------------------------------------- clients and rounds

def make_clients(K: int = 10, skew: float = 1.0, seed: int = 0,
                 smallest: float = 0.25) -> tuple[list[Dataset], Dataset]:
    """K client shards of the digits' training set, and the test set (lesson 11).

    As McMahan et al.'s "pathological non-IID" split: the training set is cut into 2K
    shards — sorted by label for ``skew`` 1 (so each client ends up with about two digits),
    at random for 0 (IID), a mix between — and each client gets two shards at random. Client
    k then keeps a random fraction between ``smallest`` and 1 of its examples, so the
    sizes n_k differ.
    """
    train, test = digits(seed=seed)
    rng = np.random.default_rng(seed + 7)
    parts = shard(train, 2 * K, skew=skew, seed=seed)
    pairs = rng.permutation(2 * K).reshape(K, 2)
    clients = []
    for i, j in pairs:
        both = Dataset(np.concatenate([parts[i].X, parts[j].X]),
                       np.concatenate([parts[i].y, parts[j].y]))
        keep = max(1, int(round(len(both) * rng.uniform(smallest, 1.0))))
        clients.append(both.subset(np.sort(rng.permutation(len(both))[:keep])))
    return clients, test


def choose(K: int, C: float, drop: float, seed: int, round_: int) -> tuple[list[int], list[int]]:
    """Round ``round_``: the max(1, ⌊C·K⌋) clients picked, and those that did not drop out."""
    rng = np.random.default_rng([seed, round_])
    m = max(1, int(C * K))
    picked = sorted(rng.choice(K, size=m, replace=False).tolist())
    alive = [k for k, u in zip(picked, rng.random(m)) if u >= drop]
    return picked, alive


def _client_gen(seed: int, round_: int, k: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + round_ * 1009 + k)


@dataclass
class FedRun:
    """What a federated run recorded, round by round (round 0: the initial model)."""

    label: str
    accuracy: list[float] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)          # cumulative, server ↔ clients
    drift: list[float] = field(default_factory=list)        # RMS ‖w_k − w_new‖ of the round
    picked: list[int] = field(default_factory=list)
    alive: list[int] = field(default_factory=list)
    params: torch.Tensor | None = None
    unit: str = "rounds"                                    # "epochs" for centralised

    @property
    def rounds(self) -> list[int]:
        return list(range(len(self.accuracy)))


def _accuracy(model: nn.Module, test: Dataset) -> float:
    X, y = test.tensors()
    with torch.no_grad():
        return float((model(X).argmax(1) == y).float().mean())


def _aggregate_allreduce(locals_: list[tuple[int, torch.Tensor]], P: int
                         ) -> torch.Tensor | None:
    """Σ n_k·w_k and Σ n_k over every rank's clients in one allreduce: the weighted mean
    (None if every picked client dropped out)."""
    acc = torch.zeros(P + 1, dtype=torch.float64)
    for n_k, w in locals_:
        acc[:P] += n_k * w.double()
        acc[P] += n_k
    dist.all_reduce(acc)
    return None if acc[P] == 0 else (acc[:P] / acc[P]).float()


def _aggregate_with(fn: Callable, mine: list[tuple[int, int, dict]]) -> dict | None:
    """Gather every client's (k, n_k, state) on every rank; ``fn(states, sizes)`` in order."""
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    clients = sorted(c for part in everyone for c in part)
    if not clients:
        return None
    return fn([s for _, _, s in clients], [n for _, n, _ in clients])


def _drift(locals_: list[tuple[int, torch.Tensor]], new: torch.Tensor) -> float:
    """RMS over all clients of this round (weighted by n_k) of ‖w_k − w_new‖."""
    d = torch.tensor([sum(n_k * float((w.double() - new.double()).pow(2).sum())
                          for n_k, w in locals_), float(sum(n for n, _ in locals_))],
                     dtype=torch.float64)
    dist.all_reduce(d)
    return float((d[0] / d[1]).sqrt()) if d[1] > 0 else 0.0


def federated(K: int = 10, rounds: int = 20, E: int = 5, B: int | None = 20, C: float = 0.5,
              lr: float = 0.1, skew: float = 1.0, drop: float = 0.0, seed: int = 0,
              aggregate: Callable | None = None, label: str = "") -> FedRun:
    """Worker: ``rounds`` of FedAvg (FedSGD with E=1, B=None) over K clients (lesson 11)."""
    for name, value in (("K", K), ("rounds", rounds), ("E", E), ("B", 1 if B is None else B)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if not (0 < C <= 1 and 0 <= drop <= 1):
        raise ValueError(f"need 0 < C <= 1 (the fraction of clients picked) and 0 <= drop <= 1"
                         f", got C={C!r}, drop={drop!r}")
    rank, n = dist.get_rank(), dist.get_world_size()
    clients, test = make_clients(K, skew, seed)
    data = {k: clients[k].tensors() for k in range(rank, K, n)}
    torch.manual_seed(seed)
    model = MLP(64, 64, 10)
    nparams = sum(p.numel() for p in model.parameters())
    nbytes = nparams * 4                                    # fp32 on the wire
    run = FedRun(label or ("FedSGD" if B is None and E == 1 else f"FedAvg E={E} B={B}"))
    run.accuracy.append(_accuracy(model, test))
    run.bytes.append(0)
    for t in range(1, rounds + 1):
        picked, alive = choose(K, C, drop, seed, t)
        locals_ = []
        for k in (k for k in alive if k % n == rank):
            local = copy.deepcopy(model)
            client_update(local, *data[k], E, B, lr, _client_gen(seed, t, k))
            locals_.append((k, len(data[k][1]), local))
        flat = [(m, flat_params(w)) for _, m, w in locals_]
        if aggregate is None:
            new = _aggregate_allreduce(flat, nparams)
            if new is not None:
                set_flat_params(model, new)
        else:
            state = _aggregate_with(aggregate, [(k, m, w.state_dict()) for k, m, w in locals_])
            if state is not None:
                model.load_state_dict(state)
        run.drift.append(_drift(flat, flat_params(model)))
        run.accuracy.append(_accuracy(model, test))
        run.bytes.append(run.bytes[-1] + (len(picked) + len(alive)) * nbytes)
        run.picked.append(len(picked))
        run.alive.append(len(alive))
        progress(t, rounds)
    run.params = flat_params(model)
    return run


def run_federated(cluster, **options) -> FedRun:
    """``federated`` on every rank of ``cluster`` (all ranks agree); rank 0's record.
    An ``aggregate`` is tried here on one client first, so that an error shows at once."""
    if options.get("aggregate") is not None:
        options["aggregate"]([{"w": torch.ones(1)}], [1])
    return cluster.run(federated, **options)[0]


def centralised(epochs: int = 10, B: int = 20, lr: float = 0.1, seed: int = 0) -> FedRun:
    """The baseline: all the data on one machine, plain mini-batch SGD; one entry per epoch
    (run in this process on one thread). Its bytes: the training set, uploaded once."""
    train, test = digits(seed=seed)
    X, y = train.tensors()
    torch.manual_seed(seed)
    model = MLP(64, 64, 10)
    run = FedRun("centralised", [_accuracy(model, test)], [0], unit="epochs")
    gen = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)            # as one worker: two threads fight on a busy machine
    try:
        for _ in range(epochs):
            client_update(model, X, y, 1, B, lr, gen)
            run.accuracy.append(_accuracy(model, test))
            run.bytes.append(int(train.X.nbytes + train.y.nbytes))
    finally:
        torch.set_num_threads(threads)
    run.params = flat_params(model)
    return run


def summary(runs: Sequence[FedRun]) -> list[str]:
    """One line per run: final accuracy, rounds (or epochs), bytes."""
    return [f"{r.label:>24}: accuracy {r.accuracy[-1]:.1%} after {len(r.accuracy) - 1} "
            f"{r.unit}, {r.bytes[-1] / 1e6:.2f} MB "
            + ("of data uploaded once" if r.unit == "epochs" else "between server and clients")
            for r in runs]
