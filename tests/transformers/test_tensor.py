"""Tensor parallelism of the GPT on real workers (lesson 12): the block split by heads and the
MLP column then row, the vocabulary split for the embedding, the tied head and the
cross-entropy — equal to one process, bytes equal to the formula; beside torch's own
``parallelize_module``."""
import pytest
import torch
import torch.nn.functional as F

from ddl_lab.ml.gpt import GPTConfig, build_gpt
from ddl_lab.runtime import shared_cluster
from ddl_lab.transformers import tensor as T
from ddl_lab.transformers import vocab as V

CFG = GPTConfig(vocab=41, seq=16, hidden=32, heads=4, layers=2)    # 41: uneven vocab slices


@pytest.fixture(scope="module")
def clusters():
    return {n: shared_cluster(n) for n in (2, 4)}


@pytest.mark.parametrize("n", [2, 4])
def test_tp_gpt_equals_one_process_and_sends_what_the_formula_says(clusters, n):
    for dtype, tol in ((torch.float32, dict(rtol=1e-4, atol=1e-6)),
                       (torch.float64, dict(rtol=1e-10, atol=1e-12))):
        runs = clusters[n].run(T.tp_step, CFG, 3, seed=n, dtype=dtype)
        ref = T.one_process(CFG, 3, seed=n, dtype=dtype)
        assert T.differences(runs, ref, **tol) == []
        want = T.tp_bytes(CFG, 3, n, dtype)
        for run in runs:
            assert {p: run[p] for p in ("forward", "backward")} == want
    act = 3 * 16 * 32 * 8                     # one (b, s, h) activation in float64
    ar = 2 * (n - 1) / n
    assert want == {"forward": {"all_reduce": ar * (5 * act + 3 * 3 * 16 * 8)},
                    "backward": {"all_reduce": ar * 5 * act}}
    pieces = [r["grads"]["tok.weight"].shape[0] for r in runs]     # uneven vocab slices
    assert sum(pieces) == 41 and max(pieces) - min(pieces) == 1
    assert runs[0]["grads"]["blocks.0.attn.qkv.weight"].shape == (3 * 32 // n, 32)
    # the layout is what is checked: Q, K, V's rows cut as one block would be wrong
    name = "blocks.1.attn.qkv.weight"
    naive = [{**r, "grads": {**r["grads"], name: piece}}
             for r, piece in zip(runs, ref["grads"][name].chunk(n))]
    found = T.differences(naive, ref)
    assert len(found) == 1 and found[0].startswith(f"{name} (whole): off by")


def _vocab_loss(logits: torch.Tensor, targets: torch.Tensor) -> dict:
    """Worker: this rank's slice of ``logits`` through the vocabulary-parallel loss."""
    import torch.distributed as dist
    start, end = V.vocab_range(logits.shape[-1], dist.get_rank(), dist.get_world_size())
    mine = logits[..., start:end].clone().requires_grad_()
    loss = V._vocab_parallel_cross_entropy(mine, targets, start)
    loss.backward()
    return {"loss": loss.detach(), "grad": mine.grad}


def test_vocab_parallel_cross_entropy_and_its_gradient(clusters):
    g = torch.Generator().manual_seed(7)
    for scale in (1.0, 1e4):                 # 1e4: e^z overflows unless the max is global
        logits = torch.randn(2, 5, 11, generator=g, dtype=torch.float64) * scale
        logits[0, 0, 10] += 30 * scale       # one id far above the rest, on the last rank
        targets = torch.randint(11, (2, 5), generator=g)
        whole = logits.clone().requires_grad_()
        want = F.cross_entropy(whole.reshape(-1, 11), targets.reshape(-1))
        want.backward()
        for n in (2, 4):
            out = clusters[n].run(_vocab_loss, logits, targets)
            for o in out:
                assert torch.isfinite(o["loss"]) and torch.allclose(o["loss"], want.detach())
            assert torch.allclose(torch.cat([o["grad"] for o in out], -1), whole.grad)
    assert [V.vocab_range(11, r, 4) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 11)]
    emb = V.VocabParallelEmbedding(torch.nn.Embedding(11, 3), 1, 4)
    got = emb.partial(torch.tensor([[2, 3, 4, 6]]))
    assert (got[0, 0] == 0).all() and (got[0, 3] == 0).all()
    assert torch.equal(got[0, 1:3], emb.weight[:2].detach())


def test_heads_must_divide_by_the_ranks():
    model = build_gpt(CFG)
    with pytest.raises(ValueError, match=r"heads \(4\) must divide by n \(3\)"):
        T.tp_block(model.blocks[0], 0, 3)
    with pytest.raises(ValueError, match=r"heads \(4\) must divide by n \(8\)"):
        T.tp_gpt(model, 0, 8)


def test_torch_parallelize_module_gives_the_same_loss_and_gradients(clusters):
    for sequence in (False, True):
        lib = clusters[2].run(T.library_step, CFG, 3, seed=5, sequence=sequence)
        hand = clusters[2].run(T.tp_step, CFG, 3, seed=5, sequence=sequence)
        assert lib[0]["loss"] == pytest.approx(hand[0]["loss"], rel=1e-6)
        ref = T.one_process(CFG, 3, seed=5)
        assert T.differences(lib, ref, sharded=False) == [], f"sequence={sequence}"
