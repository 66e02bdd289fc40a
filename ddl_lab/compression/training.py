"""Data-parallel training that sends *encoded* updates over torch.distributed (lesson 08).

Three ways to train the digits model on real workers with compressed communication:

- ``train_worker``: synchronous data parallelism. Each rank encodes its gradient with a
  compressor from ``ddl_lab.compression.compressors``, the ranks exchange the bytes over gloo
  (``all_gather_bytes``: lengths first, then the padded byte tensors), every rank decodes
  all n updates, averages them and takes the same SGD step. The encoded bytes are counted.
- ``async_peer_worker``: decentralized asynchronous SGD (Strom 2015, Do's lecture's
  "no centralized parameter server"): each rank applies its own update at once and sends
  it to every peer; a listener thread per peer receives theirs, which are applied whenever
  they have arrived — no barrier, no server, stale updates allowed.
- ``ddp_worker``: the library's way, ``torch.nn.parallel.DistributedDataParallel`` with a
  communication hook (fp32 allreduce, fp16, PowerSGD); the bytes handed to allreduce are
  counted.

``run`` / ``run_async`` / ``run_ddp`` start these on a ``Cluster`` and merge the ranks'
logs into one ``Result``; the ``plot_*`` functions draw the lesson's pictures. All three
start alike: ``setup`` (a rank's model, shard and minibatch order), ``batches`` (its
minibatches), ``gradient`` (one minibatch's flat gradient and loss).
"""
from __future__ import annotations

import copy
import functools
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.compression.compressors import Compressor, ErrorFeedback, Scheme
from ddl_lab.ml.data import digits, shard
from ddl_lab.ml.models import MLP, SmallCNN, flat_grads, flat_params, set_flat_params
from ddl_lab.runtime import progress
from ddl_lab.runtime.patience import patience
from ddl_lab.runtime.wiretap import Wiretap

__all__ = ["all_gather_bytes", "RankLog", "Result", "merge_logs", "train_worker", "run", "compare",
           "async_peer_worker", "run_async", "ddp_worker", "run_ddp", "count_allreduce_bytes",
           "SEED_TABLE", "table", "size_text", "setup", "batches", "gradient"]

MODELS: dict[str, Callable[[], torch.nn.Module]] = {"mlp": MLP, "cnn": SmallCNN}
TIMEOUT_S = 30.0 * patience()   # longest wait for a peer's message in the asynchronous exchange

# The table of Trong-Hop Do's Distributed deep learning lecture: a 14.6M-parameter model's update, in MB.
SEED_TABLE = [("None (32-bit floating point)", 58.4, None),
              ("16-bit floating point", 29.2, 50.0),
              ("Quantized, τ=2", 0.21, 99.6)]


# ------------------------------------------------------------------ the wire

def all_gather_bytes(data: bytes) -> list[bytes]:
    """Every rank's message, in rank order, over torch.distributed (lesson 08).

    Messages differ in length, so the lengths go first (one all_gather of an int64),
    then the messages padded to the longest (one all_gather of uint8 tensors).
    """
    n = dist.get_world_size()
    length = torch.tensor([len(data)], dtype=torch.int64)
    lengths = [torch.zeros_like(length) for _ in range(n)]
    dist.all_gather(lengths, length)
    sizes = [int(x) for x in lengths]
    longest = max(sizes)
    if longest == 0:
        return [b""] * n
    buf = torch.zeros(longest, dtype=torch.uint8)
    if data:
        buf[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(n)]
    dist.all_gather(bufs, buf)
    return [b[:s].numpy().tobytes() for b, s in zip(bufs, sizes)]


# ------------------------------------------------------------------ data and model

@functools.lru_cache(maxsize=4)
def _split(world_size: int, rank: int, data_seed: int):
    train, test = digits(seed=data_seed)
    return shard(train, world_size, rank, seed=data_seed), test, len(train)


