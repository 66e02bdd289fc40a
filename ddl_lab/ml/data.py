"""Data sets that need no download, deterministic under a seed (lesson 01; reused by all).

- ``linear_regression``: y = Xθ* + noise, the running example of Jamshidi's lecture (lessons 01, 04, 05).
- ``sparse_logistic``: many features, few non-zeros per example, skewed feature
  frequencies (lesson 01's Adagrad, lesson 03's Hogwild!, lesson 07).
- ``digits``: scikit-learn's bundled 8×8 handwritten digits with a train/test split.
- ``wave``: y = a·sin(ωx) + noise, fitted by a non-convex model (lesson 01).
- ``shard``: split any of them into k shards, identically distributed or skewed by
  label (lessons 05 and 10).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["Dataset", "SparseDataset", "linear_regression", "sparse_logistic", "digits",
           "wave", "shard"]


@dataclass
class Dataset:
    """Examples ``X`` (m, d) and targets ``y`` (m,); ``theta`` is the synthetic truth, if any."""

    X: np.ndarray
    y: np.ndarray
    theta: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, rows: np.ndarray) -> "Dataset":
        """The examples at ``rows`` (same ground truth)."""
        return replace(self, X=self.X[rows], y=self.y[rows])

    def tensors(self) -> tuple["torch.Tensor", "torch.Tensor"]:
        """(X, y) as torch tensors (sharing memory with the arrays)."""
        import torch
        return torch.from_numpy(self.X), torch.from_numpy(self.y)


@dataclass
class SparseDataset:
    """Sparse examples: example i has features ``idx[i]`` with values ``val[i]``.

    ``idx`` (m, nnz) int64, ``val`` (m, nnz) float32, ``y`` (m,) float32 in {0, 1},
    ``d`` the number of features, ``theta`` the true weights.
    """

    idx: np.ndarray
    val: np.ndarray
    y: np.ndarray
    d: int
    theta: np.ndarray | None = field(default=None)

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, rows: np.ndarray) -> "SparseDataset":
        return replace(self, idx=self.idx[rows], val=self.val[rows], y=self.y[rows])

    def dense(self) -> np.ndarray:
        """The (m, d) float32 matrix."""
        X = np.zeros((len(self), self.d), dtype=np.float32)
        np.add.at(X, (np.arange(len(self))[:, None], self.idx), self.val)
        return X

    def tensors(self) -> tuple["torch.Tensor", "torch.Tensor"]:
        """(dense X, y) as torch tensors."""
        import torch
        return torch.from_numpy(self.dense()), torch.from_numpy(self.y)

    def feature_counts(self) -> np.ndarray:
        """How many examples use each feature (d,): a few frequent, many rare."""
        return np.bincount(self.idx.ravel(), minlength=self.d)


def _positive_int(name: str, value: int) -> None:
    if not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def linear_regression(m: int = 1000, d: int = 10, noise: float = 0.1, seed: int = 0,
                      spread: float = 1.0) -> Dataset:
    """m examples x ~ N(0, diag(s)²), y = x·θ* + noise·N(0, 1) (float32; lesson 01).

    Feature scales s run geometrically from 1 down to 1/spread, so XᵀX/m has condition
    number ≈ spread²: ``spread=1`` is a round bowl, ``spread=3`` an elongated one.
    """
    _positive_int("m", m)
    _positive_int("d", d)
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise!r}")
    if spread < 1:
        raise ValueError(f"spread must be >= 1 (largest / smallest feature scale), got {spread!r}")
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=d).astype(np.float32)
    X = (rng.normal(size=(m, d)) * np.geomspace(1.0, 1.0 / spread, d)).astype(np.float32)
    y = (X @ theta + noise * rng.normal(size=m)).astype(np.float32)
    return Dataset(X, y, theta)


def sparse_logistic(m: int = 5000, d: int = 1000, nnz: int = 10,
                    seed: int = 0) -> SparseDataset:
    """Sparse binary classification with Zipf-like feature frequencies (lessons 01, 03, 07).

    Each example has ``nnz`` distinct features drawn with probability ∝ 1/(rank+1),
    so a few features appear in most examples and most features in very few; values
    are 1. Labels are Bernoulli(sigmoid(x·θ*)) where the rare features carry as much
    weight as the frequent ones, which is what makes per-feature rates (Adagrad) pay.
    """
    _positive_int("m", m)
    _positive_int("d", d)
    _positive_int("nnz", nnz)
    if nnz > d:
        raise ValueError(f"nnz ({nnz}) cannot exceed the number of features d ({d})")
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, d + 1)
    p /= p.sum()
    # Gumbel top-k: nnz distinct features per example, each drawn ∝ p (in row chunks
    # of at most ~4M random numbers, so large m·d stays within memory).
    idx = np.empty((m, nnz), dtype=np.int64)
    step = max(1, 4_000_000 // d)
    for lo in range(0, m, step):
        hi = min(m, lo + step)
        keys = np.log(p)[None, :] - np.log(-np.log(rng.random((hi - lo, d))))
        idx[lo:hi] = np.sort(np.argpartition(-keys, nnz - 1, axis=1)[:, :nnz], axis=1)
    val = np.ones((m, nnz), dtype=np.float32)
    theta = (rng.normal(size=d) * 2.0).astype(np.float32)
    z = (theta[idx] * val).sum(axis=1)
    y = (rng.random(m) < 1.0 / (1.0 + np.exp(-z))).astype(np.float32)
    return SparseDataset(idx, val, y, d, theta)


def digits(test_size: float = 0.25, seed: int = 0) -> tuple[Dataset, Dataset]:
    """scikit-learn's bundled 8×8 digits, pixels scaled to [0, 1]: (train, test).

    X float32 (n, 64), y int64 in 0..9; the split is scikit-learn's stratified
    ``train_test_split`` under ``seed``. Importing scikit-learn costs about 1.5 CPU-s, in every
    worker that loads the digits: the data are read from the file scikit-learn ships
    (``digits.csv.gz``, as ``load_digits`` reads it) and the split's indices, computed once
    with scikit-learn, are kept in the user's cache (``cache_dir``; where it cannot be
    written, each process computes them).
    """
    if not 0 < test_size < 1:
        raise ValueError(f"test_size must be between 0 and 1, got {test_size!r}")
    pixels, y = _digits_file()
    X = (pixels / 16.0).astype(np.float32)
    train, test = _stratified_split(y, test_size, seed)
    return Dataset(X[train], y[train]), Dataset(X[test], y[test])


@functools.cache
def _sklearn_dir() -> tuple[Path, str]:
    """scikit-learn's installed folder and version, found without importing it."""
    import importlib.metadata
    import importlib.util
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the digits come with scikit-learn: pip install scikit-learn")
    return Path(list(spec.submodule_search_locations)[0]), \
        importlib.metadata.version("scikit-learn")


