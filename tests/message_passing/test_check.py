"""Lesson 04's checks: right answers in several styles pass; arrival-order gathers, whole
lists scattered, hard-coded world sizes and roots, gradients averaged twice, a damping
ignored and the other real mistakes fail with a message naming the fault."""
import numpy as np
import pytest
import torch

from ddl_lab import check
from ddl_lab.check import CheckFailed, _core
from ddl_lab.message_passing import pregel
from ddl_lab.message_passing.comm import ANY_SOURCE

NB = "04_message_passing"


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    monkeypatch.setattr(_core, "DEFAULT_TIMEOUT", 4.0)


def stub(*args, **kwargs):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------- task 1: gather

def gather_tagged_any_source(comm, value, root=0):       # ANY_SOURCE, placed by sender
    if comm.rank != root:
        comm.send((comm.rank, value), dest=root)
        return None
    out = {root: value}
    for _ in range(comm.size - 1):
        r, v = comm.recv(source=ANY_SOURCE)
        out[r] = v
    return [out[r] for r in range(comm.size)]


def gather_by_tag(comm, value, root=0):                  # ANY_SOURCE, the tag names the sender
    if comm.rank != root:
        comm.send(value, dest=root, tag=comm.rank)
        return None
    return [value if r == root else comm.recv(source=ANY_SOURCE, tag=r) for r in range(comm.size)]


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
    if comm.rank != root:
        comm.send(value, dest=root)
        return value
    return [value if r == root else comm.recv(source=r) for r in range(comm.size)]


def gather_for_four_ranks(comm, value, root=0):
    if comm.rank != root:
        comm.send(value, dest=root)
        return None
    return [value if r == root else comm.recv(source=r) for r in range(4)]


def gather_to_rank_0(comm, value, root=0):
    if comm.rank != 0:
        comm.send(value, dest=0)
        return None
    return [value] + [comm.recv(source=r) for r in range(1, comm.size)]


def gather_and_echo(comm, value, root=0):                # the root sends the list back
    out = [value if r == root else comm.recv(source=r) for r in range(comm.size)] \
        if comm.rank == root else comm.send(value, dest=root)
    if comm.rank == root:
        for r in range(comm.size):
            if r != root:
                comm.send(len(out), dest=r)
        return out
    comm.recv(source=root)
    return None


def gather_data_only(comm, value, root=0):       # the root keeps each value's data only
    if comm.rank != root:
        comm.send(value, dest=root)
        return None
    return [{"from rank": r, "data": (value if r == root else comm.recv(source=r))["data"]
             .tolist() + [0]} for r in range(comm.size)]


def gather_library(comm, value, root=0):
    return comm.gather(value, root)


def gather_deadlock(comm, value, root=0):
    if comm.rank != root:
        comm.send(value, dest=root, tag=1)
        return None
    return [value if r == root else comm.recv(source=r, tag=2) for r in range(comm.size)]


@pytest.mark.parametrize("right", [gather_tagged_any_source, gather_by_tag])
def test_gather_right_answers_pass(right, solution, capsys):
    check.gather(right)
    assert capsys.readouterr().out.count("✔ gather: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (gather_any_source, "here the ANY_SOURCE receives got the latest rank first"),
    (gather_without_own, "root's own value is missing"),
    (gather_all_return, "every other rank returns None"),
    (gather_for_four_ranks, "right for 4 ranks but not for 3 ranks"),
    (gather_to_rank_0, "right for root 0 but not for root 3"),
    (gather_and_echo, "a gather needs exactly 3: one from each other rank to the root"),
    (gather_library, "used comm.gather"),
    (gather_data_only, r"the root's list at index 0 holds \{'from rank': 0, 'data': \[.*0\]\}; "
                       r"expected rank 0's value"),
])
def test_gather_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.gather(wrong)


def test_gather_deadlock_times_out_naming_ranks_and_tag():
    with pytest.raises(CheckFailed) as e:
        check.gather(gather_deadlock)
    assert "rank 0 timed out" in str(e.value) and "tag=2" in str(e.value)


def test_gather_verdicts_are_the_same_5_times(solution):
    right = solution(NB, "my_gather")
    for _ in range(5):
        check.gather(right)
        with pytest.raises(CheckFailed, match="ANY_SOURCE receives got the latest rank first"):
            check.gather(gather_any_source)


# ------------------------------------------------------------ task 2: scatter

def scatter_enumerate(comm, chunks, root=0):
    if comm.rank != root:
        return comm.recv(source=ANY_SOURCE)
    for r, chunk in enumerate(chunks):
        if r != root:
            comm.send(chunk, r)
    return chunks[root]


def scatter_whole_list(comm, chunks, root=0):
    if comm.rank == root:
        for r in range(comm.size):
            if r != root:
                comm.send(chunks, dest=r)
        return chunks
    return comm.recv(source=root)


def scatter_whole_list_then_index(comm, chunks, root=0):
    if comm.rank == root:
        for r in range(comm.size):
            if r != root:
                comm.send(chunks, dest=r)
        return chunks[root]
    return comm.recv(source=root)[comm.rank]


def scatter_off_by_one(comm, chunks, root=0):
    if comm.rank == root:
        for r in range(comm.size):
            if r != root:
                comm.send(chunks[(r + 1) % comm.size], dest=r)
        return chunks[root]
    return comm.recv(source=root)


def scatter_sends_to_itself(comm, chunks, root=0):
    if comm.rank == root:
        for r in range(comm.size):
            comm.send(chunks[r], dest=r)
    return comm.recv(source=root)


def scatter_library(comm, chunks, root=0):
    return comm.scatter(chunks, root)