def setup(model: str, seed: int, batch_size: int, world_size: int, rank: int,
          data_seed: int = 0):
    """One rank's start: (the initial model, the same on every rank; its shard's X, y; the
    test set; minibatches per epoch; its generator of minibatch orders)."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}: use one of {list(MODELS)}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    mine, test, n_train = _split(world_size, rank, data_seed)
    per_epoch = n_train // world_size // batch_size     # the same on every rank
    if per_epoch < 1:
        raise ValueError(f"batch_size {batch_size} is larger than a shard "
                         f"({n_train // world_size} examples): use a smaller one")
    torch.manual_seed(seed)                             # the same initial model everywhere
    net = MODELS[model]()
    X, y = mine.tensors()
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return net, X, y, test, per_epoch, gen


def batches(n: int, batch_size: int, per_epoch: int, steps: int, gen: torch.Generator):
    """``steps`` minibatches of indices into a shard of ``n``, reshuffled every epoch."""
    step = 0
    while True:
        order = torch.randperm(n, generator=gen)
        for b in range(per_epoch):
            if step == steps:
                return
            yield order[b * batch_size:(b + 1) * batch_size]
            step += 1


@torch.no_grad()
def _accuracy(net: torch.nn.Module, test) -> float:
    X, y = test.tensors()
    return float((net(X).argmax(1) == y).float().mean())


def gradient(net: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The flat gradient of the cross-entropy on (X, y), and the loss."""
    net.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(X), y)
    loss.backward()
    return flat_grads(net), loss.item()


# ------------------------------------------------------------------ synchronous

@dataclass
class RankLog:
    """What one rank saw, step by step (lesson 08)."""

    scheme: str
    numel: int
    loss: list[float] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)          # bytes of this rank's update
    residual: list[float] = field(default_factory=list)    # ‖residual‖ after the step
    times: dict[str, list[float]] = field(default_factory=lambda: {
        "gradient": [], "encode": [], "exchange": [], "decode": []})
    evals: list[tuple[int, float]] = field(default_factory=list)   # (step, test accuracy)
    lag: list[int] = field(default_factory=list)  # async only: my step − the sender's step
    params: np.ndarray | None = None


def _compressor(scheme: Scheme | Compressor, seed: int) -> Compressor:
    """This rank's compressor: built from a ``Scheme``, or a fresh copy of a ``Compressor``."""
    if isinstance(scheme, Scheme):
        return scheme.build(seed=seed)
    if isinstance(scheme, Compressor):
        return copy.deepcopy(scheme)
    raise TypeError(f"expected a Scheme or a Compressor, got {type(scheme).__name__}")


def train_worker(scheme: Scheme | Compressor, epochs: int = 15, batch_size: int = 16,
                 lr: float = 0.3, momentum: float = 0.0, model: str = "mlp", seed: int = 0,
                 eval_every: int = 10) -> RankLog:
    """Synchronous data-parallel SGD exchanging encoded gradients (runs on every rank).

    Each step: local gradient → ``encode`` (with this rank's error-feedback residual, if
    any) → ``all_gather_bytes`` → decode all n updates → average → SGD step, identical on
    every rank. Momentum, if any, is accumulated locally *before* encoding (Deep Gradient
    Compression's momentum correction). Rank and world size come from torch.distributed.
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    net, X, y, test, per_epoch, gen = setup(model, seed, batch_size, n, rank)
    comp = _compressor(scheme, seed * 1000 + rank)
    theta = flat_params(net)
    log = RankLog(comp.name, theta.numel())
    velocity = torch.zeros_like(theta)
    steps = epochs * per_epoch
    log.evals.append((0, _accuracy(net, test)))
    for step, batch in enumerate(batches(len(y), batch_size, per_epoch, steps, gen), 1):
        t0 = time.perf_counter()
        g, loss = gradient(net, X[batch], y[batch])
        velocity.mul_(momentum).add_(g)               # momentum before compression
        t1 = time.perf_counter()
        data = comp.encode(velocity)
        t2 = time.perf_counter()
        messages = all_gather_bytes(data)
        t3 = time.perf_counter()
        update = sum(comp.decode(m, g.numel()) for m in messages) / n
        t4 = time.perf_counter()
        theta -= lr * update
        set_flat_params(net, theta)
        for key, dt in zip(log.times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            log.times[key].append(dt)
        log.loss.append(loss)
        log.sent.append(len(data))
        log.residual.append(comp.residual_norm if isinstance(comp, ErrorFeedback) else 0.0)
        if step % eval_every == 0 or step == steps:
            log.evals.append((step, _accuracy(net, test)))
        if step % per_epoch == 0:                     # the panel's bar, once an epoch
            progress(step, steps)
    log.params = theta.numpy()
    return log


@dataclass
class Result:
    """One training run merged over its ranks (lesson 08)."""

    label: str
    world_size: int
    numel: int
    loss: np.ndarray            # per step, mean over ranks
    sent: np.ndarray            # per step, bytes put on the wire by all ranks together
    residual: np.ndarray        # per step, mean ‖residual‖ over ranks
    eval_steps: np.ndarray
    accuracy: np.ndarray        # test accuracy at eval_steps (rank 0's model)
    times_ms: dict[str, float]  # median per step, mean over ranks
    spread: float               # max |θ_rank − θ_0|: 0 when the replicas agree
    lag: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))

    @property
    def final_accuracy(self) -> float:
        return float(self.accuracy[-1])

    @property
    def update_bytes(self) -> float:
        """Mean size of one rank's encoded update (the "Update Size" of Do's lecture's table)."""
        return float(self.sent.mean() / self.world_size)

    @property
    def fp32_bytes(self) -> int:
        return 4 * self.numel

    @property
    def reduction(self) -> float:
        """How many times smaller than the fp32 update."""
        return self.fp32_bytes / self.update_bytes

    @property
    def total_bytes(self) -> int:
        return int(self.sent.sum())

    def bytes_at_evals(self) -> np.ndarray:
        cum = np.concatenate([[0], np.cumsum(self.sent)])
        return cum[self.eval_steps]


