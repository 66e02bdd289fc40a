"""The communicator of lesson 04: point to point, collectives, the wire, bad input."""
import socket
import threading

import matplotlib
import numpy as np
import pytest
import torch

from ddl_lab.message_passing.comm import ANY_SOURCE, CommError, comm_run, comm_trace, connect
from ddl_lab.message_passing.plots import figure_collectives, plot_side_by_side
from ddl_lab.message_passing.side_by_side import collectives_side_by_side
from ddl_lab.message_passing.wire import decode, encode, handshake

matplotlib.use("Agg")


def _base(a):
    """The object that owns an array's memory."""
    while True:
        if isinstance(a, memoryview):
            a = a.obj
        elif getattr(a, "base", None) is not None:
            a = a.base
        else:
            return a


def p2p(comm):
    if comm.rank == 0:
        comm.send("second", dest=1, tag=2)
        comm.send("first", dest=1, tag=1)
        comm.send(np.arange(10.0), dest=1, tag=3)
        comm.send(torch.arange(4.0), dest=1, tag=4)
        comm.send(lambda x: x + 1, dest=1, tag=5)           # dill carries it by value
        comm.send("to myself", dest=0, tag=6)
        return comm.recv(source=0, tag=6)
    if comm.rank == 1:
        first, second = comm.recv(source=0, tag=1), comm.recv(source=0, tag=2)
        arr, ten, fn = comm.recv(0, 3), comm.recv(0, 4), comm.recv(0, 5)
        return first, second, arr, type(_base(arr)).__name__, ten, fn(1)
    return None


def test_point_to_point_matches_tags_and_keeps_arrays_uncopied():
    out = comm_run(p2p, 3)
    first, second, arr, arr_base, ten, two = out[1]
    assert (first, second, two) == ("first", "second", 2)
    np.testing.assert_array_equal(arr, np.arange(10.0))
    torch.testing.assert_close(ten, torch.arange(4.0))
    # received into the buffer the array lives in: the array's memory is the socket's buffer
    assert arr_base == "bytearray"
    assert out[0] == "to myself"


@pytest.mark.parametrize("make", [lambda: np.arange(1000.0),
                                  lambda: torch.arange(1000.0, dtype=torch.float64)])
def test_arrays_and_tensors_cross_the_wire_without_copies(make):
    x = make()
    codec, parts = encode({"payload": x})
    address = x.data_ptr() if isinstance(x, torch.Tensor) else x.ctypes.data
    sent = [p for p in parts[1:] if p.nbytes == 8000]
    assert len(sent) == 1 and _address(sent[0]) == address        # sent from x's memory
    received = [bytearray(p) for p in parts]                      # what recv_into fills
    y = decode(codec, received)["payload"]
    assert type(y) is type(x) and (y == x).all()
    y_address = y.data_ptr() if isinstance(y, torch.Tensor) else y.ctypes.data
    assert y_address == _address(memoryview(received[1]))         # lives in that buffer


def _address(view):
    return np.frombuffer(view, dtype=np.uint8).ctypes.data


def any_source(comm):
    if comm.rank == 0:
        got = sorted(comm.recv(source=ANY_SOURCE, tag=5) for _ in range(comm.size - 1))
        return got
    comm.send(comm.rank * 10, dest=0, tag=5)


def test_any_source_receives_from_everyone():
    assert comm_run(any_source, 3)[0] == [10, 20]


def collectives(comm):
    r, n = comm.rank, comm.size
    out = {
        "bcast": comm.bcast({"root": "data"} if r == 1 else None, root=1),
        "scatter": comm.scatter([f"chunk {i}" for i in range(n)] if r == 2 else None, root=2),
        "gather": comm.gather(r * r, root=0),
        "reduce": comm.reduce(np.full(3, float(r)), root=1),
        "max": comm.allreduce(r, op=max),
        "allreduce": comm.allreduce(np.array([r, 1.0])),
        "alltoall": comm.alltoall([(r, j) for j in range(n)]),
    }
    comm.barrier()
    return out


def test_collectives_give_what_mpi_gives():
    out = comm_run(collectives, 3)
    for r, o in enumerate(out):
        assert o["bcast"] == {"root": "data"}
        assert o["scatter"] == f"chunk {r}"
        assert o["gather"] == ([0, 1, 4] if r == 0 else None)
        if r == 1:
            np.testing.assert_array_equal(o["reduce"], [3.0, 3.0, 3.0])
        else:
            assert o["reduce"] is None
        assert o["max"] == 2
        np.testing.assert_array_equal(o["allreduce"], [3.0, 3.0])
        assert o["alltoall"] == [(j, r) for j in range(3)]


