"""The notebook-safe worker runtime (lesson 00; every later lesson runs on it).

``Cluster`` starts ``world_size`` real worker processes (``multiprocess``, forkserver) with
the default ``torch.distributed`` process group initialised, and runs a function on
every rank::

    with Cluster(world_size=4) as cluster:
        results = cluster.run(fn, *args, **kwargs)   # rank order

The function may be written in a notebook cell: it is pickled with dill
(``recurse=True``), so the cell's imports and helpers travel with it; tensors in
shared memory arrive as the same memory. Modules: ``cluster`` (the parent side),
``worker`` (inside a worker), ``pickling``, ``stacks`` (where a rank is), ``errors``,
``reload`` (edited user modules), ``progress``, ``backends``, ``launch``, ``worlds``
(code on n-rank worlds carved out of one warm cluster, as the checks run it).
"""
from .backends import available_backends, device, group_backend
from .cluster import CLUSTER_TIMEOUT, Cluster
from .errors import RunInterrupted, WorkerError, WorkerTimeout
from .launch import launch, launch_with, rank_size, shared_cluster
from .pickling import dumps
from .progress import on_progress, progress

__all__ = ["Cluster", "WorkerError", "WorkerTimeout", "RunInterrupted", "launch",
           "launch_with", "rank_size", "shared_cluster", "available_backends",
           "group_backend", "device", "progress", "on_progress", "dumps", "CLUSTER_TIMEOUT"]
