"""check.tree_gather judges the binomial tree by its shape as well as by the list the root
returns (lesson 04, task 5): right trees in several styles pass; a flat gather, a chain, a
subtree sent in pieces, a tree of another shape and a rank forwarding only its own value
get the right list or nearly, and fail with the shape named."""
import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed, _core

NB = "04_message_passing"


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    monkeypatch.setattr(_core, "DEFAULT_TIMEOUT", 4.0)


def stub(*args, **kwargs):
    raise NotImplementedError("replace this line with your code")


def tree_by_lowest_bit(comm, value):
    """Another right style: children listed from the lowest set bit, values as a list."""
    r, n = comm.rank, comm.size
    low = r & -r if r else 1 << n.bit_length()
    got = [(r, value)]
    k = 1
    while k < low and r + k < n:
        got += comm.recv(source=r + k)
        k *= 2
    if r:
        comm.send(got, dest=r - low)
        return None
    return [v for _, v in sorted(got, key=lambda rv: rv[0])]


def flat_gather(comm, value):
    """Right list, wrong shape: every rank straight to the root."""
    if comm.rank:
        comm.send(value, dest=0)
        return None
    return [value] + [comm.recv(source=r) for r in range(1, comm.size)]


def chain_gather(comm, value):
    """Right list, wrong shape: a chain, each rank forwarding everything to r − 1."""
    r, n = comm.rank, comm.size
    got = [value] + (comm.recv(source=r + 1) if r + 1 < n else [])
    if r:
        comm.send(got, dest=r - 1)
        return None
    return got


def tree_in_pieces(comm, value):
    """Right parents, but a subtree forwarded one value per message."""
    r, n = comm.rank, comm.size
    low = r & -r if r else 1 << n.bit_length()
    got = {r: value}
    k = 1
    while k < low and r + k < n:
        for _ in range(min(k, n - r - k)):
            rank, v = comm.recv(source=r + k)
            got[rank] = v
        k *= 2
    if r:
        for item in got.items():
            comm.send(item, dest=r - low)
        return None
    return [got[i] for i in range(n)]


def heap_tree(comm, value):
    """Another tree: the binary heap, rank r to (r − 1) // 2."""
    r, n = comm.rank, comm.size
    got = {r: value}
    for child in (2 * r + 1, 2 * r + 2):
        if child < n:
            got.update(comm.recv(source=child))
    if r:
        comm.send(got, dest=(r - 1) // 2)
        return None
    return [got[i] for i in range(n)]


def test_right_trees_pass(solution, capsys):
    check.tree_gather(tree_by_lowest_bit)
    check.tree_gather(tree_by_lowest_bit, seed=4)
    assert capsys.readouterr().out.count("✔ tree_gather: passed") == 2


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (flat_gather, r"not gather along the binomial tree.*straight to rank 0 — a flat gather"),
    (chain_gather, r"not gather along the binomial tree.*sent to rank r − 1 — a chain"),
    (tree_in_pieces, r"rank 2 sent 2 messages to rank 0, carrying ranks \[\[2\], \[3\]\].*ONE message"),
    (heap_tree, r"rank 3 sent to \[1\]; its parent in the binomial tree is rank 2 — a tree, but "
                r"not the binomial one"),
])
def test_wrong_shapes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.tree_gather(wrong)


def test_a_rank_forwarding_only_its_own_value_is_named():
    def own_only(comm, value):                # rank 2 forgets what rank 3 sent it
        r, n = comm.rank, comm.size
        low = r & -r if r else 1 << n.bit_length()
        got = {r: value}
        k = 1
        while k < low and r + k < n:
            got.update(comm.recv(source=r + k))
            k *= 2
        if r:
            comm.send({r: value} if r == 2 else got, dest=r - low)
            return None
        return [got.get(i) for i in range(n)]
    with pytest.raises(CheckFailed, match=r"rank 2's message to rank 0 carried the values of "
                                          r"ranks \[2\], not its subtree \[2, 3\]"):
        check.tree_gather(own_only)


# ------------------------------------------------------- task 7: the chain broadcast

def chain_by_bounds(comm, data, pieces):
    """Another right style: pieces cut by hand, the size sent ahead as part of the first."""
    r, n = comm.rank, comm.size
    out = []
    for j in range(pieces):
        if r == 0:
            lo, hi = j * len(data) // pieces, (j + 1) * len(data) // pieces
            piece = data[lo:hi].copy()
        else:
            piece = comm.recv(source=r - 1)
        if r < n - 1:
            comm.send(piece, dest=r + 1)
        out.append(piece)
    return np.concatenate(out)


