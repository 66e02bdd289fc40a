"""check.ring_attention and check.vocab_cross_entropy pass right answers written in several
styles and name the mistakes learners make (lesson 12, tasks 1 and 2). The functions are
module-level so that they pickle to the workers."""
import math

import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.transformers.ring import _ring_attention
from ddl_lab.transformers.vocab import _vocab_parallel_cross_entropy


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ---------------------------------------------------------------- ring attention

def _lengths(q):
    n = dist.get_world_size()
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(n)]
    dist.all_gather(sizes, torch.tensor([q.shape[2]]))
    return [int(x) for x in sizes]


def ring(q, k, v, causal, rescale=True, step_to=1, forward_received=True, local_mask=False,
         merge_again=False):
    """A ring attention with a learner's mistake switched on by each flag."""
    rank, n = dist.get_rank(), dist.get_world_size()
    sizes = _lengths(q)
    starts = [sum(sizes[:j]) for j in range(n)]
    m = torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
    z, o = torch.zeros(q.shape[:-1], dtype=q.dtype), torch.zeros_like(q)
    kv = torch.stack([k, v])

    def merge(kv, owner):
        nonlocal m, z, o
        s = q @ kv[0].transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            qpos = torch.arange(sizes[rank]) + (0 if local_mask else starts[rank])
            kpos = torch.arange(sizes[owner]) + (0 if local_mask else starts[owner])
            s = s.masked_fill(kpos[None, :] > qpos[:, None], -math.inf)
        m_new = torch.maximum(m, s.amax(-1))
        alpha = torch.exp(m - m_new) if rescale else torch.ones_like(m)
        p = torch.exp(s - m_new[..., None])
        z, o, m = alpha * z + p.sum(-1), alpha[..., None] * o + p @ kv[1], m_new

    own = kv
    for t in range(n):
        owner = (rank - t) % n
        merge(kv, owner)
        if t < n - 1:
            src = (rank - step_to) % n
            got = kv.new_empty(kv.shape[:3] + (sizes[(owner - step_to) % n], kv.shape[-1]))
            reqs = [dist.isend(kv if forward_received else own, (rank + step_to) % n),
                    dist.irecv(got, src)]
            for r in reqs:
                r.wait()
            kv = got
    if merge_again:
        merge(kv, (rank + 1) % n)
    return o / z[..., None]


def ring_blocking_lse(q, k, v, causal):
    """Another right style: blocking send/recv (even ranks send first), K and V as two
    messages, each block's normalized output and log-sum-exp merged."""
    rank, n = dist.get_rank(), dist.get_world_size()
    sizes = _lengths(q)
    start = [sum(sizes[:j]) for j in range(n)]
    out, lse = None, None
    for t in range(n):
        owner = (rank - t) % n
        s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
        if causal:
            qi = torch.arange(start[rank], start[rank] + sizes[rank])[:, None]
            kj = torch.arange(start[owner], start[owner] + sizes[owner])[None, :]
            s = torch.where(kj > qi, torch.tensor(-math.inf, dtype=s.dtype), s)
        block_lse = torch.logsumexp(s, -1)
        if not torch.isinf(block_lse).all():
            block_out = torch.softmax(s, -1).nan_to_num() @ v
            if out is None:
                out, lse = block_out, block_lse
            else:
                new = torch.logaddexp(lse, block_lse)
                out = (torch.exp(lse - new)[..., None] * out
                       + torch.exp(block_lse - new).nan_to_num()[..., None] * block_out)
                lse = new
        if t == n - 1:
            break
        size = sizes[(owner - 1) % n]
        nk, nv = (k.new_empty(k.shape[:2] + (size, k.shape[-1])) for _ in range(2))
        for x, y in ((k, nk), (v, nv)):
            if rank % 2 == 0:
                dist.send(x.contiguous(), (rank + 1) % n)
                dist.recv(y, (rank - 1) % n)
            else:
                dist.recv(y, (rank - 1) % n)
                dist.send(x.contiguous(), (rank + 1) % n)
        k, v = nk, nv
    return out


