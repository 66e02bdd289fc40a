"""What lessons 10 and 13 share around ``torch.profiler`` on a CPU."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

__all__ = ["quiet_stderr"]


@contextmanager
def quiet_stderr() -> Iterator[None]:
    """File descriptor 2 to /dev/null while the block runs: the profiler's C++ side logs
    every start and stop there (``USDT: … profiler_start``), which a notebook shows under
    the cell, once per rank (lesson 10 §2's memory events, lesson 13 §3's traces). Python's
    own exceptions still reach the caller: they travel as exceptions, not on fd 2."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
