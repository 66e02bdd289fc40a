"""Models the course trains (lesson 01; reused by all).

Torch modules: ``LinearRegression``, ``LogisticRegression``, ``MLP`` and ``SmallCNN``
(for the 8×8 digits). Numpy forms where a lesson shows the math: Jamshidi's
lecture's J(θ) = 1/(2m) Σ (x_i·θ − y_i)² and its gradient, the logistic loss, and a
non-convex two-parameter wave fit. Flattening
helpers for the parameter-server and allreduce lessons (05–08).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["LinearRegression", "LogisticRegression", "MLP", "SmallCNN", "linreg_loss",
           "linreg_grad", "logistic_loss", "logistic_grad", "sigmoid", "wave_loss",
           "wave_grad", "flat_params", "set_flat_params", "flat_grads"]


class LinearRegression(nn.Module):
    """ŷ = x·θ (+ b): one output per example, shape (n,)."""

    def __init__(self, d: int, bias: bool = False):
        super().__init__()
        self.linear = nn.Linear(d, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x.flatten(1)).squeeze(-1)


class LogisticRegression(nn.Module):
    """Logits: shape (n,) for ``classes=1`` (binary, use BCEWithLogits), else (n, classes)."""

    def __init__(self, d: int, classes: int = 1):
        super().__init__()
        self.classes = classes
        self.linear = nn.Linear(d, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x.flatten(1))
        return out.squeeze(-1) if self.classes == 1 else out


class MLP(nn.Module):
    """d_in → hidden → ReLU → hidden → ReLU → classes (logits)."""

    def __init__(self, d_in: int = 64, hidden: int = 64, classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1))


class SmallCNN(nn.Module):
    """Two 3×3 convolutions and a linear head for 8×8 digits; input (n, 64) or (n, 1, 8, 8)."""

    def __init__(self, classes: int = 10, channels: int = 16):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1), nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2))                                   # (n, 2c, 4, 4)
        self.head = nn.Linear(2 * channels * 16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1, 1, 8, 8)
        return self.head(self.features(x).flatten(1))


# ----------------------------------------------------------------- numpy math

def linreg_loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """J(θ) = 1/(2m) Σ_i (x_i·θ − y_i)²  (Jamshidi's lecture, "Supervised ML")."""
    r = X @ theta - y
    return float(r @ r) / (2 * len(y))


def linreg_grad(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """∇J(θ) = 1/m Σ_i (x_i·θ − y_i) x_i = Xᵀ(Xθ − y)/m."""
    return X.T @ (X @ theta - y) / len(y)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """1/(1 + e^−z), computed without overflow."""
    return np.exp(-np.logaddexp(0.0, -z))


def logistic_loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """Mean cross-entropy −1/m Σ [y log σ(x·θ) + (1−y) log(1−σ(x·θ))], y in {0, 1}."""
    z = X @ theta
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def logistic_grad(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """∇ = Xᵀ(σ(Xθ) − y)/m."""
    return X.T @ (sigmoid(X @ theta) - y) / len(y)


def wave_loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """J(θ) = 1/(2m) Σ (θ₂ sin(θ₁ x_i) − y_i)²: least squares, non-convex in θ₁."""
    r = theta[1] * np.sin(theta[0] * X[:, 0]) - y
    return float(r @ r) / (2 * len(y))


def wave_grad(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """∇J = 1/m Σ r_i (θ₂ x_i cos(θ₁ x_i), sin(θ₁ x_i)), r_i the residual."""
    x = X[:, 0]
    s, r = np.sin(theta[0] * x), theta[1] * np.sin(theta[0] * x) - y
    return np.array([r @ (theta[1] * x * np.cos(theta[0] * x)), r @ s]) / len(y)


# ---------------------------------------------------------- flat parameters

def flat_params(model: nn.Module) -> torch.Tensor:
    """All parameters in one detached 1-D tensor (a copy), in ``parameters()`` order."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def flat_grads(model: nn.Module) -> torch.Tensor:
    """All gradients in one 1-D tensor (zeros where a parameter has no grad yet)."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in model.parameters()])


def set_flat_params(model: nn.Module, vec: torch.Tensor) -> None:
    """Copy a 1-D tensor made by ``flat_params`` back into the model's parameters."""
    vec = torch.as_tensor(vec)
    n = sum(p.numel() for p in model.parameters())
    if vec.dim() != 1 or vec.numel() != n:
        raise ValueError(f"expected a 1-D vector of {n} values (the model's parameter "
                         f"count), got shape {tuple(vec.shape)}")
    offset = 0
    with torch.no_grad():
        for p in model.parameters():
            k = p.numel()
            p.copy_(vec[offset:offset + k].view_as(p))
            offset += k
