"""Properties, with Hypothesis: every allreduce equals dist.all_reduce, the
message-passing collectives equal torch's, every compressor decodes what it should and
error feedback loses nothing, the parameter server's gate and Adagrad equal plain
references. Few examples each (a bounded phase), derandomized (the same verdict every run).
"""
import numpy as np
import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ddl_lab import Cluster
from ddl_lab.compression import compressors as C
from ddl_lab.message_passing.comm import connect
from ddl_lab.parameter_server.rules import shard_ranges
from ddl_lab.parameter_server.shard import Shard
from ddl_lab.ring_allreduce import textbook
from ddl_lab.ring_allreduce.engine import allreduce
from ddl_lab.ring_allreduce.shm import shm_allreduce
from ddl_lab.runtime.worlds import in_worlds


def few(n):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def cluster5():
    with Cluster(5, timeout=120) as c:
        yield c


def on_world(cluster, n, body, *args):
    """``body(*args)`` on ranks 0…n−1 of the 5-rank cluster: their results."""
    out = cluster.run(in_worlds, body, [(n, args)])
    results = [rank[0] for rank in out[:n]]
    failed = [r for r in results if type(r).__name__ == "Raised"]
    assert not failed, failed[0].text
    return results


# ------------------------------------------------------------------ every allreduce

ALGORITHMS = {
    "reduce_broadcast": lambda t: allreduce(t, "reduce_broadcast"),
    "tree": lambda t: allreduce(t, "tree"),
    "ring": lambda t: allreduce(t, "ring"),
    "ring, 3 segments": lambda t: allreduce(t, "ring", segments=3),
    "shared memory": shm_allreduce,
    "textbook ring, 2 segments": lambda t: textbook.ring_allreduce(t, 2),
    "textbook reduce_broadcast": textbook.reduce_broadcast_allreduce,
}
SENTINEL = 7.0


def placed(data, layout):
    """(buffer, view): ``data`` in a contiguous tensor, every other element of a buffer,
    or a column of a matrix; the rest of the buffer holds SENTINEL."""
    if layout == "contiguous":
        return data.clone(), None
    base = torch.full((2 * len(data),) if layout == "strided" else (len(data), 3), SENTINEL,
                      dtype=data.dtype)
    view = base[::2] if layout == "strided" else base[:, 1]
    view.copy_(data)
    return view, base


def allreduce_case(length, dtype, layout, integral, seed):
    """Worker: every algorithm on this rank's data; what went wrong, per algorithm."""
    n, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(1000 * seed + rank)
    data = (torch.randint(-50, 51, (length,), generator=g) if integral
            else torch.randn(length, generator=g)).to(getattr(torch, dtype))
    want = data.clone()
    dist.all_reduce(want)
    bound = data.abs().double()
    dist.all_reduce(bound)
    bound *= 2 * n * torch.finfo(data.dtype).eps          # summation order may differ
    wrong = {}
    for name, algorithm in ALGORITHMS.items():
        if name.startswith("textbook") and layout != "contiguous":
            continue                                      # the lesson's listing: 1-D, dense
        view, base = placed(data, layout)
        algorithm(view)
        err = (view.double() - want.double()).abs()
        if (integral and not torch.equal(view, want)) or bool((err > bound).any()):
            wrong[name] = f"off by up to {err.max().item():g}"
        if base is not None:
            view.fill_(SENTINEL)
            if not bool((base == SENTINEL).all()):
                wrong[name] = "wrote outside the tensor it was given"
    return wrong


@few(14)
@given(n=st.integers(1, 5), length=st.integers(0, 100_000),
       dtype=st.sampled_from(["float16", "float32", "float64"]),
       layout=st.sampled_from(["contiguous", "strided", "column"]),
       integral=st.booleans(), seed=st.integers(0, 1000))
@example(n=5, length=0, dtype="float32", layout="contiguous", integral=True, seed=0)
@example(n=5, length=3, dtype="float16", layout="strided", integral=True, seed=1)
@example(n=4, length=97, dtype="float64", layout="column", integral=False, seed=2)
@example(n=1, length=1, dtype="float32", layout="strided", integral=False, seed=3)
@example(n=3, length=100_000, dtype="float32", layout="contiguous", integral=False, seed=4)
def test_every_allreduce_equals_dist_all_reduce(cluster5, n, length, dtype, layout, integral,
                                                 seed):
    for rank, wrong in enumerate(on_world(cluster5, n, allreduce_case, length, dtype, layout,
                                          integral, seed)):
        assert not wrong, f"rank {rank} of {n}: {wrong}"