def no_rescale(q, k, v, causal):
    return ring(q, k, v, causal, rescale=False)


def wrong_neighbour(q, k, v, causal):
    return ring(q, k, v, causal, step_to=-1)


def local_mask(q, k, v, causal):
    return ring(q, k, v, causal, local_mask=True)


def not_forwarded(q, k, v, causal):
    return ring(q, k, v, causal, forward_received=False)


def kept_twice(q, k, v, causal):
    return ring(q, k, v, causal, merge_again=True)


def gathered(q, k, v, causal):
    from ddl_lab.ml.gpt import attention
    sizes = _lengths(q)
    ks = [k.new_zeros(k.shape[:2] + (s, k.shape[-1])) for s in sizes]
    vs = [v.new_zeros(v.shape[:2] + (s, v.shape[-1])) for s in sizes]
    dist.all_gather(ks, k.contiguous())
    dist.all_gather(vs, v.contiguous())
    rank, before = dist.get_rank(), sum(sizes[:dist.get_rank()])
    whole = torch.cat([x for x in ks], 2), torch.cat(vs, 2)
    return attention(q, *whole, causal=False)[..., :, :] if not causal else \
        attention(torch.cat([q.new_zeros(q.shape[:2] + (before, q.shape[-1])), q], 2),
                  whole[0][..., : before + sizes[rank], :], whole[1][..., : before + sizes[rank], :],
                  causal)[..., before:, :]


def borrowed(q, k, v, causal):
    return _ring_attention(q, k, v, sum(_lengths(q)), causal)


def test_ring_attention(capsys):
    check.ring_attention(ring_blocking_lse)
    assert capsys.readouterr().out.count("✔ ring_attention: passed") == 1
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.ring_attention(stub)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.ring_attention(borrowed)


@pytest.mark.parametrize("wrong, fault", [
    (no_rescale, r"rank \d of \d: element .* per-block softmax without rescaling.*exp\(m − m′\)"),
    (wrong_neighbour, r"a message off the ring — rank \d sent \d+ bytes to rank \d, not to the "
     r"next rank"),
    (local_mask, r"causal mask on local positions.*global position"),
    (not_forwarded, r"K/V not forwarded: every rank passed on its own block"),
    (kept_twice, r"a block kept twice: rank \d's K/V block was merged two times"),
    (gathered, r"called dist.all_gather on \d+ bytes: that collective gathers K or V"),
])
def test_ring_attention_names_the_mistake(wrong, fault):
    with pytest.raises(CheckFailed, match=fault) as first:
        check.ring_attention(wrong)
    if wrong is no_rescale:                             # the same verdict every run
        with pytest.raises(CheckFailed) as again:
            check.ring_attention(wrong)
        assert str(again.value) == str(first.value)


# ---------------------------------------------------------------- vocabulary-parallel CE

def vocab_ce(logits, targets, start, local_max=False, local_sum=False, everywhere=False,
             no_max=False, reduce=torch.mean):
    """A vocabulary-parallel cross-entropy with a learner's mistake switched on by each flag."""
    top = logits.max(1).values
    if not local_max:
        dist.all_reduce(top, op=dist.ReduceOp.MAX)
    if no_max:
        top = torch.zeros_like(top)
    sums = (logits - top[:, None]).exp().sum(1)
    if not local_sum:
        dist.all_reduce(sums)
    idx = (targets - start).clamp(0, logits.shape[1] - 1)
    picked = logits.gather(1, idx[:, None]).squeeze(1)
    if not everywhere:
        picked = picked * ((targets >= start) & (targets < start + logits.shape[1]))
    dist.all_reduce(picked)
    return reduce(top + sums.log() - picked)


def vocab_gathered_maxes(logits, targets, start):
    """Another right style: the maxes all-gathered (N numbers a rank), float64, logsumexp."""
    z = logits.double()
    maxes = [torch.zeros(len(z), dtype=z.dtype) for _ in range(dist.get_world_size())]
    dist.all_gather(maxes, z.max(1).values)
    top = torch.stack(maxes).max(0).values
    total = torch.exp(torch.logsumexp(z - top[:, None], 1))
    dist.all_reduce(total)
    target = torch.zeros_like(top)
    for row, t in enumerate(targets.tolist()):
        if start <= t < start + z.shape[1]:
            target[row] = z[row, t - start]
    dist.all_reduce(target)
    return float((top + total.log() - target).mean())


