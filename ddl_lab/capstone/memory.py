"""The most memory a capstone rank holds at once, measured while its plan runs (lesson 15).

The CPU has no allocator counter to read (``torch.cuda.max_memory_allocated`` is the GPU's),
so the meter reads it as lesson 10 §2 does — the profiler's memory events, every allocation
and free — but not for the whole run: 100 steps of plain DDP on 4 ranks took 2.1× their bare
time with the whole run profiled, 1.3× with these two windows (``benchmarks/capstone_bench.py
--part 2``, 2 cores). Two windows are profiled instead:

- **the start**: from the plan's first line to its third mini-batch: whatever it builds
  (a wrapper's buffers, an optimizer's state at its first step) and two whole steps;
- **a step drawn at random** later in the run (a seed the plan never sees), from one
  mini-batch to the next: a plan that holds more as it goes is caught there. The profiler
  runs from the step before it, because it sees a free only of memory allocated while it
  ran: what the measured step frees was allocated in the step before.

The peak of a window is what was live as it opened plus the most its events added at once.
At the start that is nothing (the meter builds the model inside the window); later, a census of
the tensors the rank holds (``census``: every tensor Python can reach, and the gradients of
every parameter) plus what the census could not see at the end of the first window (memory
only C++ holds, such as DDP's gradient buckets: live by the profiler, less the census then).
The meter's own tensors (the corpus, the batches it hands out) are not charged.

What it cannot see: memory allocated outside torch's CPU allocator (numpy arrays, Python
objects), memory only C++ holds that appears after the first window, and a plan that asks
torch whether the profiler runs and holds less while it does (Python keeps no secret from
code in the same process).
"""
from __future__ import annotations

import gc
from typing import Any, Iterable

import torch
from torch import nn

__all__ = ["census", "PeakMeter"]

_MARK = "ddl_lab.capstone: the measured step"


def _storage(t: torch.Tensor) -> tuple[int, int] | None:
    """(address, bytes) of the memory ``t`` lives in (a DTensor's local shard), or None."""
    try:
        local = t.to_local() if hasattr(t, "to_local") else t
        s = local.untyped_storage()
        return (s.data_ptr(), s.nbytes()) if s.data_ptr() and not local.is_meta else None
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def _reachable() -> Iterable[torch.Tensor]:
    """Every tensor Python can reach in this process, and every parameter's gradient."""
    for obj in gc.get_objects():
        kind = type(obj)                    # not isinstance: a module's deprecated aliases
        if issubclass(kind, torch.Tensor):  # warn when their __class__ is read
            yield obj
            if issubclass(kind, nn.Parameter) and obj.grad is not None:
                yield obj.grad


def census(skip: set[int] = frozenset()) -> tuple[int, set[int]]:
    """(bytes of the distinct storages reachable now, their addresses), leaving out the
    storages at the addresses in ``skip``."""
    sizes: dict[int, int] = {}
    for t in _reachable():
        where = _storage(t)
        if where is not None and where[0] not in skip:
            sizes[where[0]] = where[1]
    return sum(sizes.values()), set(sizes)


class PeakMeter:
    """One rank's peak memory during a plan (see the module's docstring). ``opened()`` before
    the model is built; ``at_step(i)`` as mini-batch i (0, 1, …) is handed out; ``closed()`` as the
    plan returns; ``peak`` then holds the most bytes held at once, ``start``/``later`` each
    window's."""

    def __init__(self, meter_own: Iterable[torch.Tensor], later_step: int):
        own = {w[0] for t in meter_own if (w := _storage(t)) is not None}
        self._skip = own | census()[1]      # what the process held before: not the plan's
        self.later_step = later_step
        self.start = self.later = 0
        self._hidden = 0
        self._prof: Any = None
        self._open_at = 0
        self._which = ""

    @property
    def peak(self) -> int:
        return max(self.start, self.later)

    def _open(self, which: str, live: int) -> None:
        from torch.profiler import ProfilerActivity, profile
        self._which, self._open_at = which, live
        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._prof.start()

    def _close(self) -> None:
        """Stop the open window and read its peak (the start's: what was live at its end too)."""
        prof, self._prof = self._prof, None
        prof.stop()
        events = sorted((e for e in prof.profiler.kineto_results.events()
                         if e.name() in ("[memory]", _MARK)), key=lambda e: e.start_ns())
        if self._which == "start":
            live = top = 0
            for e in events:
                live += e.nbytes() if e.name() != _MARK else 0
                top = max(top, live)
            self.start = top
            gc.collect()
            self._hidden = max(0, live - census(self._skip)[0])
            return
        marked = [i for i, e in enumerate(events) if e.name() == _MARK]
        live = top = self._open_at                  # the census as the marked step began
        for e in events[marked[0] + 1 if marked else len(events):]:
            if e.name() != _MARK:
                live += e.nbytes()
                top = max(top, live)
        self.later = top

    def opened(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        from ddl_lab.ml.profiling import quiet_stderr
        with quiet_stderr():
            early = torch.empty(256)        # freed in a window, as the plan's first free of a
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
                del early                   # tensor made before it will be: torch warns once
            gc.collect()
            self._open("start", 0)

    def at_step(self, i: int) -> None:
        from ddl_lab.ml.profiling import quiet_stderr
        with quiet_stderr():
            if self._prof is not None and (i == 2 or i == self.later_step + 2):
                self._close()
            if i == self.later_step and self._prof is None and i > 2:
                self._open("later", 0)
            if i == self.later_step + 1 and self._prof is not None:
                gc.collect()
                self._open_at = census(self._skip)[0] + self._hidden
                with torch.profiler.record_function(_MARK):
                    pass

    def closed(self) -> None:
        if self._prof is not None:
            from ddl_lab.ml.profiling import quiet_stderr
            with quiet_stderr():
                self._close()