def chain_any_source(comm, data, pieces):
    """Another right style: a receive from any source, where only rank r − 1 ever sends."""
    from ddl_lab.message_passing.comm import ANY_SOURCE
    r, n = comm.rank, comm.size
    parts = np.array_split(data, pieces) if r == 0 else None
    out = []
    for j in range(pieces):
        piece = parts[j] if r == 0 else comm.recv(source=ANY_SOURCE)
        if r < n - 1:
            comm.send(piece, dest=r + 1)
        out.append(piece)
    return np.concatenate(out)


def chain_carries_all_so_far(comm, data, pieces):
    """Right links and counts, each message carrying everything received so far."""
    r, n = comm.rank, comm.size
    parts = np.array_split(data, pieces) if r == 0 else None
    got = np.zeros(0)
    for j in range(pieces):
        got = np.concatenate([got, parts[j]]) if r == 0 else comm.recv(source=r - 1)
        if r < n - 1:
            comm.send(got, dest=r + 1)
    return got


def chain_one_step_late(comm, data, pieces):
    """Right array and links; each middle rank forwards piece j after receiving piece j + 1."""
    r, n = comm.rank, comm.size
    if r == 0:
        for piece in np.array_split(data, pieces):
            comm.send(piece, dest=1)
        return data
    got, held = [], None
    for j in range(pieces):
        piece = comm.recv(source=r - 1)
        if held is not None and r < n - 1:
            comm.send(held, dest=r + 1)
        held = piece
        got.append(piece)
    if r < n - 1:
        comm.send(held, dest=r + 1)
    return np.concatenate(got)


def chain_flat(comm, data, pieces):
    """Right array everywhere, wrong shape: the root sends every piece to every rank."""
    if comm.rank == 0:
        for piece in np.array_split(data, pieces):
            for r in range(1, comm.size):
                comm.send(piece, dest=r)
        return data
    return np.concatenate([comm.recv(source=0) for _ in range(pieces)])


def chain_store_and_forward(comm, data, pieces):
    """Right array, right links, no pipelining: all pieces in, then all pieces out."""
    r, n = comm.rank, comm.size
    parts = np.array_split(data, pieces) if r == 0 else [comm.recv(source=r - 1)
                                                         for _ in range(pieces)]
    if r < n - 1:
        for piece in parts:
            comm.send(piece, dest=r + 1)
    return np.concatenate(parts)


def chain_forwards_whole(comm, data, pieces):
    """The root cuts the array, but the other ranks forward it whole."""
    r, n = comm.rank, comm.size
    if r == 0:
        for piece in np.array_split(data, pieces):
            comm.send(piece, dest=1)
        return data
    whole = np.concatenate([comm.recv(source=r - 1) for _ in range(pieces if r == 1 else 1)])
    if r < n - 1:
        comm.send(whole, dest=r + 1)
    return whole


def chain_reversed(comm, data, pieces):
    """Right shape, pieces joined in the wrong order."""
    r, n = comm.rank, comm.size
    parts = np.array_split(data, pieces) if r == 0 else None
    got = []
    for j in range(pieces):
        piece = parts[j] if r == 0 else comm.recv(source=r - 1)
        if r < n - 1:
            comm.send(piece, dest=r + 1)
        got.insert(0, piece)
    return np.concatenate(got)


def test_right_chains_pass(solution, capsys):
    check.chain_bcast(chain_by_bounds, seed=2)
    check.chain_bcast(chain_any_source, seed=3)
    assert capsys.readouterr().out.count("✔ chain_bcast: passed") == 2


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (chain_flat, r"rank 0 sent pieces straight to ranks \[1, 2, 3\] — a flat broadcast"),
    (chain_store_and_forward, r"rank 1 received 5 pieces before it forwarded the first.*store "
                              r"and forward"),
    (chain_forwards_whole, r"rank 1 sent 1 message\(s\) to rank 2 for 5 pieces"),
    (chain_carries_all_so_far, r"rank 0's 5 messages to rank 1 carried \[200, 400, 600, 800, "
                               r"1000\] numbers, 3,000 in all for an array of 1,000 .*everything "
                               r"received so far"),
    (chain_one_step_late, r"rank 1 forwards each piece 1 step\(s\) late: it receives piece "
                          r"j \+ 1 before it forwards piece j \(its calls: recv recv send"),
    (chain_reversed, r"rank 0 returned .*not the root's array of 1000 numbers in order"),
])
def test_chain_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.chain_bcast(wrong)


def test_a_piece_forwarded_late_is_not_called_store_and_forward():
    with pytest.raises(CheckFailed) as e:
        check.chain_bcast(chain_one_step_late)
    assert "store and forward" not in str(e.value)


def test_the_package_chain_is_refused():
    from ddl_lab.message_passing.pipeline import chain_bcast

    def my_chain_bcast(comm, data, pieces):
        return chain_bcast(comm, data, pieces)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.chain_bcast(my_chain_bcast)
