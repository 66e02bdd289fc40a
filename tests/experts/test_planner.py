"""The planner (lesson 14, experts): its accounting agrees with its sources — the ZeRO paper's
Figure 1, Llama 3 8B's parameter count, lesson 12's tensor-parallel bytes and activation
formula (themselves equal to what the wiretap and the saved-tensor hooks measure) — and its
search lists only layouts the libraries accept, fastest first among those that fit."""
import pytest
import torch

from ddl_lab.experts import planner as P
from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.transformers.memory import formula
from ddl_lab.transformers.tensor import tp_bytes

SMALL = GPTConfig(vocab=41, seq=16, hidden=32, heads=4, layers=2)     # lesson 12's tests'
A100 = dict(memory=80e9, flop_s=312e12 * 0.4)


def _small(e: int, dropout: bool = False) -> P.Model:
    return P.Model(layers=SMALL.layers, hidden=SMALL.hidden, heads=SMALL.heads, seq=SMALL.seq,
                   vocab=SMALL.vocab, tied=True, e=e, dropout=dropout)


def test_model_states_are_the_zero_paper_s_figure_1():
    """Ψ = 7.5 B on 64 devices: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB (Rajbhandari et al. 2020)."""
    assert P.zero_paper_check() == pytest.approx([120, 31.4, 16.6, 1.9], abs=0.05)


def test_fp32_keeps_4_4_and_8_bytes_a_parameter():
    """The course's runs: fp32 weights and gradients, Adam's two moments, no master copy."""
    m = _small(4)
    got = P.predict(m, 4, P.Cluster(4, 1e12, 1e9), P.Layout(dp=4, zero=1)).memory
    psi = m.params()
    assert (got["weights"], got["gradients"], got["optimizer"]) == (4 * psi, 4 * psi, 2 * psi)


def test_llama_3_8b_has_its_8_03_billion_parameters():
    assert P.LLAMA3_8B.params() / 1e9 == pytest.approx(8.03, abs=0.005)
    assert P.LLAMA3_8B.active_params() == P.LLAMA3_8B.params()       # dense: every one used


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tensor_parallel_bytes_are_lesson_12_s(n, dtype):
    e = torch.empty((), dtype=dtype).element_size()
    got = P.predict(_small(e), 3, P.Cluster(n, 1e12, 1e9), P.Layout(tp=n, micro=3, sp=False))
    want = sum(v for phase in tp_bytes(SMALL, 3, n, dtype).values() for v in phase.values())
    assert got.bytes["tp"] == pytest.approx(want, rel=1e-12)
    with_sp = P.predict(_small(e), 3, P.Cluster(n, 1e12, 1e9), P.Layout(tp=n, micro=3))
    assert with_sp.bytes["tp"] == got.bytes["tp"]        # sequence parallelism: free in bytes


@pytest.mark.parametrize("recompute", P.RECOMPUTE)
@pytest.mark.parametrize("dropout", [False, True])
def test_activations_are_lesson_12_s_formula_cut_by_t(recompute, dropout):
    for dtype in (torch.float32, torch.bfloat16):
        e = torch.empty((), dtype=dtype).element_size()
        one = formula(16, 3, 32, 4, dtype, dropout, recompute)
        for t, sp in ((1, True), (2, True), (4, True)):
            lay = P.Layout(tp=t, micro=3, sp=sp, recompute=recompute)
            got = P.predict(_small(e, dropout), 3, P.Cluster(t, 1e12, 1e9), lay)
            assert got.memory["activations"] == pytest.approx(2 * one / t, rel=1e-12)


def test_without_sequence_parallelism_the_paper_s_equation_2():
    """Korthikanti et al. 2022, eq. 2: sbh(10 + 24/t + 5as/(ht)) at 16 bits with dropout."""
    s, b, h, a, t = 16, 3, 32, 4, 2
    got = P.predict(_small(2, dropout=True), 3, P.Cluster(t, 1e12, 1e9),
                    P.Layout(tp=t, micro=3, sp=False))
    assert got.memory["activations"] == pytest.approx(
        2 * s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))


def test_the_pipeline_bubble_and_1f1b_s_activations():
    m, c = P.LLAMA3_8B, P.Cluster(8, **A100)
    for micro_batches in (4, 8, 32):
        q = P.predict(m, micro_batches, c, P.Layout(pp=8, micro=1))
        assert q.seconds["bubble"] == pytest.approx(q.seconds["compute"] * 7 / micro_batches)
    flat = P.predict(m, 32, c, P.Layout(pp=1, dp=8, micro=1))
    piped = P.predict(m, 32, c, P.Layout(pp=8, micro=1))
    # 1F1B: the first stage keeps 8 micro-batches of its 4 layers, all 32 layers' worth
    assert piped.memory["activations"] == pytest.approx(flat.memory["activations"])


def test_the_libraries_refusals_are_not_listed():
    lays = P.layouts(P.LLAMA3_8B, 64, 64)
    assert lays and all(not (lay.pp > 1 and lay.zero >= 2) for lay in lays)
    assert {lay.tp for lay in lays} <= {1, 2, 4, 8}                  # 8 key/value heads
    assert all(lay.devices == 64 for lay in lays)


