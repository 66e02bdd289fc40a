"""Two hosts on one machine: network namespaces joined by a veth pair (lesson 11).

A network namespace has its own interfaces, addresses and ports: to a process inside it,
it *is* a separate machine's network. ``VirtualHosts`` makes two of them, joined by a
virtual Ethernet cable (a veth pair, one end in each), gives each end an address of a
private /30 (10.200.0.1 and 10.200.0.2) and brings it up with ``lo``. Nothing else is
connected: no route leaves the pair, so traffic goes only between the two namespaces.
It needs root (or CAP_NET_ADMIN); ``unavailable()`` says why not, and ``setup_commands``
prints what it would run. Namespaces are named ``ddl-<pid>-<n>-a/b`` and are always
deleted: on ``with`` exit, at interpreter exit, and (for a process that died) the next
time one is made.

``torchrun`` starts ``torchrun --nnodes=2 … -m ddl_lab.torchrun module:fn`` in each
namespace with the four settings two hosts need: ``lo`` up, ``is_host`` on the store's
host, ``--local-addr`` and ``GLOO_SOCKET_IFNAME`` set to the host's own veth end.
"""
from __future__ import annotations

import atexit
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ..runtime.patience import patience
from .launch import Job, run_jobs, torchrun_command

__all__ = ["Host", "VirtualHosts", "LoopbackHosts", "two_hosts", "Layout", "unavailable",
           "setup_commands", "teardown_commands", "run_with_env", "free_port", "where_am_i",
           "ENV_VARS", "FORCE_LOOPBACK"]

FORCE_LOOPBACK = "DDL_LAB_LOOPBACK_HOSTS"      # =1: take the no-root path even as root
ENV_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
            "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RESTART_COUNT")
_PREFIX = "ddl-"
_COUNTER = itertools.count()
_LIVE: set[str] = set()            # namespaces this process made and has not deleted yet
_CMD_TIMEOUT = 10.0                # seconds for one `ip` command


@dataclass(frozen=True)
class Host:
    """One virtual host: its namespace, its end of the veth pair, its address."""

    name: str
    veth: str
    addr: str
    label: str          # 'a' or 'b': DDL_LAB_HOST in the host's torchrun environment

    @property
    def prefix(self) -> list[str]:
        """Put this before a command to run it on this host."""
        return ["ip", "netns", "exec", self.name]


def unavailable() -> str | None:
    """Why two virtual hosts cannot be made here, or None if they can."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are a Linux feature (this is {sys.platform})"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "making network namespaces needs root (or CAP_NET_ADMIN); this runs as a user"
    return None


def _hosts(pid: int, n: int, subnet: str) -> tuple[Host, Host]:
    return tuple(Host(f"{_PREFIX}{pid}-{n}-{x}", f"dv{pid}-{n}{x}", f"{subnet}.{i}", x)
                 for i, x in ((1, "a"), (2, "b")))


def setup_commands(a: Host, b: Host) -> list[list[str]]:
    """The `ip` commands that make the two hosts: the veth pair is created with its ends
    already inside the namespaces, so it never appears on the machine's own network."""
    cmds = [["ip", "netns", "add", a.name], ["ip", "netns", "add", b.name],
            ["ip", "link", "add", a.veth, "netns", a.name, "type", "veth",
             "peer", "name", b.veth, "netns", b.name]]
    for h in (a, b):
        cmds += [["ip", "-n", h.name, "addr", "add", f"{h.addr}/30", "dev", h.veth],
                 ["ip", "-n", h.name, "link", "set", h.veth, "up"],
                 ["ip", "-n", h.name, "link", "set", "lo", "up"]]
    return cmds


def teardown_commands(a: Host, b: Host) -> list[list[str]]:
    """Deleting a namespace deletes the veth end inside it (and so the pair)."""
    return [["ip", "netns", "del", a.name], ["ip", "netns", "del", b.name]]


def _ip(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=_CMD_TIMEOUT)
    if check and out.returncode:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {out.stderr.strip()}")
    return out


