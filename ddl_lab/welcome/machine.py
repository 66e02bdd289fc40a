"""What the machine offers (lesson 00): cores, memory, torch threads, backends, GPUs."""
from __future__ import annotations

import os
import platform


def machine_info() -> dict[str, object]:
    """A dictionary describing this machine, for lesson 00's first cell."""
    import torch
    from ddl_lab.runtime import available_backends
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(),
        "cpu cores": os.cpu_count(),
        "memory (GiB)": round(mem, 1),
        "torch": torch.__version__,
        "torch intra-op threads": torch.get_num_threads(),
        "backends": [b for b, ok in available_backends().items() if ok],
        "GPUs": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if cuda else [],
    }
