"""Allreduce through shared memory between the worker processes of one machine (lesson 06).

On one machine the ranks need no network at all: they can meet in one shared-memory
segment. Each rank owns a slot of it, and one more region holds the results; an
allreduce is then a reduce-scatter and an allgather done with plain memory copies and
additions, separated by barriers:

1. every rank copies the chunks the others will need into its slot;
2. barrier; rank r adds up chunk r of every slot and writes the sum to the results;
3. barrier; every rank copies the others' finished chunks back into its tensor.

(The results have their own region so that the next call's step 1, whatever its size,
cannot overwrite a sum that a slower rank is still copying in step 3.)

No byte goes through a socket, so the only limit left is how fast memory moves
(``memcpy_floor`` measures it). ``ShmAllreduce.buffer`` goes one step further: a tensor
that lives in the segment itself (as DDP's gradient buckets do), so the copy in and out
disappears.

The barriers are POSIX named semaphores (no sockets, every wait with a timeout); the
segment and the semaphores are created by rank 0, opened by name by the others, and
their names are removed from the system as soon as everyone has opened them, so nothing
outlives the processes even if one is killed.
"""
from __future__ import annotations

import secrets
import time
from contextlib import contextmanager
from multiprocessing import resource_tracker, shared_memory
from typing import Iterator

import _multiprocessing
import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.ring_allreduce.engine import best_of, chunk_bounds, time_allreduce

__all__ = ["ShmAllreduce", "shm_allreduce", "close_shm", "memcpy_floor", "time_shm_buffer",
           "compare_allreduce"]

_ALIGN = 64                          # bytes: each slot starts on a cache line


@contextmanager
def _untracked() -> Iterator[None]:
    """Keep Python's resource tracker out: we remove the names ourselves, at once.

    (Python < 3.13 registers every *attached* segment too, then "cleans up" segments
    that are not its own at exit; ``track=False`` in 3.13 does what this does.)
    """
    reg, unreg = resource_tracker.register, resource_tracker.unregister
    resource_tracker.register = resource_tracker.unregister = lambda *a, **k: None
    try:
        yield
    finally:
        resource_tracker.register, resource_tracker.unregister = reg, unreg


class _Semaphore:
    """A POSIX named semaphore (CPython's own, from ``_multiprocessing``) with timeouts."""

    def __init__(self, name: str, create: bool):
        kind, top = 1, _multiprocessing.SemLock.SEM_VALUE_MAX      # 1 = counting semaphore
        self.name = name
        self._sem = (_multiprocessing.SemLock(kind, 0, top, name, False) if create
                     else _multiprocessing.SemLock._rebuild(0, kind, top, name))

    def post(self) -> None:
        self._sem.release()

    def wait(self, timeout: float) -> bool:
        return self._sem.acquire(True, max(timeout, 0.0))

    @staticmethod
    def unlink(name: str) -> None:
        try:
            _multiprocessing.sem_unlink(name)
        except (FileNotFoundError, OSError):
            pass