def _kill_inside(name: str) -> None:
    """SIGKILL every process still running in our namespace ``name`` (by pid)."""
    out = _ip(["ip", "netns", "pids", name], check=False)
    for pid in out.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def _delete(name: str) -> None:
    _kill_inside(name)
    _ip(["ip", "netns", "del", name], check=False)
    _LIVE.discard(name)


@atexit.register
def _delete_all() -> None:
    for name in list(_LIVE):
        _delete(name)


def _delete_orphans() -> None:
    """Namespaces that a dead process of ours left behind (``ddl-<pid>-…``, pid gone)."""
    out = _ip(["ip", "netns", "list"], check=False)
    for line in out.stdout.splitlines():
        m = re.match(rf"({_PREFIX}(\d+)-\d+-[ab])\b", line)
        if m and not os.path.exists(f"/proc/{m.group(2)}"):
            _delete(m.group(1))


class _LoopbackHost(Host):
    @property
    def prefix(self) -> list[str]:
        return []                          # no namespace: the machine's own network


class VirtualHosts:
    """Two network namespaces joined by a veth pair (lesson 11)::

        with VirtualHosts() as vh:
            jobs = vh.torchrun("ddl_lab.scaling_out.hosts:where_am_i")
    """

    def __init__(self, subnet: str = "10.200.0"):
        self.a, self.b = _hosts(os.getpid(), next(_COUNTER), subnet)

    @property
    def hosts(self) -> tuple[Host, Host]:
        return self.a, self.b

    def __enter__(self) -> "VirtualHosts":
        why = unavailable()
        if why:
            raise PermissionError(f"cannot make virtual hosts: {why}. The commands it would "
                                  "run are in setup_commands().")
        _delete_orphans()
        try:
            for cmd in setup_commands(self.a, self.b):
                if cmd[:3] == ["ip", "netns", "add"]:
                    _LIVE.add(cmd[3])
                _ip(cmd)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop what runs inside, delete both namespaces (and so the veth pair)."""
        for h in self.hosts:
            _delete(h.name)

    def exists(self) -> bool:
        names = _ip(["ip", "netns", "list"], check=False).stdout.split()
        return any(h.name in names for h in self.hosts)

    def veth_bytes(self) -> dict[str, dict[str, int]]:
        """Bytes each host's veth end has received and sent so far."""
        out = {}
        for h in self.hosts:
            info = json.loads(_ip(["ip", "-n", h.name, "-j", "-s", "link", "show", "dev",
                                   h.veth]).stdout)[0]
            stats = info.get("stats64") or info["stats"]
            out[h.name] = {"rx": int(stats["rx"]["bytes"]), "tx": int(stats["tx"]["bytes"])}
        return out

    def commands(self, target: str, *args: Any, nproc: int = 2, port: int = 29400,
                 max_restarts: int = 0, nnodes: int | str = 2,
                 rdzv_conf: dict[str, Any] | None = None) -> list[list[str]]:
        """The torchrun command each host runs: host A hosts the rendezvous store."""
        return [torchrun_command(target, *args, nnodes=nnodes, nproc=nproc,
                                 endpoint=f"{self.a.addr}:{port}", run_id=self.a.name,
                                 is_host=h is self.a, local_addr=h.addr,
                                 max_restarts=max_restarts, rdzv_conf=rdzv_conf)
                for h in self.hosts]

    def torchrun(self, target: str, *args: Any, nproc: int = 2, timeout: float = 60.0,
                 **options: Any) -> list[Job]:
        """Run ``target`` under torchrun on both hosts at once; one Job per host."""
        return run_jobs(self.commands(target, *args, nproc=nproc, **options), timeout,
                        prefixes=[h.prefix for h in self.hosts],
                        envs=[{"GLOO_SOCKET_IFNAME": h.veth, "DDL_LAB_HOST": h.label}
                              for h in self.hosts])


