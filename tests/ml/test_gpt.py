"""The small GPT and its corpus (lesson 12, transformers): shapes, causality, the tied head,
weights by seed, sampling, and the standard-library text read on this machine."""
import math
import sysconfig
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ddl_lab.ml import gpt as G
from ddl_lab.ml import text as T

CFG = G.GPTConfig(vocab=T.VOCAB, seq=16, hidden=32, heads=4, layers=2)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One torch thread, as on the workers (two threads on a loaded 2-core machine crawl)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _idx(b: int, s: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, CFG.vocab, (b, s), generator=torch.Generator().manual_seed(seed))


def test_config_is_checked():
    with pytest.raises(ValueError, match="multiple of heads"):
        G.GPTConfig(vocab=10, seq=4, hidden=30, heads=4)
    with pytest.raises(ValueError, match="layers must be"):
        G.GPTConfig(vocab=10, seq=4, layers=0)
    with pytest.raises(ValueError, match="dropout"):
        G.GPTConfig(vocab=10, seq=4, dropout=1.0)
    assert CFG.head_dim == 8


def test_shapes_and_names():
    model = G.GPT(CFG)
    assert model(_idx(3, 16)).shape == (3, 16, CFG.vocab)
    assert model(_idx(2, 5)).shape == (2, 5, CFG.vocab)
    with pytest.raises(ValueError, match="holds 16"):
        model(_idx(1, 17))
    names = {n for n, _ in model.named_parameters()}
    assert {"tok.weight", "pos.weight", "ln_f.weight", "blocks.1.attn.qkv.weight",
            "blocks.0.attn.proj.bias", "blocks.0.mlp.fc.weight", "blocks.1.mlp.proj.weight",
            "blocks.0.ln1.bias", "blocks.0.ln2.weight"} <= names
    assert model.blocks[0].attn.qkv.weight.shape == (3 * 32, 32)
    assert model.blocks[0].mlp.fc.weight.shape == (4 * 32, 32)


def test_head_is_tied_to_the_token_embedding():
    model = G.GPT(CFG)
    h, v, s, L = CFG.hidden, CFG.vocab, CFG.seq, CFG.layers
    per_block = 4 * h + (3 * h * h + 3 * h) + (h * h + h) + (4 * h * h + 4 * h) + (4 * h * h + h)
    assert sum(p.numel() for p in model.parameters()) == v * h + s * h + L * per_block + 2 * h
    idx = _idx(2, 8)
    x = model.embed(idx)
    for block in model.blocks:
        x = block(x)
    want = model.ln_f(x) @ model.tok.weight.T
    torch.testing.assert_close(model(idx), want)
    model(idx).sum().backward()
    unused = set(range(v)) - set(idx.flatten().tolist())        # rows reached only by the head
    assert model.tok.weight.grad[sorted(unused)].abs().sum() > 0


def test_attention_core_is_softmax_attention():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 7, 5, generator=g) for _ in range(3))
    for causal in (True, False):
        torch.testing.assert_close(G.attention(q, k, v, causal=causal),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    last = G.attention(q[:, :, -2:], k, v)                 # queries are the last positions
    torch.testing.assert_close(last, G.attention(q, k, v)[:, :, -2:])
    assert G.causal_bias(2, 3).tolist() == [[0, 0, -math.inf], [0, 0, 0]]


def test_changing_a_later_token_never_changes_earlier_logits():
    model = G.GPT(CFG, seed=2)
    idx = _idx(2, 16, seed=3)
    base = model(idx)
    for t in (0, 7, 15):
        other = idx.clone()
        other[:, t] = (other[:, t] + 1) % CFG.vocab
        out = model(other)
        assert torch.equal(out[:, :t], base[:, :t])
        assert (out[:, t:] - base[:, t:]).abs().amax() > 1e-4   # and it does change the rest


def test_weights_come_from_the_seed_alone():
    state = torch.get_rng_state()
    a, b, c = G.GPT(CFG, seed=5), G.build_gpt(CFG, 5), G.GPT(CFG, seed=6)
    assert torch.equal(torch.get_rng_state(), state)            # the global RNG is untouched
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q), name
        if name.endswith("weight") and p.dim() == 2:
            assert not torch.equal(p, r), name
    assert a.blocks[0].ln1.weight.eq(1).all() and a.blocks[0].attn.qkv.bias.eq(0).all()
    ratio = (a.blocks[0].mlp.fc.weight.std() / a.blocks[0].mlp.proj.weight.std()).item()
    assert ratio == pytest.approx(math.sqrt(2 * CFG.layers), rel=0.15)


