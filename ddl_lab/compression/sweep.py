"""The traffic a threshold saves is a setting: Strom's τ swept on real workers (lesson 08).

Do's lecture's table gives one threshold (τ = 2) and its reduction (99.6 %). Any reduction
from about 95 % (a sign bit and a coded index for many entries) to all but 100 % is reached
by moving τ, so the figure alone says nothing; what matters is the accuracy at that
reduction. ``tau_sweep``
trains Strom's threshold with error feedback at several τ, chosen relative to the size of
one gradient, and reports for each the traffic saved — measured from the lengths of the
encoded messages — and the test accuracy reached, beside fp32's on the same run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ddl_lab.compression.compressors import Scheme
from ddl_lab.compression.training import batches, gradient, run, setup

__all__ = ["FACTORS", "first_gradient", "tau_grid", "TauSweep", "tau_sweep"]

# τ as fractions of the largest |entry| of one gradient: from "many entries cross τ at
# every step" (about half of them at the initial model) to "τ is 8× beyond any entry, so an
# entry is sent only after many steps of accumulating in the residual".
FACTORS = (1 / 128, 1 / 32, 1 / 8, 1 / 2, 1.0, 2.0, 8.0)


def first_gradient(model: str = "mlp", seed: int = 0, batch_size: int = 16,
                   world_size: int = 4) -> torch.Tensor:
    """Rank 0's gradient of its first minibatch at the initial model (lesson 08's run)."""
    net, X, y, _, per_epoch, gen = setup(model, seed, batch_size, world_size, 0)
    batch = next(batches(len(y), batch_size, per_epoch, 1, gen))
    return gradient(net, X[batch], y[batch])[0]


def tau_grid(grad: torch.Tensor, factors: Sequence[float] = FACTORS) -> np.ndarray:
    """τ = factor × max |g| for each factor, to two significant digits, ascending."""
    if not len(factors) or min(factors) <= 0:
        raise ValueError(f"factors must be positive numbers, got {list(factors)!r}")
    top = float(torch.as_tensor(grad).abs().max())
    if not top > 0:
        raise ValueError("the gradient is all zeros: it gives τ no scale")
    return np.array(sorted({float(f"{f * top:.2g}") for f in factors}))


@dataclass(frozen=True)
class TauSweep:
    """Strom's threshold with error feedback at several τ, beside fp32 (lesson 08)."""

    taus: np.ndarray            # the thresholds, in the gradient's units, ascending
    update_bytes: np.ndarray    # mean encoded update of one worker, per τ
    accuracy: np.ndarray        # final test accuracy per τ (0 … 1)
    fp32_bytes: int             # one fp32 update: 4 bytes per parameter
    fp32_accuracy: float        # fp32's final test accuracy on the same run
    scale: float                # max |g| of the gradient the τ were chosen from
    epochs: int
    world_size: int

    @property
    def reduction(self) -> np.ndarray:
        """% of fp32's bytes saved per τ, from the encoded messages' lengths."""
        return 100 * (1 - self.update_bytes / self.fp32_bytes)

    def rows(self) -> str:
        """The sweep as a table: τ, bytes per update, % of fp32's bytes saved, accuracy."""
        lines = [f"{'τ':>8}{'update':>10}{'saved':>9}{'accuracy':>10}",
                 f"{'fp32':>8}{self.fp32_bytes:>9,}B{'0.00%':>9}{100 * self.fp32_accuracy:>9.1f}%"]
        for t, b, r, a in zip(self.taus, self.update_bytes, self.reduction, self.accuracy):
            lines.append(f"{t:>8.2g}{b:>9,.0f}B{r:>8.2f}%{100 * a:>9.1f}%")
        return "\n".join(lines)


def tau_sweep(cluster, factors: Sequence[float] = FACTORS, epochs: int = 3,
              model: str = "mlp", seed: int = 0, batch_size: int = 16,
              **options: Any) -> TauSweep:
    """Train fp32, then Strom's threshold + error feedback at each τ of ``tau_grid``.

    Every run is a real synchronous run on ``cluster`` (``training.run``) from the same
    initial model on the same minibatches; the τ are scaled to the first gradient of that
    run. ``options`` go to ``train_worker`` (lr, momentum, eval_every).
    """
    kw = dict(epochs=epochs, model=model, seed=seed, batch_size=batch_size, **options)
    g = first_gradient(model, seed, batch_size, cluster.world_size)
    taus = tau_grid(g, factors)
    fp32 = run(cluster, Scheme("fp32"), **kw)
    runs = [run(cluster, Scheme("threshold", float(t), ef=True), **kw) for t in taus]
    return TauSweep(taus, np.array([r.update_bytes for r in runs]),
                    np.array([r.final_accuracy for r in runs]), fp32.fp32_bytes,
                    fp32.final_accuracy, float(g.abs().max()), epochs, cluster.world_size)