class ShmAllreduce:
    """A shared segment with one slot of ``nbytes`` per rank, and a barrier (lesson 06).

    Collective: every rank of the default group constructs it with the same ``nbytes``.
    ``allreduce(tensor)`` sums a tensor of up to ``nbytes`` in place; ``buffer(numel,
    dtype)`` returns this rank's slot as a tensor that ``allreduce_buffer`` sums with no
    copy in or out. Every wait gives up after ``timeout`` seconds with a TimeoutError
    naming the ranks that did not arrive. ``close()`` releases the memory.
    """

    def __init__(self, nbytes: int, timeout: float = 30.0):
        if not dist.is_initialized():
            raise RuntimeError("ShmAllreduce needs torch.distributed: run it on a cluster's "
                               "workers (cluster.run(fn)) or under torchrun")
        if nbytes < 1 or timeout <= 0:
            raise ValueError(f"nbytes and timeout must be positive, got {nbytes}, {timeout}")
        self.n, self.rank, self.timeout = dist.get_world_size(), dist.get_rank(), timeout
        self.capacity = -(-nbytes // _ALIGN) * _ALIGN
        self._epoch = 0
        self._shm: shared_memory.SharedMemory | None = None
        token = [secrets.token_hex(5) if self.rank == 0 else None]
        dist.broadcast_object_list(token, src=0)             # agree on names (once)
        base = f"dl{token[0]}"
        header = _ALIGN * (1 + (self.n + 1) // 8)            # epochs per rank, a flag
        names = [f"/{base}a"] + [f"/{base}g{r}" for r in range(self.n)]
        try:
            with _untracked():
                if self.rank == 0:
                    self._shm = shared_memory.SharedMemory(
                        base, create=True, size=header + (self.n + 1) * self.capacity)
                    self._sems = [_Semaphore(nm, True) for nm in names]
                dist.barrier()
                if self.rank != 0:
                    self._shm = shared_memory.SharedMemory(base)
                    self._sems = [_Semaphore(nm, False) for nm in names]
                dist.barrier()                               # everyone has opened them
        finally:
            if self.rank == 0:                               # the names go, the memory stays
                if self._shm is not None:
                    with _untracked():
                        self._shm.unlink()
                for nm in names:
                    _Semaphore.unlink(nm)
        self._arrive, self._go = self._sems[0], self._sems[1:]
        self._state = np.ndarray((self.n + 1,), np.int64, self._shm.buf, 0)
        self._epochs = self._state[:self.n]                  # barriers passed, per rank
        self._data = np.ndarray(((self.n + 1) * self.capacity,), np.uint8, self._shm.buf,
                                header)

    # -- the pieces
    def slot(self, rank: int, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """Rank ``rank``'s slot (``rank = n``: the results) as a 1-D tensor of ``numel``
        elements, sharing the memory."""
        size = torch.tensor([], dtype=dtype).element_size()
        if numel * size > self.capacity:
            raise ValueError(f"{numel} × {size} bytes do not fit a slot of {self.capacity}")
        raw = self._data[rank * self.capacity: rank * self.capacity + numel * size]
        return torch.from_numpy(raw).view(dtype)

    def buffer(self, numel: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """This rank's slot as a tensor: write into it, then ``allreduce_buffer``."""
        return self.slot(self.rank, numel, dtype)

    def barrier(self) -> None:
        """Wait until every rank has arrived (semaphores; TimeoutError after ``timeout``)."""
        self._epoch += 1
        self._epochs[self.rank] = self._epoch
        deadline = time.monotonic() + self.timeout
        if self.rank == 0:
            for _ in range(self.n - 1):
                if not self._arrive.wait(deadline - time.monotonic()):
                    self._timed_out()
            for r in range(1, self.n):
                self._go[r].post()
        else:
            self._arrive.post()
            if not self._go[self.rank].wait(deadline - time.monotonic()):
                self._timed_out()

    @property
    def broken(self) -> bool:
        """True once any rank gave up waiting: every rank must then make a new one."""
        return self._shm is None or bool(self._state[self.n])

    def _timed_out(self) -> None:
        late = [r for r in range(self.n) if self._epochs[r] < self._epoch]
        self._state[self.n] = 1                              # tell the others, too
        self.close()
        who = f"rank(s) {late} never arrived" if late else "rank 0 never released it"
        raise TimeoutError(f"shared-memory allreduce: rank {self.rank} waited "
                           f"{self.timeout:g} s at barrier {self._epoch}; {who}. Did every "
                           "rank call it, with tensors of the same size?")

    # -- the allreduce
    def allreduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` in place over every rank through the segment; returns it."""
        if self._shm is None:
            raise RuntimeError("this ShmAllreduce is closed (after a timeout or close())")
        flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
        numel, n, r = flat.numel(), self.n, self.rank
        if n == 1:
            return tensor
        slots = [self.slot(k, numel, flat.dtype) for k in range(n)]
        bounds = chunk_bounds(numel, n)
        result = self.slot(n, numel, flat.dtype)
        a, b = bounds[r]
        for c, (lo, hi) in enumerate(bounds):                # 1. publish what others need
            if c != r:
                slots[r][lo:hi].copy_(flat[lo:hi])
        self.barrier()
        mine = result[a:b]                                   # 2. reduce my chunk
        torch.add(flat[a:b], slots[(r + 1) % n][a:b], out=mine)
        for k in range(2, n):
            mine.add_(slots[(r + k) % n][a:b])
        flat[a:b].copy_(mine)
        self.barrier()
        for c, (lo, hi) in enumerate(bounds):                # 3. fetch the others' sums
            if c != r:
                flat[lo:hi].copy_(result[lo:hi])
        if flat.data_ptr() != tensor.data_ptr():
            tensor.copy_(flat.view_as(tensor))
        return tensor

    def allreduce_buffer(self, numel: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Sum every rank's ``buffer(numel, dtype)`` in place, with no copy in or out."""
        if self._shm is None:
            raise RuntimeError("this ShmAllreduce is closed (after a timeout or close())")
        n, r = self.n, self.rank
        slots = [self.slot(k, numel, dtype) for k in range(n)]
        bounds = chunk_bounds(numel, n)
        a, b = bounds[r]
        self.barrier()                                       # every buffer is written
        for k in range(1, n):
            slots[r][a:b].add_(slots[(r + k) % n][a:b])
        self.barrier()
        for c, (lo, hi) in enumerate(bounds):
            if c != r:
                slots[r][lo:hi].copy_(slots[c][lo:hi])
        self.barrier()                                       # nobody reads mine any more
        return slots[r]

    def close(self) -> None:
        """Unmap the segment here (the memory is freed once every rank has closed it)."""
        self._state = self._epochs = self._data = None
        if self._shm is not None:
            try:
                self._shm.close()
            except BufferError:          # a tensor still views it; unmapped at exit
                pass
            self._shm = None


class _Cache:
    """This worker's segment. A class attribute, not a module global: dill sends the
    parent's module globals along with every task, which would reset a global cache."""

    comm: ShmAllreduce | None = None
    group: str = ""                  # the default group it was made in


def shm_allreduce(tensor: torch.Tensor, timeout: float = 30.0) -> torch.Tensor:
    """Sum ``tensor`` in place over every rank through shared memory (lesson 06).

    Collective, like ``dist.all_reduce``: every rank calls it with a tensor of the same
    size. The segment is made on the first call and kept (grown when a larger tensor
    comes); a timeout drops it, and the next call makes a fresh one.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"shm_allreduce sums a torch.Tensor in place, got "
                        f"{type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(f"the shared-memory allreduce sums CPU tensors (the memory the "
                         f"processes share); this one is on {tensor.device}. Use "
                         "dist.all_reduce for GPU tensors.")
    if not dist.is_initialized():
        raise RuntimeError("shm_allreduce needs torch.distributed: run it on a cluster's "
                           "workers (cluster.run(fn)) or under torchrun")
    nbytes = max(1, tensor.numel() * tensor.element_size())
    comm, group = _Cache.comm, dist.group.WORLD.group_name
    if comm is None or comm.broken or comm.capacity < nbytes or _Cache.group != group:
        close_shm()                  # a new default group: its ranks all make a new one
        comm = _Cache.comm = ShmAllreduce(nbytes, timeout)
        _Cache.group = group
    comm.timeout = timeout
    try:
        return comm.allreduce(tensor)
    except BaseException:
        close_shm()
        raise


def close_shm() -> None:
    """Release this rank's cached segment (``shm_allreduce`` makes a new one when needed)."""
    if _Cache.comm is not None:
        _Cache.comm.close()
        _Cache.comm = None


def memcpy_floor(nbytes: int = 64 << 20, repeats: int = 5) -> list[float]:
    """Worker function: seconds for every rank to copy ``nbytes`` once, all at once.

    An allreduce must at least read every rank's input and write every rank's output:
    the memory traffic of this copy. It is the one-machine limit (lesson 06).
    """
    src = torch.ones(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)                      # touch the pages
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return times


def time_shm_buffer(nbytes: int = 64 << 20, repeats: int = 5) -> list[float]:
    """Worker function: seconds per ``allreduce_buffer`` of ``nbytes`` float32 (lesson 06)."""
    n, rank = dist.get_world_size(), dist.get_rank()
    comm = ShmAllreduce(nbytes)
    try:
        numel = nbytes // 4
        times = []
        for i in range(repeats + 1):
            buf = comm.buffer(numel)
            buf.fill_(rank + 1)
            dist.barrier()
            t0 = time.perf_counter()
            out = comm.allreduce_buffer(numel)
            if i:
                times.append(time.perf_counter() - t0)
        want = n * (n + 1) / 2
        if float(out[0]) != want or float(out[-1]) != want:
            raise RuntimeError(f"allreduce_buffer gave {float(out[0])}, expected {want}")
        del buf, out
        return times
    finally:
        comm.close()


def compare_allreduce(cluster, nbytes: int, segments: int = 1,
                      repeats: int = 3) -> dict[str, float]:
    """Seconds (best of ``repeats``, each on its slowest rank) of every way to allreduce
    ``nbytes`` of float32 on ``cluster``, and the memory floor (lesson 06, benchmark)."""
    ring = f"hand ring, {segments} segment{'s' if segments > 1 else ''}"
    return {"dist.all_reduce (gloo)": best_of(cluster.run(time_allreduce, "dist.all_reduce",
                                                          nbytes, repeats)),
            ring: best_of(cluster.run(time_allreduce, "ring", nbytes, repeats,
                                      segments=segments)),
            "shared memory": best_of(cluster.run(time_allreduce, shm_allreduce, nbytes, repeats)),
            "shared buffer (no copies)": best_of(cluster.run(time_shm_buffer, nbytes, repeats)),
            "memcpy floor": best_of(cluster.run(memcpy_floor, nbytes, repeats))}
