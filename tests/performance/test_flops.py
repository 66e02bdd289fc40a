"""Lesson 13, §2: the model FLOPs formula against FlopCounterMode's count of real steps of
lesson 12's GPT, and MFU."""
import pytest

from ddl_lab.ml.gpt import GPT, GPTConfig
from ddl_lab.performance import flops as F
from ddl_lab.transformers.train import MODEL


@pytest.mark.parametrize("cfg, batch", [
    (MODEL, 4),
    (GPTConfig(vocab=50, seq=32, hidden=48, heads=3, layers=3), 2),
])
def test_flop_counter_matches_6n_plus_the_attention_term_within_2_percent(cfg, batch):
    counted = F.gpt_counted_flops(cfg, batch)
    formula = F.step_flops(cfg, batch, attention=True, causal=False)
    assert abs(counted / formula - 1) < 0.02, (counted, formula)
    assert abs(counted / F.step_flops(cfg, batch, attention=False) - 1) > 0.02  # the term counts


def test_matmul_params_counts_the_linear_weights_and_the_tied_head():
    assert F.matmul_params(GPT(MODEL)) == F.gpt_matmul_params(MODEL) == \
        12 * MODEL.layers * MODEL.hidden ** 2 + MODEL.vocab * MODEL.hidden


def test_the_causal_term_is_half_and_mfu_is_flops_over_time_and_peak():
    assert F.attention_flops(2, 64, 128, causal=True) * 2 == F.attention_flops(2, 64, 128)
    assert F.mfu(1e12, 2.0, 1e12) == 0.5
    assert F.timed_step(GPTConfig(vocab=20, seq=8, hidden=16, heads=2, layers=1), 2,
                        repeats=1) > 0

