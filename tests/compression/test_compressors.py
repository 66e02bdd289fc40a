"""Compressors, error feedback and index coding (lesson 08): real bytes, measured sizes."""
import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from ddl_lab.compression import compressors as C


def vec(d=3000, seed=0, scale=0.05):
    return torch.randn(d, generator=torch.Generator().manual_seed(seed)) * scale


# ------------------------------------------------------------------ index coding

@pytest.mark.parametrize("values", [[], [0], [127, 128, 16383, 16384], [2**40 + 5, 1, 0]])
def test_varints_round_trip(values):
    v = np.array(values, dtype=np.int64)
    data = C.varint_encode(v)
    assert np.array_equal(C.varint_decode(data), v)


def test_varint_sizes_are_seven_bits_a_byte():
    assert len(C.varint_encode([127])) == 1
    assert len(C.varint_encode([128])) == 2
    assert len(C.varint_encode([2**14])) == 3


def test_varint_rejects_negative_and_truncated_input():
    with pytest.raises(ValueError, match="non-negative"):
        C.varint_encode([3, -1])
    with pytest.raises(ValueError, match="truncated"):
        C.varint_decode(bytes([0x81]))


def test_indices_round_trip_and_shrink():
    rng = np.random.default_rng(1)
    idx = np.sort(rng.choice(20_000, size=500, replace=False))
    for coder in C.CODERS:
        assert np.array_equal(C.decode_indices(C.encode_indices(idx, coder)), idx)
    sizes = C.index_coding_sizes(idx)
    assert sizes["int32 indices"] == 2000
    assert sizes["delta + varint"] < 0.5 * sizes["int32 indices"]
    assert sizes["delta + varint + deflate"] <= sizes["delta + varint"]


def test_clustered_indices_are_entropy_coded_smaller():
    idx = np.concatenate([np.arange(100, 400, 3), np.arange(5000, 5300, 3)])
    sizes = C.index_coding_sizes(idx)
    assert sizes["delta + varint + deflate"] < 0.5 * sizes["delta + varint"]


def test_entropy_coder_never_costs_more_than_one_flag_byte():
    idx = np.array([5])
    assert len(C.encode_indices(idx, "deflate")) == len(C.encode_indices(idx, "none")) == 2


def test_unsorted_indices_and_unknown_coder_are_errors():
    with pytest.raises(ValueError, match="sorted"):
        C.encode_indices(np.array([3, 1]))
    with pytest.raises(ValueError, match="unknown coder"):
        C.encode_indices(np.array([1]), "gzip")


# ------------------------------------------------------------------ compressors

def test_fp32_and_fp16_sizes_are_measured_from_bytes():
    g = vec()
    out, size = C.FP32().roundtrip(g)
    assert size == 4 * g.numel() and torch.equal(out, g)
    out, size = C.FP16().roundtrip(g)
    assert size == 2 * g.numel() and torch.allclose(out, g, rtol=1e-3, atol=1e-6)


def test_onebit_sends_signs_and_a_mean_scale_per_bucket():
    g = vec(d=2500)
    comp = C.OneBit(bucket=1000)
    out, size = comp.roundtrip(g)
    assert size == 3 * 4 + math.ceil(2500 / 8)
    assert torch.equal(torch.sign(out), torch.where(g >= 0, 1.0, -1.0))
    for lo, hi in ((0, 1000), (1000, 2000), (2000, 2500)):
        assert torch.allclose(out[lo:hi].abs(), g[lo:hi].abs().mean().expand(hi - lo))
    assert 4 * g.numel() / size > 30


def test_qsgd_is_unbiased_and_levels_stay_in_range():
    g = vec(d=1024)
    q = C.QSGD(s=2, bucket=256, seed=3)
    total = torch.zeros_like(g, dtype=torch.float64)
    draws = 1500
    for _ in range(draws):
        out = q.decode(q.encode(g), g.numel())
        total += out.double()
        scale = torch.repeat_interleave(torch.stack([g[i:i + 256].norm() for i in
                                                     range(0, 1024, 256)]), 256) / 2
        levels = out / scale
        assert torch.allclose(levels, levels.round(), atol=1e-4) and levels.abs().max() <= 2
    err = (total / draws - g.double()).abs().max()
    assert err < 0.2 * g.abs().max()          # biased rounding is off by ~half a level


def test_qsgd_of_zero_is_zero():
    out, _ = C.QSGD().roundtrip(torch.zeros(100))
    assert not out.any()


def test_threshold_sends_sign_and_index_of_entries_beyond_tau():
    g = vec(d=5000, scale=1.0)
    tau = 2.0
    out, size = C.Threshold(tau).roundtrip(g)
    sent = g.abs() >= tau
    assert torch.equal(out[sent], tau * torch.sign(g[sent]))
    assert not out[~sent].any()
    k = int(sent.sum())                      # ~4.6% of the entries
    assert size < k * 2 + 10                 # ~a byte per index and a bit per sign
    assert 4 * g.numel() / size > 80


