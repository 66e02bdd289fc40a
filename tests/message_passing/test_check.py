"""Lesson 04's checks accept the solutions and reject the stub and plausible mistakes."""
import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed, _core
from ddl_lab.message_passing.comm import ANY_SOURCE


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    monkeypatch.setattr(_core, "DEFAULT_TIMEOUT", 4.0)


def stub(*args, **kwargs):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------- task 1: gather

def my_gather(comm, value, root=0):
    if comm.rank != root:
        comm.send(value, dest=root)
        return None
    return [value if r == root else comm.recv(source=r) for r in range(comm.size)]


def gather_any_source(comm, value, root=0):
    if comm.rank != root:
        comm.send(value, dest=root)
        return None
    return [value] + [comm.recv(source=ANY_SOURCE) for _ in range(comm.size - 1)]


def gather_without_own(comm, value, root=0):
    if comm.rank != root:
        comm.send(value, dest=root)
        return None
    return [comm.recv(source=r) for r in range(comm.size) if r != root]


def gather_all_return(comm, value, root=0):
    out = my_gather(comm, value, root)
    return out if comm.rank == root else value


def gather_library(comm, value, root=0):
    return comm.gather(value, root)


def gather_deadlock(comm, value, root=0):
    if comm.rank != root:
        comm.send(value, dest=root, tag=1)
        return None
    return [value if r == root else comm.recv(source=r, tag=2) for r in range(comm.size)]


def test_gather_solution_passes(capsys):
    check.gather_from_p2p(my_gather)
    assert "✔ gather_from_p2p: passed" in capsys.readouterr().out


def test_gather_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.gather_from_p2p(stub)


@pytest.mark.parametrize("wrong, hint", [
    (gather_any_source, "ANY_SOURCE and append in arrival order"),
    (gather_without_own, "root's own value is missing"),
    (gather_all_return, "every other rank returns None"),
    (gather_library, "used comm.gather"),
])
def test_gather_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.gather_from_p2p(wrong)


def test_gather_deadlock_times_out_naming_ranks_and_tag():
    with pytest.raises(CheckFailed) as e:
        check.gather_from_p2p(gather_deadlock)
    assert "rank 0 timed out" in str(e.value) and "tag=2" in str(e.value)


# ------------------------------------------------------------ task 2: scatter

def my_scatter(comm, chunks, root=0):
    if comm.rank == root:
        for r in range(comm.size):
            if r != root:
                comm.send(chunks[r], dest=r)
        return chunks[root]
    return comm.recv(source=root)


def scatter_whole_list(comm, chunks, root=0):
    if comm.rank == root:
        for r in range(comm.size):
            if r != root:
                comm.send(chunks, dest=r)
        return chunks
    return comm.recv(source=root)


def scatter_off_by_one(comm, chunks, root=0):
    if comm.rank == root:
        for r in range(comm.size):
            if r != root:
                comm.send(chunks[(r + 1) % comm.size], dest=r)
        return chunks[root]
    return comm.recv(source=root)


def scatter_library(comm, chunks, root=0):
    return comm.scatter(chunks, root)


def test_scatter_solution_passes(capsys):
    check.scatter_from_p2p(my_scatter)
    assert "✔ scatter_from_p2p: passed" in capsys.readouterr().out


def test_scatter_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.scatter_from_p2p(stub)


@pytest.mark.parametrize("wrong, hint", [
    (scatter_whole_list, "returned the whole list"),
    (scatter_off_by_one, r"returned chunks\[2\], the chunk meant for rank 2"),
    (scatter_library, "used comm.scatter"),
])
def test_scatter_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.scatter_from_p2p(wrong)


# ------------------------------------------------------- task 3: parallel gradient

def parallel_gradient(comm, theta, X, y, m):
    return comm.allreduce(X.T @ (X @ theta - y)) / m


def gradient_averaged_twice(comm, theta, X, y, m):
    return comm.allreduce(X.T @ (X @ theta - y) / len(y)) / comm.size


def gradient_local_only(comm, theta, X, y, m):
    return X.T @ (X @ theta - y) / len(y)


def gradient_divided_by_k(comm, theta, X, y, m):
    return comm.allreduce(X.T @ (X @ theta - y)) / m / comm.size


def gradient_only_on_root(comm, theta, X, y, m):
    total = comm.reduce(X.T @ (X @ theta - y))
    return total / m if comm.rank == 0 else np.zeros_like(theta)


def test_gradient_solution_passes(capsys):
    check.parallel_gradient(parallel_gradient)
    assert "✔ parallel_gradient: passed" in capsys.readouterr().out


def test_gradient_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.parallel_gradient(stub)


@pytest.mark.parametrize("wrong, hint", [
    (gradient_averaged_twice, "you averaged twice"),
    (gradient_local_only, "only its own shard's gradient"),
    (gradient_divided_by_k, "do not divide by the number of workers"),
    (gradient_only_on_root, r"rank 1 returned a wrong gradient: element 0"),
])
def test_gradient_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.parallel_gradient(wrong)


# ---------------------------------------------------- task 4: a Pregel superstep

def pagerank_compute(vertex, messages, ctx, damping=0.85):
    n = ctx.num_vertices
    if ctx.superstep > 0:
        vertex.value = (1 - damping) / n + damping * (sum(messages)
                                                      + ctx.aggregated("dangling") / n)
    if len(vertex.out_edges):
        for w in vertex.out_edges:
            ctx.send(w, vertex.value / len(vertex.out_edges))
    else:
        ctx.aggregate("dangling", vertex.value)


def _variant(teleport=True, dangling=True, damping=0.85, update_at_0=False):
    def compute(vertex, messages, ctx):
        n = ctx.num_vertices
        if ctx.superstep > 0 or update_at_0:
            vertex.value = ((1 - damping) / n if teleport else 0.0) + damping * (
                sum(messages) + ctx.aggregated("dangling") / n)
        if len(vertex.out_edges):
            for w in vertex.out_edges:
                ctx.send(w, vertex.value / len(vertex.out_edges))
        elif dangling:
            ctx.aggregate("dangling", vertex.value)
    return compute


def test_pagerank_solution_passes(capsys):
    check.pagerank_superstep(pagerank_compute)
    assert "✔ pagerank_superstep: passed" in capsys.readouterr().out


def test_pagerank_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.pagerank_superstep(stub)


@pytest.mark.parametrize("wrong, hint", [
    (_variant(teleport=False), r"\(1 − d\)/n term is missing"),
    (_variant(dangling=False), "dangling vertices .* is lost"),
    (_variant(damping=1.0), "damping factor d is not applied"),
    (_variant(update_at_0=True), "In superstep 0 no messages have arrived yet"),
])
def test_pagerank_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.pagerank_superstep(wrong)
