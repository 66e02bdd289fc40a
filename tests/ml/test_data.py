"""Synthetic and bundled data sets: shapes, determinism, sparsity, sharding."""
import numpy as np
import pytest

from ddl_lab.ml import data


def test_linear_regression_is_deterministic_and_fits_its_truth():
    a = data.linear_regression(500, 4, noise=0.1, seed=3)
    b = data.linear_regression(500, 4, noise=0.1, seed=3)
    np.testing.assert_array_equal(a.X, b.X)
    assert a.X.shape == (500, 4) and a.y.shape == (500,) and a.X.dtype == np.float32
    assert len(a) == 500
    fit = np.linalg.lstsq(a.X, a.y, rcond=None)[0]
    np.testing.assert_allclose(fit, a.theta, atol=0.02)
    assert not np.array_equal(a.X, data.linear_regression(500, 4, seed=4).X)
    X, y = a.tensors()
    assert X.shape == (500, 4) and str(y.dtype) == "torch.float32"


def test_sparse_logistic_has_few_frequent_and_many_rare_features():
    ds = data.sparse_logistic(m=2000, d=500, nnz=8, seed=0)
    assert ds.idx.shape == ds.val.shape == (2000, 8) and ds.idx.dtype == np.int64
    assert ds.val.dtype == np.float32 and set(np.unique(ds.y)) == {0.0, 1.0}
    assert all(len(set(row)) == 8 for row in ds.idx[:100])          # distinct per example
    counts = np.sort(ds.feature_counts())[::-1]
    assert counts[0] > 0.5 * 2000 and np.median(counts) < 0.02 * 2000
    dense = ds.dense()
    assert dense.shape == (2000, 500) and (dense != 0).sum(axis=1).tolist() == [8] * 2000
    np.testing.assert_array_equal(ds.idx, data.sparse_logistic(m=2000, d=500, nnz=8).idx)


def test_digits_split_is_scaled_and_stratified():
    train, test = data.digits(test_size=0.25, seed=0)
    assert train.X.shape[1] == 64 and len(train) + len(test) == 1797
    assert train.X.dtype == np.float32 and train.y.dtype == np.int64
    assert 0.0 <= train.X.min() and train.X.max() == 1.0
    assert set(np.bincount(test.y)) <= set(range(40, 50))


@pytest.mark.parametrize("make", [lambda: data.digits()[0],
                                  lambda: data.sparse_logistic(999, 50, 3),
                                  lambda: data.linear_regression(1001)])
def test_shards_partition_the_data(make):
    ds = make()
    shards = data.shard(ds, 4, seed=1)
    assert sum(len(s) for s in shards) == len(ds)
    assert max(len(s) for s in shards) - min(len(s) for s in shards) <= 1
    y_all = np.sort(np.concatenate([s.y for s in shards]))
    np.testing.assert_array_equal(y_all, np.sort(ds.y))
    one = data.shard(ds, 4, rank=2, seed=1)
    np.testing.assert_array_equal(one.y, shards[2].y)


def test_skew_concentrates_labels():
    train, _ = data.digits()
    def top_label_share(skew):
        return np.mean([np.bincount(s.y).max() / len(s) for s in data.shard(train, 5, skew=skew)])
    iid, half, by_label = top_label_share(0.0), top_label_share(0.5), top_label_share(1.0)
    assert iid < 0.15 and by_label >= 0.5 and iid < half < by_label


def test_bad_arguments_say_what_to_do():
    ds = data.linear_regression(10)
    with pytest.raises(ValueError, match="skew"):
        data.shard(ds, 2, skew=2)
    with pytest.raises(ValueError, match="rank"):
        data.shard(ds, 2, rank=2)
    with pytest.raises(ValueError, match="k=11"):
        data.shard(ds, 11)
    with pytest.raises(ValueError, match="nnz"):
        data.sparse_logistic(d=5, nnz=6)
    with pytest.raises(ValueError, match="m must be"):
        data.linear_regression(0)


def test_digits_are_scikit_learns_split_read_without_importing_it(tmp_path, monkeypatch):
    """The file scikit-learn ships and its stratified split, the split cached: a later
    process reads both without scikit-learn's 1.5 CPU-s import; a cache that cannot be
    written, or that holds other labels, is computed again."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from ddl_lab.ml import data
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    raw = load_digits()
    X = (raw.data / 16.0).astype(np.float32)
    for test_size, seed in ((0.25, 0), (0.3, 7)):
        want = train_test_split(X, raw.target.astype(np.int64), test_size=test_size,
                                random_state=seed, stratify=raw.target)
        for _ in range(2):                               # computed, then from the cache
            train, test = data.digits(test_size, seed)
            got = (train.X, test.X, train.y, test.y)
            assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(got, want))
    assert len(list((tmp_path / "cache" / "ddl_lab").glob("digits-split-*.npz"))) == 2
    fresh = subprocess.run([sys.executable, "-c", "import sys; from ddl_lab.ml.data import "
                            "digits; digits(); print('sklearn' in sys.modules)"],
                           capture_output=True, text=True)
    assert fresh.stdout.strip() == "False", fresh.stderr
    path, = (tmp_path / "cache" / "ddl_lab").glob("digits-split-*-0.25-0.npz")
    np.savez(path, train=np.arange(3), test=np.arange(3), labels=np.zeros(3, np.int64))
    assert np.array_equal(data.digits()[1].y, _default_test_labels())
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc/not-writable")
    assert len(data.digits()[0].y) == len(raw.target) - len(data.digits()[1].y)


def _default_test_labels():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    raw = load_digits()
    return train_test_split(raw.target.astype(np.int64), test_size=0.25, random_state=0,
                            stratify=raw.target)[1]
