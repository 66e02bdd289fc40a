"""Context parallelism on real workers (lesson 12 `transformers`): ring attention forward and
backward equal to full attention (naive and zig-zag slices, s not divisible by n, causal or
not, with and without overlap), its recorded steps, the work per rank with and without
zig-zag balancing, Ulysses, and the bytes of both counted by the wiretap against formulas."""
import math

import pytest
import torch

from ddl_lab.ml.gpt import attention
from ddl_lab.runtime import Cluster
from ddl_lab.transformers import ring as R
from ddl_lab.transformers import ulysses as U

B, A, D = 2, 2, 3


@pytest.fixture(scope="module", params=[2, 3, 4])
def cluster(request):
    with Cluster(request.param, backend="gloo", timeout=30) as c:
        yield c


def _full(a: int, s: int, causal: bool, seed: int) -> dict:
    """Full attention on one process: output, gradients and the scores."""
    q, k, v, grad = R.inputs(B, a, s, D, seed)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    out = attention(q, k, v, causal)
    out.backward(grad)
    scores = (q @ k.transpose(-1, -2)).detach() / math.sqrt(D)
    if causal:
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), -math.inf)
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad, "scores": scores}


def _assert_equal_to_full(results: list[dict], full: dict, chunks: list) -> None:
    for key in ("out", "dq", "dk", "dv"):
        got = R.place([r[key] for r in results], chunks)
        assert torch.allclose(got, full[key], atol=1e-10), key


def _assert_steps(steps: list, rank: int, chunks: list, scores: torch.Tensor) -> None:
    """After step t, a rank's running max and sum are those of its queries' scores against
    the keys of the blocks it has held so far."""
    n = len(chunks)
    rows = scores[..., R.positions(chunks[rank]), :]
    assert [st.block for st in steps] == [(rank - t) % n for t in range(n)]
    for t, st in enumerate(steps):
        seen = torch.cat([R.positions(chunks[(rank - u) % n]) for u in range(t + 1)])
        held = torch.cat([rows[..., seen], torch.full(rows.shape[:-1] + (1,), -math.inf,
                                                      dtype=rows.dtype)], -1)   # none: -inf
        m = held.amax(-1)
        z = torch.exp(held - m.nan_to_num(neginf=0.0)[..., None]).sum(-1)
        assert torch.equal(torch.tensor(st.max, dtype=m.dtype).isinf(), m.isinf())
        assert torch.allclose(torch.tensor(st.max, dtype=m.dtype), m, atol=1e-12)
        assert torch.allclose(torch.tensor(st.sum, dtype=z.dtype), z, atol=1e-10)
        assert st.keys == tuple(chunks[st.block])


def test_ring_attention_equals_full_attention(cluster):
    n = cluster.world_size
    cases = [                          # (s, causal, zigzag, overlap)
        (4 * n, True, True, True),     # 2n chunks of 2
        (4 * n, True, False, True),
        (3 * n + 1, True, False, False),   # uneven slices, no overlap
        (n + 1, True, True, True),     # zig-zag with empty chunks
        (5 * n - 1, False, True, True),
        (2 * n + 1, False, False, True),
    ]
    for seed, (s, causal, zigzag, overlap) in enumerate(cases):
        results = cluster.run(R.ring_case, B, A, s, D, causal, zigzag, seed, overlap)
        chunks = R.layout(s, n, zigzag)
        full = _full(A, s, causal, seed)
        _assert_equal_to_full(results, full, chunks)
        assert [r["work"] for r in results] == R.ring_work(s, n, zigzag, causal)
        forward = R.ring_bytes(s, n, B, A, D, 8, zigzag)
        backward = R.ring_bytes(s, n, B, A, D, 8, zigzag, backward=True)
        assert [r["sent"] for r in results] == list(zip(forward, backward))
        for r in results:
            _assert_steps(r["steps"], r["rank"], chunks, full["scores"])


def test_ulysses_equals_full_attention_and_its_bytes(cluster):
    n = cluster.world_size
    for seed, (a, s, causal) in enumerate([(2 * n, 4 * n, True), (n + 1, 2 * n + 1, True),
                                           (n, 3 * n - 1, False)]):
        results = cluster.run(U.ulysses_case, B, a, s, D, causal, seed)
        _assert_equal_to_full(results, _full(a, s, causal, seed), R.layout(s, n))
        assert [r["sent"][0] for r in results] == pytest.approx(U.ulysses_bytes(s, n, B, a, D, 8))
        assert [r["sent"][1] for r in results] == pytest.approx(
            U.ulysses_bytes(s, n, B, a, D, 8, backward=True))
    # equal slices and heads: ring's forward sends n/2 times Ulysses's
    ring = R.ring_bytes(4 * n, n, B, 2 * n, D, 8)
    assert [r / u for r, u in zip(ring, U.ulysses_bytes(4 * n, n, B, 2 * n, D, 8))] \
        == pytest.approx([n / 2] * n)
    with pytest.raises(Exception, match="more than heads"):
        cluster.run(U.ulysses_case, B, n - 1, 2 * n, D)


def test_work_per_rank_with_and_without_zigzag():
    assert R.layout(7, 3) == [[(0, 3)], [(3, 5)], [(5, 7)]]
    assert R.layout(8, 2, zigzag=True) == [[(0, 2), (6, 8)], [(2, 4), (4, 6)]]
    assert R.layout(3, 2, zigzag=True) == [[(0, 1)], [(1, 2), (2, 3)]]
    x = torch.arange(2 * 11.0).view(1, 2, 11, 1)
    chunks = R.layout(11, 3, zigzag=True)
    assert torch.equal(R.place([R.take(x, c) for c in chunks], chunks), x)
    for n in (1, 2, 3, 5, 8):
        c, h = 6, 3                                # s = n·c = 2n·h
        s = n * c
        assert R.ring_work(s, n) == [(r + 1) * c * c for r in range(n)]
        assert R.ring_work(s, n, zigzag=True) == [(2 * n + 1) * h * h] * n
        assert R.ring_work(s, n, causal=False) == R.ring_work(s, n, True, False) == [s * c] * n
        assert R.balance_ratio(s, n) == pytest.approx((2 * n + 1) / (4 * n))
        for zigzag in (False, True):          # every unmasked score, and no tile twice
            assert s * (s + 1) // 2 <= sum(R.ring_work(s, n, zigzag)) <= s * s
    assert R.balance_ratio(2 * 64 * 4, 64) == pytest.approx(0.5, abs=0.005)
    assert R.balance_ratio(2 * 64 * 4 + 5, 64) == pytest.approx(0.5, abs=0.02)   # uneven
    assert R.ring_bytes(9, 1, 2, 2, 2) == [0] and U.ulysses_bytes(9, 1, 2, 2, 2) == [0.0]
    # rank r forwards every block but rank r + 1's: uneven slices of 3, 2, 2
    assert R.ring_bytes(7, 3, 1, 1, 1, 1) == [2 * (7 - 2), 2 * (7 - 2), 2 * (7 - 3)]
