"""Lesson 13, §1: the roofline's measurements and a training step's operations on it."""
import math

import torch

from ddl_lab.performance import roofline as R
from ddl_lab.transformers.train import MODEL


def test_peak_table_measures_every_dtype_thread_count_and_size_and_restores_threads():
    before = torch.get_num_threads()
    rows = R.peak_table(sizes=(64, 128), dtypes=("float32", "bfloat16"), thread_counts=(1, 2),
                        repeats=1)
    assert [(r["dtype"], r["threads"], r["size"]) for r in rows] == [
        (d, t, n) for d in ("float32", "bfloat16") for t in (1, 2) for n in (64, 128)]
    assert all(r["flop_s"] > 0 and math.isfinite(r["flop_s"]) for r in rows)
    assert torch.get_num_threads() == before


def test_stream_moves_bytes_and_the_roofline_bends_at_the_ridge():
    bw = R.stream(1 << 20, repeats=2)
    assert bw["copy"] > 0 and bw["triad"] > 0
    peak, band = 1e11, 2e10
    assert R.ridge(peak, band) == 5.0
    assert R.attainable(1.0, peak, band) == 2e10 and R.attainable(50.0, peak, band) == peak


def test_step_ops_order_by_intensity_and_each_is_timed():
    ops = {op.name: R.time_op(op, repeats=1) for op in R.step_ops(MODEL, 4)}
    assert list(ops) == ["matmul", "attention", "LayerNorm", "GELU", "AdamW step",
                         "allreduce's reduction"]
    i = {k: op.intensity for k, op in ops.items()}
    assert i["matmul"] > i["attention"] > i["GELU"] > i["LayerNorm"] > i["AdamW step"] > \
        i["allreduce's reduction"]
    assert i["matmul"] == 2 * 256 * 64 * 256 / (4 * (256 * 64 + 256 * 64 + 256 * 256))
    assert all(op.seconds > 0 and op.flop_s > 0 for op in ops.values())


def test_bfloat16_halves_the_bytes_of_an_activation_op():
    f32, bf16 = (R.step_ops(MODEL, 4, dtype=d)[2] for d in ("float32", "bfloat16"))
    assert f32.bytes == 2 * bf16.bytes and f32.flops == bf16.flops
