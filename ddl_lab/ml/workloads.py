"""Named workloads: a model, its data and its loss, built identically on every rank (lesson
05 trains them; lessons 06, 11 and the checks reuse them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn

from ddl_lab.ml.data import Dataset, digits, linear_regression
from ddl_lab.ml.models import MLP, LinearRegression, LogisticRegression, SmallCNN
from ddl_lab.ml.training import loss_function

__all__ = ["Workload", "WORKLOADS", "build"]


@dataclass(frozen=True)
class Workload:
    """A model, its data and its loss, built identically on every rank."""

    model: str          # 'mlp', 'wide-mlp', 'cnn', 'logreg' or 'linreg'
    data: str           # 'digits' or 'linreg'
    loss: str           # 'ce' or 'mse'


WORKLOADS = {"digits-mlp": Workload("mlp", "digits", "ce"),
             "digits-cnn": Workload("cnn", "digits", "ce"),
             "digits-wide-mlp": Workload("wide-mlp", "digits", "ce"),
             "digits-logreg": Workload("logreg", "digits", "ce"),
             "linreg": Workload("linreg", "linreg", "mse")}


def build(workload: str, seed: int = 0) -> tuple[nn.Module, Dataset, Dataset, Callable]:
    """(model, train set, test set, loss) for a named workload; same model on every rank."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}: use one of {list(WORKLOADS)}")
    w = WORKLOADS[workload]
    if w.data == "digits":
        train, test = digits(seed=seed)
    else:
        full = linear_regression(m=2000, d=20, noise=0.1, seed=seed)
        train, test = full.subset(np.arange(1500)), full.subset(np.arange(1500, 2000))
    torch.manual_seed(seed)
    model = {"mlp": lambda: MLP(64, 64, 10), "cnn": lambda: SmallCNN(10),
             "wide-mlp": lambda: MLP(64, 512, 10),
             "logreg": lambda: LogisticRegression(64, classes=10),
             "linreg": lambda: LinearRegression(train.X.shape[1])}[w.model]()
    return model, train, test, loss_function(w.loss)