class LoopbackHosts(VirtualHosts):
    """Two "hosts" without root (lesson 11): two torchrun agents, ``--nnodes=2``, on distinct
    loopback addresses (127.0.0.2 with the rendezvous store, 127.0.0.3; both 127.0.0.1 off
    Linux, whose loopback has only that address). What it shows: two agents meeting at a
    rendezvous, node ranks, every env:// variable. What it cannot: bytes on a cable (none is
    counted: ``veth_bytes`` is None) or a shaped link — every byte goes through ``lo``."""

    def __init__(self) -> None:
        linux = sys.platform.startswith("linux")
        lo = "lo" if linux else "lo0"
        self.a, self.b = (_LoopbackHost(f"loopback-{x}", lo, addr if linux else "127.0.0.1", x)
                          for x, addr in (("a", "127.0.0.2"), ("b", "127.0.0.3")))

    def __enter__(self) -> "LoopbackHosts":
        return self

    def close(self) -> None:
        """Nothing to delete: the agents stop with their jobs."""

    def exists(self) -> bool:
        return False

    def veth_bytes(self) -> None:           # type: ignore[override]
        return None


def two_hosts() -> VirtualHosts:
    """Namespaces joined by a veth pair where they can be made (root on Linux), else — or
    with ``DDL_LAB_LOOPBACK_HOSTS=1`` — ``LoopbackHosts``: the same ``torchrun`` calls."""
    if unavailable() is None and os.environ.get(FORCE_LOOPBACK, "") in ("", "0"):
        return VirtualHosts()
    return LoopbackHosts()


@dataclass(frozen=True)
class Layout:
    """A cluster to launch: the hosts' addresses (the store, and rank 0, on ``hosts[0]``),
    ``nproc`` processes on each, the store's ``port``."""

    hosts: tuple[str, ...]
    nproc: int
    port: int


def free_port() -> int:
    """A TCP port free on this machine's loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_with_env(envs: list[list[dict[str, Any]]], vhosts: VirtualHosts | None = None,
                 target: str = "ddl_lab.scaling_out.hosts:where_am_i",
                 timeout: float = 30.0) -> list[Job]:
    """Start one ``python -m ddl_lab.torchrun target`` per env dict — ``envs[h]`` on host h
    (a namespace of ``vhosts``, or this machine's loopback) — with no torchrun at all: the
    env:// variables are everything a process needs to join. One Job per process."""
    cmds, prefixes, full = [], [], []
    for h, host_envs in enumerate(envs):
        host = vhosts.hosts[h] if vhosts is not None else None
        for env in host_envs:
            cmds.append([sys.executable, "-m", "ddl_lab.torchrun", target])
            prefixes.append(host.prefix if host else [])
            full.append({**{k: str(v) for k, v in env.items()},
                         "LOCAL_WORLD_SIZE": str(len(host_envs)),
                         "GLOO_SOCKET_IFNAME": host.veth if host else
                         ("lo0" if sys.platform == "darwin" else "lo"),
                         "DDL_LAB_TIMEOUT": str(int(timeout * patience()))})
    return run_jobs(cmds, timeout + 15, prefixes=prefixes, envs=full)


# ------------------------------------------------------------------ worker side

def _own_address() -> str | None:
    """The address this process talks to MASTER_ADDR from (a UDP connect sends nothing)."""
    master = os.environ.get("MASTER_ADDR")
    if not master:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((master, 9))
            return s.getsockname()[0]
        except OSError:
            return None


def where_am_i(nbytes: int = 0, repeats: int = 3) -> dict[str, Any]:
    """Worker: what this rank sees — its rank, the env:// variables, its network namespace
    and address — an allreduce of the ranks, and (``nbytes`` > 0) the seconds of each of
    ``repeats`` allreduces of ``nbytes`` bytes (lesson 11; the same under Cluster and
    torchrun)."""
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    out: dict[str, Any] = {
        "rank": dist.get_rank(), "world_size": dist.get_world_size(),
        "netns": os.readlink("/proc/self/ns/net") if os.path.exists("/proc/self/ns/net")
        else None,
        "addr": _own_address(), "env": {k: os.environ.get(k) for k in ENV_VARS},
        "sum_of_ranks": t.item()}
    if nbytes:
        from ddl_lab.ring_allreduce.engine import time_allreduce
        out["allreduce_s"] = [float(s) for s in time_allreduce("dist.all_reduce", nbytes,
                                                               repeats)]
    return out