def local_max(logits, targets, start):
    return vocab_ce(logits, targets, start, local_max=True)


def local_sum(logits, targets, start):
    return vocab_ce(logits, targets, start, local_sum=True)


def target_everywhere(logits, targets, start):
    return vocab_ce(logits, targets, start, everywhere=True)


def no_max(logits, targets, start):
    return vocab_ce(logits, targets, start, no_max=True)


def summed(logits, targets, start):
    return vocab_ce(logits, targets, start, reduce=torch.sum)


def full_logits(logits, targets, start):
    import torch.nn.functional as F
    parts = [torch.zeros(len(logits), w, dtype=logits.dtype) for w in
             _widths(logits.shape[1])]
    dist.all_gather(parts, logits)
    return F.cross_entropy(torch.cat(parts, 1), targets)


def _widths(mine):
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([mine]))
    return [int(x) for x in sizes]


def in_place(logits, targets, start):
    top = logits.max(1).values
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    logits -= top[:, None]
    return vocab_ce(logits, targets, start) + top.mean()


def vocab_borrowed(logits, targets, start):
    return _vocab_parallel_cross_entropy(logits, targets, start)


def test_vocab_cross_entropy(capsys):
    check.vocab_cross_entropy(vocab_gathered_maxes)
    check.vocab_cross_entropy(vocab_ce)
    assert capsys.readouterr().out.count("✔ vocab_cross_entropy: passed") == 2
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check.vocab_cross_entropy(stub)
    with pytest.raises(CheckFailed, match="package's own implementation"):
        check.vocab_cross_entropy(vocab_borrowed)


@pytest.mark.parametrize("wrong, fault", [
    (local_max, r"rank \d of \d returned .* expected .* — a local max"),
    (local_sum, r"a local sum: the sum of exponentials covers only this rank's slice"),
    (target_everywhere, r"the target looked up on every rank"),
    (no_max, r"e\^z overflowed.*ReduceOp.MAX"),
    (summed, r"the sum of the rows' losses"),
    (full_logits, r"the logits left their rank"),
    (in_place, r"changed its logits in place on rank \d"),
])
def test_vocab_cross_entropy_names_the_mistake(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.vocab_cross_entropy(wrong)


def sized_as_mine(q, k, v, causal):
    """Every receive sized like this rank's own slice: wrong once n does not divide s."""
    rank, n = dist.get_rank(), dist.get_world_size()
    kv, out, m, z = torch.stack([k, v]), torch.zeros_like(q), None, None
    for t in range(n):
        s = q @ kv[0].transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:                                  # slices assumed all this long
            mine, theirs = (torch.arange(q.shape[2]) + j * q.shape[2] for j in (rank, (rank - t) % n))
            s = s.masked_fill(theirs[None, :] > mine[:, None], -math.inf)
        m_new = s.amax(-1) if m is None else torch.maximum(m, s.amax(-1))
        p = torch.exp(s - m_new[..., None])
        scale = torch.zeros_like(m_new) if m is None else torch.exp(m - m_new)
        z = p.sum(-1) + (0 if m is None else scale * z)
        out, m = scale[..., None] * out + p @ kv[1], m_new
        if t < n - 1:
            got = torch.empty_like(kv)
            reqs = [dist.isend(kv, (rank + 1) % n), dist.irecv(got, (rank - 1) % n)]
            for r in reqs:
                r.wait()
            kv = got
    return out / z[..., None]


def test_ring_attention_names_a_receive_of_the_wrong_length():
    """Right on the even cases, then a crash on the uneven one, named."""
    with pytest.raises(CheckFailed, match=r"receive buffer of another length: with s = 10 on 4 "
                       r"ranks the first 2 slices are one position longer.*case 2"):
        check.ring_attention(sized_as_mine)