def both_send_first(comm, n):
    if comm.rank > 1:
        return None
    other = 1 - comm.rank
    comm.send(np.full(n, comm.rank, dtype=np.float64), dest=other)
    return float(comm.recv(source=other).sum())


def test_two_ranks_sending_large_messages_first_do_not_deadlock():
    n = 4_000_000                                     # 32 MB each way, far above socket buffers
    assert comm_run(both_send_first, 3, n) == [float(n), 0.0, None]


def collective_trace(comm, nbytes):
    x = np.zeros(nbytes // 8)
    comm.bcast(x)
    comm.gather(x)
    comm.allreduce(x)


def test_trace_records_who_sent_what_to_whom():
    trace = comm_trace(collective_trace, 3, 8000)
    assert trace.ops() == ["bcast", "gather", "allreduce"]
    b = trace.select("bcast")
    assert sorted((m.src, m.dst) for m in b) == [(0, 1), (0, 2)]
    assert all(8000 <= m.nbytes < 8400 and m.arrived >= m.sent for m in b)
    assert sorted(m.src for m in trace.select("gather")) == [1, 2]
    assert len(trace.select("allreduce")) == 4                     # reduce + bcast
    fig = figure_collectives(trace, 3)
    assert len(fig.axes) == 3


def test_same_results_as_torch_distributed():
    out = comm_run(collectives_side_by_side, 3, 1024, 1)
    assert set(out[0]) == {"send / recv", "bcast", "scatter", "gather", "reduce",
                           "allreduce", "barrier"}
    assert all(v["equal"] for rank in out for v in rank.values())
    plot_side_by_side(out[0], 1024)


# ---------------------------------------------------------------- bad input

def send_to_nobody(comm):
    comm.send(1, dest=7)


def tag_never_comes(comm):
    if comm.rank == 1:
        comm.recv(source=0, tag=7)


def dies_in_gather(comm):
    import os
    if comm.rank == 2:
        os._exit(3)
    return comm.gather(comm.rank)


def never_received(comm):
    if comm.rank == 0:
        comm.send("lost", dest=1, tag=5)
    return comm.rank


def bad_scatter(comm):
    return comm.scatter([1, 2] if comm.rank == 0 else None)


def test_send_to_a_rank_that_does_not_exist():
    with pytest.raises(CommError, match=r"there is no rank 7; this world has ranks 0..2"):
        comm_run(send_to_nobody, 3)


def test_a_tag_that_never_comes_times_out_naming_ranks_and_tag():
    with pytest.raises(CommError) as e:
        comm_run(tag_never_comes, 3, timeout=0.5)
    msg = str(e.value)
    assert "rank 1 timed out after 0.5 s waiting in recv(source=0, tag=7)" in msg
    assert "rank(s) [0, 2] stopped because of that" in msg
    assert comm_run(any_source, 3)[0] == [10, 20]               # and the next run works


def test_a_worker_that_dies_mid_collective_is_reported_and_replaced():
    with pytest.raises(CommError) as e:
        comm_run(dies_in_gather, 3, timeout=2)
    assert "rank 2 died" in str(e.value) and "workers were restarted" in str(e.value)
    assert comm_run(collectives, 3)[0]["gather"] == [0, 1, 4]


def test_messages_never_received_are_reported(capfd):
    assert comm_run(never_received, 3) == [0, 1, 2]
    err = capfd.readouterr().err
    assert "rank 1 never received 1 message(s) sent to it: from rank 0 with tag 5" in err


@pytest.mark.parametrize("fn, call, match", [
    (bad_scatter, {}, "needs a list of exactly 3 items"),
    (lambda comm: comm.send(1, dest=0, tag=-4), {}, "a tag must be an int >= 0"),
    (lambda comm: comm.recv(0, timeout=0), {}, "timeout must be a positive number"),
])
def test_bad_arguments_say_what_to_do(fn, call, match):
    with pytest.raises(CommError, match=match):
        comm_run(fn, 3, **call)


def test_bad_timeouts_and_plain_processes_are_refused():
    with pytest.raises(ValueError, match="timeout must be a positive"):
        comm_run(any_source, 3, timeout=0)
    with pytest.raises(RuntimeError, match="use comm_run"):
        connect()


def test_a_peer_with_the_wrong_key_is_refused():
    server = socket.create_server(("127.0.0.1", 0))
    b = socket.create_connection(server.getsockname(), timeout=2)
    a, _ = server.accept()
    server.close()
    a.settimeout(2)
    errors = []

    def accept():
        try:
            handshake(a, b"right key", 0, accepting=True)
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=accept)
    t.start()
    with pytest.raises(Exception):
        handshake(b, b"wrong key", 1, accepting=False)
    t.join(5)
    a.close()
    b.close()
    assert errors and "digest" in str(errors[0])