def _digits_file() -> tuple[np.ndarray, np.ndarray]:
    """The 1,797 digits of scikit-learn's ``digits.csv.gz``: pixels (n, 64) in 0..16 and
    labels (n,) int64, read as ``sklearn.datasets.load_digits`` reads them."""
    folder, _ = _sklearn_dir()
    data = np.loadtxt(folder / "datasets" / "data" / "digits.csv.gz", delimiter=",")
    return data[:, :-1], data[:, -1].astype(np.int64)


def cache_dir() -> Path:
    """Where ``digits`` keeps its split's indices: ``$XDG_CACHE_HOME/ddl_lab`` (default
    ``~/.cache/ddl_lab``)."""
    import os
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ddl_lab"


def _stratified_split(y: np.ndarray, test_size: float, seed: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The (train, test) indices of ``sklearn.model_selection.train_test_split(…,
    stratify=y)`` — which depend on the labels, the sizes and the seed only — from the cache
    when there, else computed and cached (written whole, then renamed into place)."""
    import os
    import tempfile
    _, version = _sklearn_dir()
    path = cache_dir() / f"digits-split-{version}-{len(y)}-{test_size!r}-{seed}.npz"
    try:
        with np.load(path) as kept:
            if np.array_equal(kept["labels"], y):
                return kept["train"], kept["test"]
    except (OSError, KeyError, ValueError):
        pass
    from sklearn.model_selection import train_test_split
    train, test = train_test_split(np.arange(len(y)), test_size=test_size, random_state=seed,
                                   stratify=y)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, part = tempfile.mkstemp(dir=path.parent, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, train=train, test=test, labels=y)
        os.replace(part, path)
    except OSError:
        pass                                # a read-only home: computed again next time
    return train, test


def wave(m: int = 200, freq: float = 2.0, amp: float = 1.0, noise: float = 0.1,
         seed: int = 0) -> Dataset:
    """x ~ U(−3, 3) as X (m, 1) float64, y = amp·sin(freq·x) + noise; theta = (freq, amp).

    Fitting h_θ(x) = θ₂ sin(θ₁ x) by least squares is non-convex in θ₁: lesson 01
    starts gradient descent from two θ₀ and lands in two different minima.
    """
    _positive_int("m", m)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3.0, 3.0, size=m)
    y = amp * np.sin(freq * x) + noise * rng.normal(size=m)
    return Dataset(x[:, None], y, np.array([freq, amp]))


def _labels(ds: Dataset | SparseDataset) -> np.ndarray:
    y = np.asarray(ds.y)
    if y.ndim == 1 and np.issubdtype(y.dtype, np.floating) and len(np.unique(y)) > 20:
        # regression targets: skew by quantile bins of y
        edges = np.quantile(y, np.linspace(0, 1, 11)[1:-1])
        return np.searchsorted(edges, y)
    return y.astype(np.int64)


def shard(ds: Dataset | SparseDataset, k: int, rank: int | None = None, skew: float = 0.0,
          seed: int = 0) -> list | Dataset | SparseDataset:
    """Split ``ds`` into ``k`` disjoint shards of (nearly) equal size (lessons 05, 10).

    ``skew=0``: a random split, every shard distributed like the whole (IID).
    ``skew=1``: sorted by label, so each shard holds mostly its own labels (non-IID);
    values between mix the two (a fraction ``skew`` of the examples is sorted by label,
    the rest dealt at random). Regression targets are binned into deciles first.
    Returns all shards as a list, or only shard ``rank``.
    """
    _positive_int("k", k)
    if k > len(ds):
        raise ValueError(f"cannot split {len(ds)} examples into k={k} shards")
    if not 0.0 <= skew <= 1.0:
        raise ValueError(f"skew must be between 0 (IID) and 1 (by label), got {skew!r}")
    if rank is not None and not 0 <= rank < k:
        raise ValueError(f"rank must be in 0..{k - 1}, got {rank!r}")
    rng = np.random.default_rng(seed)
    m = len(ds)
    order = rng.permutation(m)
    n_sorted = int(round(skew * m))
    sorted_part = order[:n_sorted]
    labels = _labels(ds)
    sorted_part = sorted_part[np.argsort(labels[sorted_part], kind="stable")]
    # The label-sorted examples are cut into k contiguous blocks (one per shard);
    # the rest are dealt round-robin, so every shard keeps (nearly) the same size.
    blocks = np.array_split(sorted_part, k)
    rest = order[n_sorted:]
    sizes = [len(b) for b in np.array_split(np.arange(m), k)]
    parts, start = [], 0
    for i in range(k):
        need = sizes[i] - len(blocks[i])
        take = rest[start:start + need] if need > 0 else rest[:0]
        start += max(need, 0)
        parts.append(np.sort(np.concatenate([blocks[i], take])))
    shards = [ds.subset(p) for p in parts]
    return shards if rank is None else shards[rank]