# ------------------------------------------------------------------ message passing

def collectives_case(length, root, seed):
    """Worker: each of the communicator's collectives beside torch's, on the same data."""
    n, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(1000 * seed + rank)
    x = torch.randint(-1000, 1000, (length,), generator=g).double()   # sums exact in any order
    mine = rank == root
    differs = []

    def same(name, got, want):
        got, want = (torch.as_tensor(v) for v in (got, want))
        if not torch.equal(got, want):
            differs.append(name)

    comm = connect(timeout=30)
    try:
        want = x.clone()
        dist.broadcast(want, src=root)
        same("bcast", comm.bcast(x if mine else None, root=root), want)
        parts = [x + 1000 * k for k in range(n)]
        want = torch.empty_like(x)
        dist.scatter(want, parts if mine else None, src=root)
        same("scatter", comm.scatter(parts if mine else None, root=root), want)
        wants = [torch.empty_like(x) for _ in range(n)] if mine else None
        dist.gather(x, wants, dst=root)
        got = comm.gather(x, root=root)
        if mine:
            same("gather", torch.stack(got), torch.stack(wants))
        elif got is not None:
            differs.append("gather (not the root)")
        want = x.clone()
        dist.reduce(want, dst=root)
        got = comm.reduce(x, root=root)
        if mine:
            same("reduce", got, want)
        want = x.clone()
        dist.all_reduce(want)
        same("allreduce", comm.allreduce(x), want)
        wants = [torch.empty_like(x) for _ in range(n)]
        dist.all_to_all(wants, parts)
        same("alltoall", torch.stack(comm.alltoall(parts)), torch.stack(wants))
        comm.barrier()
    finally:
        comm.close()
    return differs


@st.composite
def worlds(draw):
    n = draw(st.integers(1, 5))
    return n, draw(st.integers(0, n - 1))


@few(10)
@given(world=worlds(), length=st.integers(0, 5000), seed=st.integers(0, 1000))
@example(world=(5, 4), length=0, seed=0)
@example(world=(2, 0), length=1, seed=1)
def test_message_passing_collectives_equal_torchs(cluster5, world, length, seed):
    n, root = world
    for rank, differs in enumerate(on_world(cluster5, n, collectives_case, length, root, seed)):
        assert not differs, f"rank {rank} of {n} (root {root}): {differs} differ from torch's"


# ------------------------------------------------------------------ compressors

def compressors():
    return st.one_of(
        st.just(C.FP32()), st.just(C.FP16()),
        st.integers(1, 300).map(lambda b: C.OneBit(bucket=b)),
        st.tuples(st.integers(1, 127), st.integers(1, 300), st.integers(0, 9)).map(
            lambda a: C.QSGD(s=a[0], bucket=a[1], seed=a[2])),
        st.sampled_from([1e-30, 1e-3, 0.5, 10.0, 1e20]).map(C.Threshold),
        st.sampled_from([1e-4, 0.01, 0.3, 1.0]).map(C.TopK))


HUGE = float(np.float32(1e30))
EDGES = [float(np.float32(v)) for v in (0.0, -0.0, 1e-45, -1e-45, 1e-40, 1e-38, 1.0, -1.0,
                                        1e30, -1e30)]
finite = st.one_of(st.floats(-HUGE, HUGE, width=32), st.sampled_from(EDGES))


def vectors(elements=finite, max_len=3000):
    return hnp.arrays(np.float32, st.integers(0, max_len), elements=elements)


def ulp(x):
    return np.spacing(np.abs(x.astype(np.float32))).astype(np.float64)


@few(60)
@given(comp=compressors(), x=vectors())
@example(comp=C.FP16(), x=np.array([1e30, -7e4, 65504.0, 1e-8], np.float32))
@example(comp=C.TopK(0.01), x=np.zeros(0, np.float32))
@example(comp=C.OneBit(4), x=np.zeros(9, np.float32))
def test_every_compressor_decodes_a_finite_vector_to_a_finite_one_of_its_length(comp, x):
    out = comp.decode(comp.encode(torch.from_numpy(x)), len(x))
    assert out.dtype == torch.float32 and out.shape == (len(x),)
    assert bool(torch.isfinite(out).all()), f"{comp} decoded {x} to {out}"
    if isinstance(comp, C.FP32):
        assert np.array_equal(out.numpy(), x)


@few(60)
@given(comp=compressors(), length=st.integers(0, 2000), seed=st.integers(0, 1000),
       scale=st.sampled_from([0.0, 1e-42, 1e-6, 1.0, 1e25]))