def test_scatter_right_answers_pass(solution, capsys):
    check.scatter(scatter_enumerate)
    assert capsys.readouterr().out.count("✔ scatter: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (scatter_whole_list, "returned the whole list"),
    (scatter_whole_list_then_index, r"the root sent rank 1 [\d,]+ bytes, [\d.]+× the size of "
                                    r"chunks\[1\].*not the whole list"),
    (scatter_off_by_one, r"returned chunks\[2\], the chunk meant for rank 2"),
    (scatter_sends_to_itself, "a scatter needs exactly 3: one from the root to each other"),
    (scatter_library, "used comm.scatter"),
])
def test_scatter_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.scatter(wrong)


# ------------------------------------------------------- task 3: parallel gradient

def gradient_reduce_bcast_torch(comm, theta, X, y, m):
    X, y, theta = (torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (X, y, theta))
    total = comm.reduce(X.T @ (X @ theta - y), root=0)
    return comm.bcast(total / m if comm.rank == 0 else None, root=0)


def gradient_averaged_twice(comm, theta, X, y, m):
    return comm.allreduce(X.T @ (X @ theta - y) / max(len(y), 1)) / comm.size


def gradient_local_only(comm, theta, X, y, m):
    return X.T @ (X @ theta - y) / m


def gradient_divided_by_k(comm, theta, X, y, m):
    return comm.allreduce(X.T @ (X @ theta - y)) / m / comm.size


def gradient_not_divided(comm, theta, X, y, m):
    return comm.allreduce(X.T @ (X @ theta - y))


def gradient_only_on_root(comm, theta, X, y, m):
    total = comm.reduce(X.T @ (X @ theta - y))
    return total / m if comm.rank == 0 else np.zeros_like(theta)


def gradient_mutates_y(comm, theta, X, y, m):
    y -= X @ theta
    return -comm.allreduce(X.T @ y) / m


def gradient_forgets_return(comm, theta, X, y, m):
    comm.allreduce(X.T @ (X @ theta - y)) / m


def test_gradient_right_answers_pass(solution, capsys):
    check.parallel_gradient(gradient_reduce_bcast_torch)
    assert capsys.readouterr().out.count("✔ parallel_gradient: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (gradient_averaged_twice, "you averaged twice"),
    (gradient_local_only, "only its own shard's gradient"),
    (gradient_divided_by_k, "do not divide by the number of workers"),
    (gradient_not_divided, "not divided by m"),
    (gradient_only_on_root, "rank 0 holds ∇J but rank 1 returned"),
    (gradient_mutates_y, "changed its argument `y` in place"),
    (gradient_forgets_return, "returned None"),
])
def test_gradient_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.parallel_gradient(wrong)


# ---------------------------------------------------- task 4: a Pregel superstep

def _variant(teleport=True, dangling=True, fixed_damping=None, update_at_0=False):
    def compute(vertex, messages, ctx, damping=0.85):
        d = damping if fixed_damping is None else fixed_damping
        n = ctx.num_vertices
        if ctx.superstep > 0 or update_at_0:
            vertex.value = ((1 - d) / n if teleport else 0.0) + d * (
                sum(messages) + ctx.aggregated("dangling") / n)
        if len(vertex.out_edges):
            for w in vertex.out_edges:
                ctx.send(w, vertex.value / len(vertex.out_edges))
        elif dangling:
            ctx.aggregate("dangling", vertex.value)
    return compute


def pagerank_numpy_style(vertex, messages, ctx, damping=0.85):
    n, out = ctx.num_vertices, np.asarray(vertex.out_edges)
    if ctx.superstep:
        vertex.value = float((1 - damping) / n + damping * (np.sum(messages)
                                                            + ctx.aggregated("dangling") / n))
    if out.size == 0:
        ctx.aggregate("dangling", vertex.value)
    share = vertex.value / max(out.size, 1)
    for w in out.tolist():
        ctx.send(w, share)


def pagerank_without_damping_argument(vertex, messages, ctx):
    _variant()(vertex, messages, ctx)


def test_pagerank_right_answers_pass(solution, capsys):
    check.pagerank_compute(pagerank_numpy_style)
    assert capsys.readouterr().out.count("✔ pagerank_compute: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (_variant(teleport=False), r"\(1 − d\)/n term is missing"),
    (_variant(dangling=False), "dangling vertices .* is lost"),
    (_variant(fixed_damping=1.0), "damping factor d is not applied"),
    (_variant(fixed_damping=0.85), "the damping passed in is ignored"),
    (_variant(update_at_0=True), "In superstep 0 no messages have arrived yet"),
    (pagerank_without_damping_argument, "unexpected keyword argument 'damping'"),
    (pregel._pagerank_vertex, "package's own implementation"),
])
def test_pagerank_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.pagerank_compute(wrong)


def test_scatter_gradient_and_pagerank_verdicts_are_the_same_5_times(solution):
    right = [(check.scatter, solution(NB, "my_scatter")),
             (check.parallel_gradient, solution(NB, "my_parallel_gradient")),
             (check.pagerank_compute, solution(NB, "my_pagerank_compute"))]
    wrong = [(check.scatter, scatter_whole_list_then_index, "not the whole list"),
             (check.parallel_gradient, gradient_averaged_twice, "you averaged twice"),
             (check.pagerank_compute, _variant(fixed_damping=0.85), "damping passed in is ignored")]
    for _ in range(5):
        for task, fn in right:
            task(fn)
        for task, fn, hint in wrong:
            with pytest.raises(CheckFailed, match=hint):
                task(fn)