def merge_logs(logs: Sequence[RankLog]) -> Result:
    n = len(logs)
    steps = min(len(lg.loss) for lg in logs)
    first = logs[0]
    spread = max(float(np.abs(lg.params - first.params).max()) for lg in logs)
    times = {k: 1e3 * float(np.mean([np.median(lg.times[k]) if lg.times[k] else 0.0
                                     for lg in logs])) for k in first.times}
    return Result(first.scheme, n, first.numel,
                  np.mean([lg.loss[:steps] for lg in logs], axis=0),
                  np.sum([lg.sent[:steps] for lg in logs], axis=0),
                  np.mean([lg.residual[:steps] for lg in logs], axis=0),
                  np.array([s for s, _ in first.evals]), np.array([a for _, a in first.evals]),
                  times, spread,
                  np.concatenate([np.asarray(lg.lag, dtype=int) for lg in logs]))


def run(cluster, scheme: Scheme | Compressor, timeout: float | None = 120.0,
        **options: Any) -> Result:
    """Train on every rank of ``cluster`` with ``scheme``; the merged ``Result``."""
    return merge_logs(cluster.run_with(train_worker, (scheme,), options, timeout=timeout))


def compare(cluster, schemes: Sequence[Scheme], **options: Any) -> list[Result]:
    """``run`` each scheme with the same options (same data, seed and initial model)."""
    return [run(cluster, s, **options) for s in schemes]


# ------------------------------------------------------------------ asynchronous, peer to peer

def _listen(peer: int, count: int, inbox: "queue.Queue") -> None:
    """Receive ``count`` messages from ``peer`` (length, then bytes) into ``inbox``."""
    try:
        for s in range(count):
            length = torch.zeros(1, dtype=torch.int64)
            dist.recv(length, src=peer, tag=2 * s)
            buf = torch.empty(int(length), dtype=torch.uint8)
            if int(length):
                dist.recv(buf, src=peer, tag=2 * s + 1)
            inbox.put((peer, s, buf.numpy().tobytes()))
    except BaseException as e:          # the main loop re-raises it, naming the peer
        inbox.put((peer, -1, e))


