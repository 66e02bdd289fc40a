"""A transformer layer's activation memory (lesson 12, transformers): counted with saved-tensor
hooks against Korthikanti et al.'s formula with this block's constants, for fp32 and bf16,
with and without dropout, without, with selective and with full recomputation."""
import pytest
import torch

from ddl_lab.ml.gpt import GPT, GPTConfig
from ddl_lab.transformers import memory as M
from tests.ml.test_gpt import one_thread  # noqa: F401 (autouse: one torch thread)


@pytest.fixture(scope="module")
def table():
    return M.activation_table()


def test_the_constants_give_the_paper_s_formula_at_16_bits_with_dropout():
    assert M.constants(torch.bfloat16, True) == (34, 5)
    assert M.constants(torch.float16, True) == (34, 5)
    assert M.constants(torch.bfloat16, False) == (32, 2)
    assert M.constants(torch.float32, False) == (64, 4)
    assert M.constants(torch.float32, True) == (66, 9)
    for s, b, h, a in [(128, 4, 256, 8), (2048, 1, 4096, 32)]:
        assert M.formula(s, b, h, a) == pytest.approx(M.korthikanti(s, b, h, a))
        assert M.formula(s, b, h, a, recompute="selective") == 34 * s * b * h
        assert M.formula(s, b, h, a, torch.float32, recompute="full") == 4 * s * b * h


def test_every_row_is_within_ten_percent_of_the_formula(table):
    assert len(table) == 9 * 2 * 2 * 3
    assert {(r.dtype, r.dropout, r.recompute) for r in table} == {
        (d, p, r) for d in ("fp32", "bf16") for p in (0.0, 0.1) for r in M.RECOMPUTE}
    off = [(r, f"{r.ratio:.3f}") for r in table if not 0.9 <= r.ratio <= 1.1]
    assert not off, off
    # what the formula leaves out is the LayerNorms' mean and 1/σ per token: 4·e·s·b bytes
    for r in table:
        e = 4 if r.dtype == "fp32" else 2
        assert r.measured - r.formula == 4 * e * r.s * r.b * (r.recompute != "full"), r


def test_the_attention_term_grows_with_the_square_of_s_unless_recomputed(table):
    by = {(r.s, r.b, r.h, r.a, r.dtype, r.dropout, r.recompute): r.measured for r in table}
    for rc in M.RECOMPUTE:
        grow = by[128, 2, 64, 4, "fp32", 0.0, rc] / by[64, 2, 64, 4, "fp32", 0.0, rc]
        assert grow > 2.3 if rc == "none" else grow == pytest.approx(2.0, rel=0.01)
        more_heads = by[64, 2, 64, 8, "fp32", 0.0, rc] - by[64, 2, 64, 4, "fp32", 0.0, rc]
        assert more_heads == (4 * 64 * 64 * 2 * 4 if rc == "none" else 0)   # 4 more a·s²·b·e
    assert by[64, 2, 64, 4, "bf16", 0.0, "none"] * 2 == pytest.approx(
        by[64, 2, 64, 4, "fp32", 0.0, "none"], rel=0.02)


def test_recomputation_changes_memory_not_gradients():
    cfg = GPTConfig(vocab=2, seq=24, hidden=32, heads=4, layers=1, dropout=0.2)
    grads = {}
    for rc in M.RECOMPUTE:
        block = GPT(cfg, seed=3).blocks[0]
        x = torch.randn(2, 24, 32, generator=torch.Generator().manual_seed(1),
                        requires_grad=True)
        torch.manual_seed(7)                      # the same dropout masks in every setting
        M.block_forward(block, x, rc, M.Saved()).square().sum().backward()
        grads[rc] = [x.grad] + [p.grad for p in block.parameters()]
        assert "core" not in vars(block.attn)     # the block is left as it was
    for rc in ("selective", "full"):
        for g, want in zip(grads[rc], grads["none"]):
            torch.testing.assert_close(g, want)


def test_a_model_keeps_one_layer_s_bytes_per_layer():
    def kept(layers: int) -> int:
        model = GPT(GPTConfig(vocab=50, seq=32, hidden=32, heads=4, layers=layers))
        saved = M.Saved()
        with saved.recording():
            model(torch.randint(0, 50, (2, 32)))
        return saved.total
    layer = M.measure_row(32, 2, 32, 4).measured
    assert kept(3) - kept(1) == 2 * layer


def test_saved_counts_a_storage_once_and_no_parameters():
    w = torch.nn.Parameter(torch.ones(4, 4))
    base = torch.randn(2, 8, requires_grad=True) * 1.0         # one storage, two views
    saved = M.Saved()
    with saved.recording():
        (base[:, :4] * base[:, 4:]).sum() + (base[:, :4] @ w).sum()
    assert saved.total == 2 * 8 * 4 and len(saved.kept) == 1
    with pytest.raises(ValueError, match="recompute is one of"):
        M.block_forward(GPT(GPTConfig(vocab=2, seq=4)).blocks[0], torch.ones(1, 4, 64), "some",
                        M.Saved())