@pytest.mark.parametrize("devices", [8, 64, 512])
def test_llama_3_8b_plans_fit_where_plain_data_parallelism_cannot(devices):
    c = P.Cluster(devices, **A100)
    batch = max(devices, 64)
    ranked = P.plan(P.LLAMA3_8B, batch, c, max_micro=2)
    best = ranked[0]
    assert best.fits and best.peak <= 80e9
    assert [q.seconds["total"] for q in ranked if q.fits] == \
        sorted(q.seconds["total"] for q in ranked if q.fits)
    plain = P.predict(P.LLAMA3_8B, batch, c, P.Layout(dp=devices, micro=1))
    assert not plain.fits and plain.memory["optimizer"] == 12 * P.LLAMA3_8B.params()


def test_experts_are_cut_by_ep_and_routed_bytes_counted():
    moe = P.Model(layers=4, hidden=256, heads=4, seq=128, vocab=1000, experts=8, top_k=2)
    assert moe.active_params() < moe.params()
    c = P.Cluster(8, 16e9, 1e12)
    one, spread = (P.predict(moe, 8, c, P.Layout(dp=8, ep=ep)) for ep in (1, 8))
    assert one.bytes["ep"] == 0 and spread.bytes["ep"] > 0
    saved = one.memory["weights"] - spread.memory["weights"]
    assert saved == pytest.approx(2 * moe.expert_params() * (1 - 1 / 8))


# ------------------------------------------- fixes from lesson 14's measured runs (compose)

GPT4 = GPTConfig(vocab=32, seq=16, hidden=32, heads=4, layers=4)


def _gpt(cfg: GPTConfig = GPT4) -> P.Model:
    return P.Model(layers=cfg.layers, hidden=cfg.hidden, heads=cfg.heads, seq=cfg.seq,
                   vocab=cfg.vocab, tied=True, e=4, biases=True, positions=True)


def test_the_course_s_gpt_is_counted_with_its_biases_and_positions():
    from ddl_lab.ml.gpt import build_gpt
    for cfg in (SMALL, GPT4):
        assert _gpt(cfg).params() == sum(p.numel() for p in build_gpt(cfg).parameters())


def test_tensor_parallelism_keeps_norms_row_biases_and_a_whole_vocabulary_on_every_rank():
    m, h, L = _gpt(), GPT4.hidden, GPT4.layers
    cut = 12 * h * h + 3 * h + 4 * h                  # qkv, proj, fc, proj; qkv and fc biases
    whole = 4 * h + 2 * h                             # two LayerNorms; the row biases
    ends = GPT4.vocab * h + GPT4.seq * h + 2 * h
    for t in (1, 2, 4):
        lay = P.Layout(tp=t, vocab_parallel=False)
        assert P.rank_params(m, lay) == L * (cut / t + whole) + ends
        assert P.rank_params(m, P.Layout(tp=t)) == \
            L * (cut / t + whole) + ends - GPT4.vocab * h * (1 - 1 / t)


def test_a_pipeline_s_end_stages_hold_the_embedding_and_a_tied_copy():
    m, h = _gpt(), GPT4.hidden
    per_layer = sum(m.layer_params())
    first = 2 * per_layer + GPT4.vocab * h + GPT4.seq * h       # stage 0 of 2: + positions
    assert P.rank_params(m, P.Layout(pp=2)) == first
    assert P.rank_params(m, P.Layout(pp=4)) == per_layer + GPT4.vocab * h + GPT4.seq * h


def test_pipeline_bytes_are_the_busiest_stage_s():
    """p = 2: each stage sends one activation (or its gradient) per micro-batch and the
    tied embedding's gradient once; p > 2: a middle stage sends both."""
    m, c = _gpt(), P.Cluster(4, 1e12, 1e9)
    bsh = 2 * GPT4.seq * GPT4.hidden * 4
    emb = GPT4.vocab * GPT4.hidden * 4
    torch_way = dict(vocab_parallel=False, scatter_gather=False)
    two = P.predict(m, 8, c, P.Layout(pp=2, dp=2, micro=2, **torch_way)).bytes["pp"]
    assert two == 2 * bsh + emb                                 # 2 micro-batches a rank
    four = P.predict(m, 8, c, P.Layout(pp=4, micro=2, **torch_way)).bytes["pp"]
    assert four == 2 * 4 * bsh
    megatron = P.predict(m, 8, c, P.Layout(pp=2, tp=2, micro=2)).bytes["pp"]
    assert megatron == 4 * bsh / 2 + emb / 2                   # scatter-gather; vocab cut


def test_fsdp2_gathers_the_layers_twice_and_its_root_once():
    m, d = _gpt(), 4
    got = P.predict(m, 8, P.Cluster(d, 1e12, 1e9), P.Layout(dp=d, zero=3)).bytes["dp"]
    layers = GPT4.layers * sum(m.layer_params())
    ring = (d - 1) / d * 4
    assert got == pytest.approx(2 * ring * m.params() + ring * layers, rel=1e-12)