def async_peer_worker(scheme: Scheme | Compressor, steps: int = 120, batch_size: int = 16,
                      lr: float = 0.3, max_lag: int | None = None, model: str = "mlp",
                      seed: int = 0, eval_every: int = 20) -> RankLog:
    """Decentralized asynchronous SGD: no server, no barrier (lesson 08).

    Each rank, every step: apply the peers' updates that have arrived, compute a gradient
    on its current (possibly stale) model, encode it, apply it at once and ``isend`` it
    to every peer. Each update is scaled by 1/n. With ``max_lag`` (bounded staleness, the
    lecture's remedy) a rank about to make step s first waits, if need be, for every peer's
    updates up to step s − max_lag. At the end every rank drains the messages still on
    their way, so all ranks have applied the same updates, in different orders.
    ``lag`` logs, for each peer update applied, this rank's step minus the step at which
    the sender made it (positive: stale; negative: the peer is ahead).
    """
    if max_lag is not None and max_lag < 0:
        raise ValueError(f"max_lag must be >= 0 steps (or None: unbounded), got {max_lag}")
    rank, n = dist.get_rank(), dist.get_world_size()
    net, X, y, test, per_epoch, gen = setup(model, seed, batch_size, n, rank)
    comp = _compressor(scheme, seed * 1000 + rank)
    theta = flat_params(net)
    log = RankLog(comp.name, theta.numel())
    inbox: queue.Queue = queue.Queue()
    peers = [p for p in range(n) if p != rank]
    got = dict.fromkeys(peers, 0)                     # updates applied, per peer
    listeners = [threading.Thread(target=_listen, args=(p, steps, inbox), daemon=True)
                 for p in peers]
    for t in listeners:
        t.start()
    pending: list = []                   # (work, tensors kept alive until sent)

    def apply(now: int, wait: bool) -> None:
        try:
            peer, s, data = inbox.get(timeout=TIMEOUT_S) if wait else inbox.get_nowait()
        except queue.Empty:
            if not wait:
                raise
            late = [p for p in peers if got[p] < steps]
            raise TimeoutError(f"rank {rank} waited {TIMEOUT_S:g} s for updates from "
                               f"rank(s) {late}") from None
        if s < 0:
            raise RuntimeError(f"receiving from rank {peer} failed: {data!r}")
        theta.sub_(comp.decode(data, theta.numel()), alpha=lr / n)
        got[peer] += 1
        log.lag.append(now - s)

    log.evals.append((0, _accuracy(net, test)))
    for s, batch in enumerate(batches(len(y), batch_size, per_epoch, steps, gen)):
        while True:                                   # whatever has arrived, no waiting
            try:
                apply(s, wait=False)
            except queue.Empty:
                break
        while max_lag is not None and peers and min(got.values()) < s - max_lag:
            apply(s, wait=True)                       # bounded staleness: wait for the slow
        set_flat_params(net, theta)
        t0 = time.perf_counter()
        g, loss = gradient(net, X[batch], y[batch])
        t1 = time.perf_counter()
        data = comp.encode(g)
        t2 = time.perf_counter()
        theta.sub_(comp.decode(data, theta.numel()), alpha=lr / n)
        length = torch.tensor([len(data)], dtype=torch.int64)
        body = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else None
        for p in peers:
            pending.append((dist.isend(length, dst=p, tag=2 * s), length, body))
            if body is not None:
                pending.append((dist.isend(body, dst=p, tag=2 * s + 1), length, body))
        t3 = time.perf_counter()
        for key, dt in zip(log.times, (t1 - t0, t2 - t1, t3 - t2, 0.0)):
            log.times[key].append(dt)
        log.loss.append(loss)
        log.sent.append(len(data))
        log.residual.append(comp.residual_norm if isinstance(comp, ErrorFeedback) else 0.0)
        if (s + 1) % eval_every == 0 and s + 1 < steps:
            set_flat_params(net, theta)
            log.evals.append((s + 1, _accuracy(net, test)))
        if (s + 1) % per_epoch == 0 or s + 1 == steps:
            progress(s + 1, steps)
    while sum(got.values()) < steps * len(peers):     # drain what is still on its way
        apply(steps, wait=True)
    for work, *_ in pending:
        work.wait(timeout=timedelta(seconds=TIMEOUT_S))
    for t in listeners:
        t.join(TIMEOUT_S)
    set_flat_params(net, theta)
    log.evals.append((steps, _accuracy(net, test)))
    log.params = theta.numpy()
    return log


