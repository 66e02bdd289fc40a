"""A slow link between two hosts, for real (lesson 06 §8, run on lesson 11's hosts).

The two network-namespace hosts of this lesson (``scaling_out.hosts.VirtualHosts``, a veth pair)
get a bandwidth limit on each end of the veth: ``tc qdisc … tbf`` (a token bucket: bytes
leave at ``rate`` at most). These kernels have no ``netem``, so the link gets no extra
delay: its α in the model is an assumption, labelled so. On 2 hosts × 2 ranks the flat ring
(4 ranks in one ring, two of its four links cross between the hosts) races the two-level
allreduce (only one shard per rank crosses), and ``model`` predicts both.
Needs root (``hosts.unavailable()`` says why not).
"""
from __future__ import annotations

import os
import subprocess
from typing import Any

import torch.distributed as dist

from ddl_lab.ring_allreduce.engine import best_of, time_allreduce
from ddl_lab.runtime.costs import ring_time
from .hosts import VirtualHosts, run_with_env

__all__ = ["tbf_commands", "flat_vs_two_level", "model", "run_shaped"]

ALGORITHMS = ("ring", "two_level")


def tbf_commands(vhosts: VirtualHosts, rate_mbit: float) -> list[list[str]]:
    """The ``tc`` commands that limit each end of the veth to ``rate_mbit`` Mbit/s."""
    return [h.prefix + ["tc", "qdisc", "add", "dev", h.veth, "root", "tbf", "rate",
                        f"{rate_mbit}mbit", "burst", "32kb", "latency", "400ms"]
            for h in vhosts.hosts]


def flat_vs_two_level() -> dict[str, Any]:
    """Worker (ranks of a host consecutive): seconds of the flat ring and of the two-level
    allreduce (hosts of LOCAL_WORLD_SIZE ranks) of DDL_LAB_NBYTES bytes, DDL_LAB_REPEATS
    runs each (``run_shaped`` sets them)."""
    per_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    nbytes = int(os.environ.get("DDL_LAB_NBYTES", str(1 << 20)))
    repeats = int(os.environ.get("DDL_LAB_REPEATS", "1"))
    out: dict[str, Any] = {"host": os.environ.get("DDL_LAB_HOST"), "rank": dist.get_rank()}
    out["ring"] = time_allreduce("ring", nbytes, repeats)
    out["two_level"] = time_allreduce("two_level", nbytes, repeats, per_host=per_host)
    return out


def model(nbytes: float, hosts: int, per_host: int, alpha: float, beta: float,
          alpha_link: float, beta_link: float) -> dict[str, float]:
    """Predicted seconds over one link per host of (α', β'), loopback (α, β) inside hosts.

    Flat ring of n = H·g ranks: each of its 2(n−1) steps waits for a chunk S/n on a link
    between hosts: 2(n−1)·(α' + S/n·β'). Two-level: 2(g−1)·(α + S/g·β) inside the hosts,
    then 2(H−1) steps between them in which the g owners of a host send S/(gH) each over
    the one shared link: 2(H−1)·(α' + S/H·β')."""
    n, S = hosts * per_host, float(nbytes)
    inside = ring_time(per_host, S, alpha, beta)
    between = ring_time(hosts, S, alpha_link, beta_link)     # g owners × S/(gH) a step
    return {"ring": ring_time(n, S, alpha_link, beta_link), "two_level": inside + between}


def run_shaped(nbytes: int = 1 << 20, rate_mbit: float = 200.0, alpha_link: float = 1e-4,
               alpha: float = 2e-5, beta: float = 1e-10, repeats: int = 1,
               timeout: float = 120.0) -> dict[str, Any]:
    """2 hosts × 2 ranks over a veth shaped to ``rate_mbit``: measured and modelled seconds
    of the flat ring and the two-level allreduce of ``nbytes``. ``alpha_link`` is assumed
    (no netem here), (α, β) inside a host come from the caller (lesson 06 §4 measures them)."""
    with VirtualHosts() as vh:
        for cmd in tbf_commands(vh, rate_mbit):
            subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=10)
        envs = [[{"MASTER_ADDR": vh.a.addr, "MASTER_PORT": 29500, "WORLD_SIZE": 4,
                  "RANK": 2 * h + local, "LOCAL_RANK": local, "DDL_LAB_HOST": "ab"[h],
                  "DDL_LAB_NBYTES": nbytes, "DDL_LAB_REPEATS": repeats} for local in (0, 1)]
                for h in (0, 1)]        # no torchrun: the env:// variables are enough
        jobs = run_with_env(envs, vh, "ddl_lab.scaling_out.shaped_link:flat_vs_two_level",
                            timeout=timeout)
    ranks = next((j.results() for j in jobs if j.results()), {})
    if sorted(ranks) != [0, 1, 2, 3]:
        raise RuntimeError("the shaped-link run failed:\n" + "\n".join(j.tail() for j in jobs))
    measured = {a: best_of([ranks[r][a] for r in sorted(ranks)]) for a in ALGORITHMS}
    predicted = model(nbytes, 2, 2, alpha, beta, alpha_link, 8 / (rate_mbit * 1e6))
    return {"measured": measured, "model": predicted, "nbytes": nbytes,
            "rate_mbit": rate_mbit, "alpha_link": alpha_link,
            "hosts": {r: ranks[r]["host"] for r in sorted(ranks)}}
