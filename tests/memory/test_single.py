"""Lesson 10 in one process: the anatomy measured against the formulas, mixed precision's
underflow, overflow and loss scaling, recomputation's √n rule, the pictures and the quiz."""
import matplotlib
import numpy as np
import pytest

from ddl_lab.active import load_quiz
from ddl_lab.memory import anatomy as A
from ddl_lab.memory import plots
from ddl_lab.memory import precision as Pr
from ddl_lab.memory import recompute as R

matplotlib.use("Agg")


def test_formulas_follow_zero():
    assert sum(A.per_param("adam", "fp32").values()) == 16
    assert sum(A.per_param("adam", "bf16").values()) == 16          # 2 + 2 + 12
    assert A.per_param("momentum", "bf16") == {"params": 2, "grads": 2, "optimizer": 8}
    got = [sum(A.per_rank(7.5e9, 64, s, "adam", "bf16").values()) / 1e9 for s in range(4)]
    assert got == pytest.approx([120, 31.4, 16.6, 1.9], abs=0.05)  # ZeRO's figure 1


@pytest.mark.parametrize("optimizer", A.OPTIMIZERS)
@pytest.mark.parametrize("precision", A.PRECISIONS)
def test_the_step_is_measured_as_the_formula_says(optimizer, precision):
    m = A.anatomy_step(optimizer, precision, hidden=32, depth=2, batch=16)
    P = sum(p.numel() for p in A.build_layers("mlp", 32, 0, 2).parameters())
    want = A.per_param(optimizer, precision)
    assert m.params == want["params"] * P and m.grads == want["grads"] * P
    assert want["optimizer"] * P <= m.optimizer <= want["optimizer"] * P + 64   # step counters
    hidden = 16 * 2 * 32 * (2 if precision == "bf16" else 4)          # 2 layers' outputs
    assert hidden <= m.activations <= hidden + 16 * 10 * 4 + 8         # + the loss's softmax
    assert m.peak >= m.grads                  # allocated during the step, alive at its end


def test_fp16_underflows_and_overflows_and_the_scaler_backs_off():
    magnitudes, shares = Pr.cast_gradients(scales=(1.0, 2.0 ** 16, 2.0 ** 40), steps=5)
    assert magnitudes.min() > 0 and shares[2.0 ** 16]["underflow"] <= shares[1.0]["underflow"]
    assert shares[2.0 ** 40]["overflow"] > 0.5 and shares[2.0 ** 16]["overflow"] == 0
    run = Pr.precision_run("fp16 + GradScaler", steps=8, init_scale=2.0 ** 40)
    assert run.skipped > 0 and run.scales[-1] < 2.0 ** 40
    fp32 = Pr.precision_run("fp32", steps=8)
    assert fp32.skipped == 0 and 0 <= fp32.accuracy <= 1
    assert set(Pr.step_times(repeats=1, batch=16, hidden=16)) == {"fp32", "bf16",
                                                                 "fp16 + GradScaler"}
    with pytest.raises(ValueError, match="mode must be one of"):
        Pr.precision_run("fp8")
    plots.plot_gradient_range(magnitudes)


def test_recomputation_keeps_least_near_the_square_root():
    rows = {r.segments: r for r in R.recompute_run(depth=16, width=32, batch=64,
                                                   segments=(0, 1, 4, 16), repeats=1)}
    assert R.segments_for(16) == 4 and R.segments_for(64) == 8
    assert rows[0].kept == 16 * 64 * 32 * 4                   # every layer's output
    assert rows[1].kept == 0 and rows[16].kept == 15 * 64 * 32 * 4
    assert rows[4].peak < min(rows[0].peak, rows[1].peak, rows[16].peak)
    plots.figure_recompute(list(rows.values()), 16)


def test_the_quiz_has_the_moved_question():
    questions = load_quiz("memory")
    assert len(questions) == 6 and "ZeRO-1" in questions[0].prompt
    assert not any("ZeRO" in q.prompt for q in load_quiz("model_parallel"))
    assert np.isfinite(len(questions))