def run_async(cluster, scheme: Scheme | Compressor, timeout: float | None = 120.0,
              **options: Any) -> Result:
    """``async_peer_worker`` on every rank of ``cluster``, merged."""
    return merge_logs(cluster.run_with(async_peer_worker, (scheme,), options, timeout=timeout))


# ------------------------------------------------------------------ torch DDP hooks

class count_allreduce_bytes(Wiretap):
    """In a worker: count the bytes of every tensor handed to ``all_reduce`` (the DDP
    hooks call it from Python), with the runtime's wiretap on the process group."""

    @property
    def bytes(self) -> int:
        return self.payload["all_reduce"]


HOOKS = ("fp32", "fp16", "powersgd")


def ddp_worker(hook: str = "fp32", epochs: int = 15, batch_size: int = 16, lr: float = 0.3,
               momentum: float = 0.0, model: str = "mlp", seed: int = 0, rank_k: int = 1,
               eval_every: int = 10) -> RankLog:
    """DistributedDataParallel with a communication hook on gloo (lesson 08).

    ``hook``: 'fp32' (allreduce_hook), 'fp16' (fp16_compress_hook) or 'powersgd'
    (PowerSGD, rank ``rank_k``, error feedback, plain allreduce for the first 2 steps).
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP
    if hook not in HOOKS:
        raise ValueError(f"unknown hook {hook!r}: use one of {HOOKS}")
    rank, n = dist.get_rank(), dist.get_world_size()
    net, X, y, test, per_epoch, gen = setup(model, seed, batch_size, n, rank)
    ddp = DDP(net)
    if hook == "fp32":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    else:
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank_k,
                                            start_powerSGD_iter=2, random_seed=seed)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=momentum)
    log = RankLog(f"DDP {hook}" + (f" rank {rank_k}" if hook == "powersgd" else ""),
                  sum(p.numel() for p in net.parameters()))
    steps = epochs * per_epoch
    log.evals.append((0, _accuracy(net, test)))
    with count_allreduce_bytes() as counter:
        for step, batch in enumerate(batches(len(y), batch_size, per_epoch, steps, gen), 1):
            before = counter.bytes
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(ddp(X[batch]), y[batch])
            loss.backward()                       # the hook runs inside backward
            opt.step()
            log.times["gradient"].append(time.perf_counter() - t0)
            log.loss.append(loss.item())
            log.sent.append(counter.bytes - before)
            log.residual.append(0.0)
            if step % eval_every == 0 or step == steps:
                log.evals.append((step, _accuracy(net, test)))
            if step % per_epoch == 0:
                progress(step, steps)
    log.params = flat_params(net).numpy()
    return log


def run_ddp(cluster, hook: str, timeout: float | None = 120.0, **options: Any) -> Result:
    """``ddp_worker`` on every rank of ``cluster``, merged."""
    return merge_logs(cluster.run_with(ddp_worker, (hook,), options, timeout=timeout))


# --------------------------------------------------------- Do's lecture's table

def size_text(b: float) -> str:
    """'12.3 KB': a byte count in words (decimal units, as Do's lecture's table)."""
    for unit, k in (("MB", 1e6), ("KB", 1e3)):
        if b >= k:
            return f"{b / k:.3g} {unit}"
    return f"{b:.0f} B"


def table(results: Sequence[Result], seed_rows: Sequence[tuple] = SEED_TABLE) -> str:
    """Do's lecture's table, our measured rows beside it, plus accuracy reached."""
    base = results[0].fp32_bytes
    lines = [f"{'compression':<26}{'update size':>12}{'reduction':>11}{'x smaller':>11}"
             f"{'accuracy':>10}   seed (58.4 MB model)"]
    for i, r in enumerate(results):
        seed = ""
        if i < len(seed_rows):
            name, mb, red = seed_rows[i]
            seed = f"{name}: {mb} MB" + (f", {red}%" if red is not None else "")
        red = "-" if i == 0 else f"{100 * (1 - r.update_bytes / base):.1f}%"
        lines.append(f"{r.label:<26}{size_text(r.update_bytes):>12}{red:>11}"
                     f"{base / r.update_bytes:>10.1f}x{100 * r.final_accuracy:>9.1f}%   {seed}")
    return "\n".join(lines)