def test_threshold_with_nothing_beyond_tau_is_one_count_and_a_flag():
    out, size = C.Threshold(10.0).roundtrip(vec())
    assert not out.any() and size == 2


def test_topk_keeps_the_k_largest_entries():
    g = vec(d=10_000)
    comp = C.TopK(ratio=0.01)
    out, size = comp.roundtrip(g)
    k = 100
    top = torch.topk(g.abs(), k).indices
    assert torch.equal(out[top], g[top]) and int((out != 0).sum()) == k
    assert size < 4 * k + 2 * k


def test_error_feedback_conserves_every_gradient_for_every_compressor():
    for inner in (C.OneBit(bucket=64), C.QSGD(s=4, seed=1), C.Threshold(0.08), C.TopK(0.02)):
        ef = C.ErrorFeedback(inner)
        total_g = torch.zeros(400, dtype=torch.float64)
        total_sent = torch.zeros_like(total_g)
        for step in range(30):
            g = vec(d=400, seed=step) + 0.01
            total_g += g.double()
            total_sent += ef.decode(ef.encode(g), 400).double()
        gap = (total_sent + ef.residual.double() - total_g).abs().max()
        assert gap < 1e-5 * (1 + ef.residual.abs().max()), inner.name
        assert ef.residual_norm > 0 and ef.name.endswith("+ EF")


def test_strom_step_is_error_feedback_around_threshold():
    g, r = vec(seed=1, scale=0.3), vec(seed=2, scale=0.3)
    idx, signs, new = C._strom_step(g, r, 0.5)
    ef = C.ErrorFeedback(C.Threshold(0.5))
    ef.residual = r.clone()
    out = ef.decode(ef.encode(g), g.numel())
    assert torch.equal(torch.nonzero(out).flatten(), idx)
    assert torch.equal(torch.sign(out[idx]).to(torch.int8), signs)
    assert torch.allclose(ef.residual, new)


def test_ef_onebit_step_matches_the_onebit_compressor_with_one_bucket():
    g, r = vec(seed=3), vec(seed=4)
    q, new = C._ef_onebit_step(g, r)
    ef = C.ErrorFeedback(C.OneBit(bucket=g.numel()))
    ef.residual = r.clone()
    assert torch.allclose(ef.decode(ef.encode(g), g.numel()), q)
    assert torch.allclose(ef.residual, new, atol=1e-6)


@pytest.mark.parametrize("make, match", [
    (lambda: C.Threshold(0), "τ must be a positive"),
    (lambda: C.Threshold(-1.0), "τ must be a positive"),
    (lambda: C.TopK(0), r"ratio must be in \(0, 1\]"),
    (lambda: C.QSGD(s=0), "s .* must be a positive integer"),
    (lambda: C.QSGD(s=300), "at most 127"),
    (lambda: C.OneBit(bucket=0), "bucket must be a positive integer"),
    (lambda: C.ErrorFeedback("fp16"), "wraps a Compressor"),
    (lambda: C.Scheme("zip"), "unknown compressor"),
    (lambda: C.Scheme("fp32", 2.0), "takes no parameter"),
])
def test_bad_settings_are_clear_errors(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_messages_from_another_compressor_are_rejected():
    data = C.FP16().encode(vec())
    with pytest.raises(ValueError, match="another compressor"):
        C.FP32().decode(data, 3000)
    ef = C.ErrorFeedback(C.FP16())
    ef.encode(vec())
    with pytest.raises(ValueError, match="one per vector"):
        ef.encode(vec(d=10))
    with pytest.raises(TypeError, match="float gradients"):
        C.FP32().encode(torch.arange(5))


def test_schemes_build_their_compressors_with_defaults_and_labels():
    assert C.Scheme("threshold", 0.2, ef=True).label == "threshold τ=0.2 + EF"
    assert C.Scheme("top-k", ef=True).label == "top-k 0.3% + EF"
    assert isinstance(C.Scheme("qsgd", 8).build(), C.QSGD)
    assert C.Scheme("qsgd", 8).build().s == 8


def test_compare_on_measures_every_compressor():
    g = vec()
    rows = C.compare_on(g, [C.FP32(), C.FP16(), C.OneBit()])
    assert [r["bytes"] for r in rows] == [12000, 6000, 3 * 4 + 375]
    assert rows[0]["rel. error"] == 0 and rows[2]["ratio"] > 30


def test_reconstruction_picture_draws_the_gradient_and_every_decoding():
    from ddl_lab.compression.plots import plot_reconstruction
    g = torch.linspace(-1, 1, 500)
    rows = C.compare_on(g, [C.FP16(), C.Threshold(0.5)])
    fig, ax = plt.subplots()            # its own axes: not whatever an earlier test left
    assert plot_reconstruction(g, rows, n=50, ax=ax) is ax
    plt.close(fig)
    assert [len(line.get_ydata()) for line in ax.lines] == [50] * 3
    assert ax.lines[2].get_label().startswith("threshold τ=0.5")
