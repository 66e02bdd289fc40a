"""What the reliability tests read about processes: children, open files,
threads, shared-memory segments, temporary files, resident memory, listening sockets.

Linux only (``/proc``); the tests that use it are skipped elsewhere.
"""
from __future__ import annotations

import ipaddress
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import psutil

SHM = Path("/dev/shm")
_LISTEN = "0A"


def alive(pid: int) -> bool:
    """Is ``pid`` a running process (not a zombie)?"""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(condition: Callable[[], bool], within: float, step: float = 0.05) -> bool:
    """Poll ``condition`` until it holds (True) or ``within`` seconds pass (False)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


def gone(pids: Iterable[int], within: float = 5.0) -> bool:
    """Have all ``pids`` exited within ``within`` seconds?"""
    pids = list(pids)
    return wait_until(lambda: not any(alive(p) for p in pids), within)


def survivors(pids: Iterable[int]) -> list[str]:
    """What is still running of ``pids``: 'pid name status' each."""
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            out.append(f"{pid} {' '.join(proc.cmdline())[-80:]} {proc.status()}")
        except psutil.Error:
            pass
    return out


def descendants(pid: int | None = None) -> set[int]:
    """Every live process below ``pid`` (default: this one)."""
    try:
        procs = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return set()
    return {p.pid for p in procs if alive(p.pid)}


# Chromium's own segments (the browser and site tests' Chromium, beside these tests in one
# run), which it may leave behind as it exits: not the runtime's to remove
NOT_OURS = ("org.chromium.",)


def shm_segments() -> dict[str, float]:
    """/dev/shm entries (POSIX shared memory and semaphores) -> their change time; never
    NOT_OURS."""
    out = {}
    for p in SHM.iterdir() if SHM.is_dir() else ():
        if p.name.startswith(NOT_OURS):
            continue
        try:
            out[p.name] = p.stat().st_ctime
        except FileNotFoundError:                # removed while we looked
            pass
    return out


def shm_in_use(pids: Iterable[int] | None = None) -> set[str]:
    """Names of the /dev/shm entries some process (of ``pids``; default: any) holds open
    or mapped."""
    used = set()
    prefix = str(SHM) + "/"
    procs = (Path(f"/proc/{p}") for p in pids) if pids is not None else Path("/proc").iterdir()
    for proc in procs:
        if not proc.name.isdigit():
            continue
        try:
            used.update(line.split(prefix, 1)[1].split(" (deleted)")[0].strip()
                        for line in (proc / "maps").read_text().splitlines() if prefix in line)
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith(prefix):
                    used.add(link[len(prefix):].split(" (deleted)")[0])
        except OSError:                          # it exited while we looked
            continue
    return used


def leaked_shm_segments(before: dict[str, float], since: float) -> set[str]:
    """Segments made since ``since``, still there a moment later, that no process holds:
    leaked. (Other users' live segments are held by their processes; short-lived ones
    come and go.)"""
    def fresh() -> set[str]:
        return {n for n, t in shm_segments().items() if n not in before and t >= since - 1}
    first = fresh()
    time.sleep(0.5)
    return (first & fresh()) - shm_in_use()


def files_under(root: Path) -> set[str]:
    """Every file and folder below ``root``, relative to it."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@dataclass(frozen=True)
class Usage:
    """One process's holdings at one moment."""
    fds: int
    threads: int
    children: int
    rss: int

    def __str__(self) -> str:
        return (f"{self.fds} fds, {self.threads} threads, {self.children} children, "
                f"RSS {self.rss / 2**20:.0f} MB")


def usage(pid: int | None = None) -> Usage:
    p = psutil.Process(pid)
    return Usage(p.num_fds(), p.num_threads(), len(descendants(p.pid)), p.memory_info().rss)


def _hex_ip(text: str) -> str:
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return str(ipaddress.IPv6Address(words))


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        fds = list(fd_dir.iterdir())
    except (FileNotFoundError, PermissionError):
        return inodes
    for fd in fds:
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def listening(pids: Iterable[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket the processes listen on (IPv4 and 6)."""
    owner = {inode: pid for pid in pids for inode in _socket_inodes(pid)}
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == _LISTEN and cols[9] in owner:
                ip, port = cols[1].split(":")
                found.append((owner[cols[9]], _hex_ip(ip), int(port, 16)))
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None
                              and ip.ipv4_mapped.is_loopback)


def shm_files_open(pid: int) -> list[tuple[str, int]]:
    """(path, mode) of every /dev/shm file the process holds open (unlinked ones too)."""
    out = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
            if link.startswith(str(SHM) + "/"):
                out.append((link, os.stat(fd).st_mode & 0o777))
        except OSError:
            continue
    return out
