"""Mixed precision on a CPU (lesson 10): ``torch.autocast`` with bfloat16, fp16 with loss
scaling (``torch.amp.GradScaler``; Micikevicius et al., ICLR 2018), and what fp16 does to
gradients when the loss is not scaled.

fp16 has 5 exponent bits: its smallest positive (subnormal) value is 2⁻²⁴ ≈ 6·10⁻⁸ and its
largest 65504, so small gradients flush to zero (underflow) and a loss scaled too far
becomes inf (overflow). bf16 keeps fp32's 8 exponent bits (the range of fp32, 3 significant
digits) and needs no scaling. A CPU without bf16/fp16 units (AVX512-BF16, AMX) converts in
software: there autocast saves memory, not time — ``precision_run`` measures both.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ddl_lab.ml.activations import ActivationMeter
from ddl_lab.model_parallel.stages import build_layers, digits_batches

__all__ = ["MODES", "Precision", "precision_run", "test_accuracy", "step_times",
           "low_precision_units", "cast_gradients"]

MODES = ("fp32", "bf16", "fp16 + GradScaler", "fp16, no scaling")


@dataclass
class Precision:
    """One training run of the digits MLP in one mode (lesson 10)."""

    mode: str
    losses: list[float]
    accuracy: float                 # on held-out digits
    seconds: float                  # median per step
    kept: int                       # bytes saved for backward by one step's forward
    skipped: int                    # steps GradScaler skipped (inf/NaN gradients)
    scales: list[float]             # the loss scale at each step (1 without a scaler)


def test_accuracy(model: nn.Module) -> float:
    """Accuracy of ``model`` on the digits' test set."""
    from ddl_lab.ml.data import digits
    _, test = digits()
    with torch.no_grad():
        X, y = torch.as_tensor(test.X, dtype=torch.float32), torch.as_tensor(test.y)
        return float((model(X).argmax(1) == y).float().mean())


def precision_run(mode: str, steps: int = 60, batch: int = 64, hidden: int = 64,
                  lr: float = 0.2, seed: int = 0, init_scale: float = 2.0 ** 16
                  ) -> Precision:
    """Train the digits MLP with SGD for ``steps`` in ``mode`` (one of ``MODES``): fp32
    parameters throughout; the forward and backward under autocast for the low modes."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    model = build_layers("mlp", hidden, seed, 2)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    low = {"bf16": torch.bfloat16}.get(mode, torch.float16)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale) if "GradScaler" in mode else None
    losses, times, scales, skipped, kept = [], [], [], 0, 0
    for X, y in digits_batches(batch, steps, seed):
        t0 = time.perf_counter()
        opt.zero_grad()
        meter = ActivationMeter()
        meter.resident(X, y, *model.parameters())
        with meter.recording(), torch.autocast("cpu", dtype=low, enabled=mode != "fp32"):
            loss = nn.functional.cross_entropy(model(X), y)
        kept = meter.peak
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scale = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            skipped += scaler.get_scale() < scale
        scales.append(scaler.get_scale() if scaler else 1.0)
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()))
    return Precision(mode, losses, test_accuracy(model), float(np.median(times)), kept,
                     int(skipped), scales)


def low_precision_units() -> list[str]:
    """The CPU's flags for 2-byte arithmetic (Linux ``/proc/cpuinfo``): AVX512-BF16,
    AVX512-FP16, AMX; [] where none, or where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return []
    return sorted(set(flags) & {"avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16"})


def step_times(repeats: int = 15, batch: int = 256, hidden: int = 256,
               modes: tuple[str, ...] = ("fp32", "bf16", "fp16 + GradScaler")
               ) -> dict[str, float]:
    """Median seconds of one forward and backward of the digits MLP in each mode, the modes
    alternated ``repeats`` times (a change of the machine's load hits all alike)."""
    model = build_layers("mlp", hidden, 0, 2)
    X, y = digits_batches(batch, 1)[0]
    times: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(repeats):
        for mode in modes:
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype={"bf16": torch.bfloat16}.get(mode, torch.float16),
                                enabled=mode != "fp32"):
                loss = nn.functional.cross_entropy(model(X), y)
            loss.backward()
            times[mode].append(time.perf_counter() - t0)
    return {m: float(np.median(t)) for m, t in times.items()}


def cast_gradients(scales: tuple[float, ...] = (1.0, 2.0 ** 8, 2.0 ** 16, 2.0 ** 28),
                   steps: int = 60, hidden: int = 64, seed: int = 0
                   ) -> tuple[np.ndarray, dict[float, dict[str, float]]]:
    """The gradients of the output layer's input (what backward sends down) of the trained
    MLP on the whole training set as one batch (a mean over 1,347 examples), in fp32, then multiplied by each loss scale and stored in
    fp16: for each scale, the share of non-zero values that became 0 (underflow) and inf
    (overflow). What fp16 without scaling would do to them, measured on real gradients.
    Returns (the non-zero gradients' magnitudes, {scale: {underflow, overflow}})."""
    model = build_layers("mlp", hidden, seed, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for X, y in digits_batches(64, steps, seed):
        opt.zero_grad()
        nn.functional.cross_entropy(model(X), y).backward()
        opt.step()
    from ddl_lab.ml.data import digits
    train, _ = digits()                               # the whole training set: one batch
    X, y = torch.as_tensor(train.X, dtype=torch.float32), torch.as_tensor(train.y)
    h = model[:-1](X).detach().requires_grad_()
    nn.functional.cross_entropy(model[-1](h), y).backward()
    g = h.grad[h.grad != 0]
    out = {}
    for s in scales:
        half = (g * s).half()
        out[s] = {"underflow": float((half == 0).float().mean()),
                  "overflow": float(half.isinf().float().mean())}
    return g.abs().numpy(), out