def test_loss_starts_near_uniform_and_is_cross_entropy():
    model = G.GPT(CFG)
    idx, tgt = _idx(4, 16), _idx(4, 16, seed=9)
    logits = model(idx)
    loss = G.lm_loss(logits, tgt)
    assert loss.item() == pytest.approx(F.cross_entropy(logits.transpose(1, 2), tgt).item())
    assert loss.item() == pytest.approx(math.log(CFG.vocab), abs=0.1)


def test_dropout_only_in_training():
    model = G.GPT(G.GPTConfig(vocab=11, seq=8, hidden=16, heads=2, dropout=0.3))
    idx = torch.arange(8).reshape(1, 8) % 11
    assert not torch.equal(model(idx), model(idx))
    model.eval()
    assert torch.equal(model(idx), model(idx))


def test_sample_is_seeded_and_greedy_at_zero_temperature():
    model = G.GPT(CFG, seed=1)
    prompt = T.encode("def ")
    a, b = G.sample(model, prompt, 30, seed=4), G.sample(model, prompt, 30, seed=4)
    assert torch.equal(a, b) and a.shape == (34,) and torch.equal(a[:4], prompt)
    assert not torch.equal(a, G.sample(model, prompt, 30, seed=5))
    greedy = G.sample(model, prompt, 3, temperature=0)
    assert greedy[4] == model(prompt[None])[0, -1].argmax()
    assert model.training                                   # mode restored


def test_corpus_is_this_machines_standard_library():
    c = T.corpus()
    root = Path(sysconfig.get_paths()["stdlib"])
    assert [Path(f).parent for f in c.files] == [root] * len(c.files) and len(c.files) >= 15
    first = Path(c.files[0]).read_text(encoding="utf-8")
    assert T.decode(c.train[:200]) == first[:200]
    assert 200_000 < len(c.train) + len(c.val) < 1_000_000
    assert len(c.val) == pytest.approx(0.1 * (len(c.train) + len(c.val)), abs=1)
    again = T.corpus.__wrapped__()                           # read again: the same text
    assert torch.equal(again.train, c.train) and torch.equal(again.val, c.val)


def test_vocabulary_and_unknowns():
    assert T.VOCAB == 97 and T.decode(T.encode("a\nZ~ ")) == "a\nZ~ "
    assert T.encode("\té").tolist() == [T.UNK, T.UNK] and T.decode(T.encode("é")) == "\ufffd"


def test_batches_are_seeded_windows_of_the_split():
    a, b, c = (T.batches(s, 3, 10) for s in (7, 7, 8))
    (xa, ya), (xb, yb), (xc, _) = next(a), next(b), next(c)
    assert xa.shape == ya.shape == (3, 10) and torch.equal(xa, xb) and torch.equal(ya, yb)
    assert not torch.equal(xa, xc)
    assert torch.equal(xa[:, 1:], ya[:, :-1])                # targets: the next character
    data = T.corpus().train
    start = (data.unfold(0, 10, 1) == xa[0]).all(1).nonzero()[0, 0]
    assert data[start + 10] == ya[0, -1]
    xv, yv = T.corpus().windows(4, 10)
    assert torch.equal(xv[0], T.corpus().val[:10]) and yv.shape == (4, 10)
    with pytest.raises(ValueError, match="split"):
        next(T.batches(0, 1, 4, split="test"))


def test_unigram_loss_is_the_frequency_model():
    c = T.corpus()
    counts = torch.bincount(c.train, minlength=T.VOCAB).double() + 1
    p = counts / counts.sum()
    want = -(torch.bincount(c.val, minlength=T.VOCAB).double() * p.log()).sum() / len(c.val)
    assert T.unigram_loss() == pytest.approx(want.item())
    assert 2.0 < T.unigram_loss() < math.log(T.VOCAB)


def test_drop_zeroes_a_fraction_and_keeps_the_mean():
    x = torch.ones(20_000)
    assert G.drop(x, 0.25, training=False) is x and G.drop(x, 0.0) is x
    torch.manual_seed(0)
    y = G.drop(x, 0.25)
    assert (y == 0).float().mean().item() == pytest.approx(0.25, abs=0.02)
    assert y.unique().tolist() == pytest.approx([0.0, 4 / 3])
