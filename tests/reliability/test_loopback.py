"""Loopback only, authenticated: while a message-passing mesh and a parameter
server are up, every socket their processes listen on is a loopback one; a stranger who
connects without the key is refused and the run goes on; the file store and the shared-
memory segments are private to the user."""
import socket
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from ddl_lab import Cluster
from ddl_lab.parameter_server.server import ParameterServer
from ddl_lab.ring_allreduce.shm import shm_allreduce

from .system import descendants, is_loopback, listening, shm_files_open, wait_until


@pytest.fixture(scope="module")
def cluster2():
    with Cluster(2, timeout=120) as c:
        yield c


def refused(sock, within=20.0):
    """Did the other end close ``sock`` within ``within`` seconds (whatever it sent first)?"""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        return False
    return True


def strangers(address):
    """Two clients without the key: one sends garbage, one says nothing at all."""
    loud = socket.create_connection(address, timeout=10)
    loud.sendall(b"\x00\x00\x00\x14" + b"not the right answer")
    quiet = socket.create_connection(address, timeout=10)
    return loud, quiet


def held_mesh(flag):
    """Worker: lesson 04's connect(), with rank 1 held back until ``flag`` exists (so rank 0
    listens for it meanwhile), then an allreduce over the mesh."""
    import os
    import socket
    import time
    from ddl_lab.message_passing.comm import connect
    real = socket.create_connection

    def held(*args, **kwargs):
        deadline = time.monotonic() + 90
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.02)
        return real(*args, **kwargs)
    if dist.get_rank() == 1:
        socket.create_connection = held
    try:
        comm = connect(timeout=90)
    finally:
        socket.create_connection = real
    try:
        return comm.allreduce(dist.get_rank() + 1)
    finally:
        comm.close()


def test_the_message_passing_mesh_listens_on_loopback_and_refuses_strangers(cluster2,
                                                                            tmp_path):
    pids = cluster2.pids
    before = {(pid, port) for pid, _, port in listening(pids)}
    flag, out = tmp_path / "go", {}
    run = threading.Thread(target=lambda: out.update(
        result=cluster2.run_with(held_mesh, (str(flag),), timeout=180)))
    run.start()
    try:
        assert wait_until(lambda: any((p, port) not in before and p == pids[0]
                                      for p, _, port in listening(pids)), 120)
        sockets = listening(pids)
        assert sockets and all(is_loopback(ip) for _, ip, _ in sockets), sockets
        port, = {port for p, _, port in sockets if (p, port) not in before and p == pids[0]}
        loud, quiet = strangers(("127.0.0.1", port))
        assert refused(loud) and refused(quiet)
    finally:
        flag.touch()
        run.join(180)
    assert out.get("result") == [3, 3], "the mesh did not come up after the strangers"


def test_a_shard_listens_on_loopback_and_refuses_strangers_while_it_serves():
    with ParameterServer(np.zeros(8), shards=2, timeout=20) as ps:
        ports = {port for _, port in ps.addresses}
        shards = {pid for pid, _, port in listening(descendants()) if port in ports}
        sockets = listening(shards)
        assert len(shards) == 2 and all(is_loopback(ip) for _, ip, _ in sockets), sockets
        client = ps.connect("replica")
        client.join()
        loud, quiet = strangers(ps.addresses[0])
        assert quiet.recv(1), "the shard never challenged the stranger"   # it is in the handshake
        got = client.pull()                              # served all the same
        client.push(np.ones(8), got.versions)
        assert client.pull().versions == (1, 1)
        assert refused(loud) and refused(quiet)
        assert client.snapshot()[1] == (1, 1)


def shm_allreduce_twice():
    t = torch.ones(1000)
    shm_allreduce(t)
    return shm_allreduce(t)[0].item()


def test_the_store_and_the_shared_memory_are_private_to_the_user(cluster2):
    store = Path(cluster2._tmpdir)
    assert stat.S_IMODE(store.stat().st_mode) & 0o077 == 0, oct(store.stat().st_mode)
    assert cluster2.run(shm_allreduce_twice) == [4.0, 4.0]
    held = [f for pid in cluster2.pids for f in shm_files_open(pid)]
    assert held, "the shared-memory allreduce holds no segment"
    assert all(mode & 0o077 == 0 for _, mode in held), held