def test_error_feedback_loses_nothing(comp, length, seed, scale):
    """decoded + new residual == gradient + old residual, up to the two float32 roundings
    error feedback makes (v = g + r; r' = v − decoded), for several steps in a row."""
    rng = np.random.default_rng(seed)
    ef = C.ErrorFeedback(comp)
    for _ in range(3):
        g = (rng.standard_normal(length) * scale).astype(np.float32)
        old = np.zeros(length) if ef.residual is None else ef.residual.numpy().astype(np.float64)
        decoded = ef.decode(ef.encode(torch.from_numpy(g)), length).numpy().astype(np.float64)
        new = ef.residual.numpy()
        v = g + old.astype(np.float32)
        gap = np.abs(decoded + new - (g.astype(np.float64) + old))
        assert bool(np.all(gap <= (ulp(v) + ulp(new)) / 2)), f"{comp}: lost {gap.max():g}"


@few(30)
@given(comp=compressors(), x=vectors(), bad=st.sampled_from([np.nan, np.inf, -np.inf]),
       where=st.floats(0, 1))
def test_a_non_finite_gradient_is_refused_not_hidden(comp, x, bad, where):
    x = np.append(x, np.float32(0))
    x[int(where * (len(x) - 1))] = bad
    for c in (comp, C.ErrorFeedback(comp)):
        with pytest.raises(ValueError, match="non-finite"):
            c.encode(torch.from_numpy(x))


# ------------------------------------------------------------------ the parameter server

def reference_gate(events, replicas, s):
    """Plain SSP: a pull waits while its replica is more than s clocks ahead of the slowest;
    returns, after each event, who was let through."""
    clocks, waiting, out = [0] * replicas, [], []
    for who, what in events:
        released = []
        if what == "push":
            clocks[who] += 1
        else:
            waiting.append(who)
        for w in list(waiting):
            if clocks[w] - min(clocks) <= s:
                waiting.remove(w)
                released.append(w)
        out.append(sorted(released))
    return out


@st.composite
def gate_runs(draw):
    replicas, s = draw(st.integers(1, 4)), draw(st.integers(0, 3))
    blocked, events = set(), []
    for _ in range(draw(st.integers(1, 40))):
        free = [r for r in range(replicas) if r not in blocked]
        if not free:
            break
        who, what = draw(st.sampled_from(free)), draw(st.sampled_from(["pull", "push"]))
        events.append((who, what))
        if what == "pull":
            blocked.add(who)                      # a replica waits for its answer
            ref = reference_gate(events, replicas, s)
            blocked -= {w for step in ref for w in step}
    return replicas, s, events


@few(60)
@given(run=gate_runs())
def test_the_ssp_gate_equals_a_plain_reference(run):
    replicas, s, events = run
    shard = Shard(0, np.zeros(3), mode="ssp", s=s)
    for r in range(replicas):
        shard.handle(r, ("join",))
    got = []
    for who, what in events:
        request = ("pull",) if what == "pull" else ("push", np.zeros(3), shard.version)
        got.append(sorted(w for w, msg in shard.handle(who, request) if msg[0] == "params"))
    assert got == reference_gate(events, replicas, s)


@few(40)
@given(n=st.integers(1, 60), shards=st.integers(1, 5), lr=st.sampled_from([1e-3, 0.1, 2.0]),
       eps=st.sampled_from([1e-10, 1e-8, 1e-3]), steps=st.integers(1, 8),
       seed=st.integers(0, 1000), scale=st.sampled_from([0.0, 1e-20, 1.0, 1e15]))
def test_sharded_adagrad_equals_plain_adagrad(n, shards, lr, eps, steps, seed, scale):
    shards = min(shards, n)
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(n)
    ranges = shard_ranges(n, shards)
    parts = [Shard(i, theta[lo:hi], rule="adagrad", lr=lr, eps=eps)
             for i, (lo, hi) in enumerate(ranges)]
    ref, G = theta.copy(), np.zeros(n)
    for _ in range(steps):
        g = rng.standard_normal(n) * scale
        g[rng.random(n) < 0.2] = 0.0
        for shard, (lo, hi) in zip(parts, ranges):
            shard.handle("replica", ("push", g[lo:hi], shard.version))
        G += g * g
        ref -= lr * g / (np.sqrt(G) + eps)
    assert np.array_equal(np.concatenate([p.theta for p in parts]), ref)
    assert np.array_equal(np.concatenate([p.G for p in parts]), G)
