"""The course's own runs against this machine (lesson 13 §2, ``performance.runs``): each model's
FLOPs counted by its rule, its MFU their ratio to a step's time and the peak; §5's panel step
profiled on real workers, its merged trace one process per rank."""
import json

import pytest
from torch import nn

from ddl_lab.ml.workloads import build
from ddl_lab.performance import flops as F
from ddl_lab.performance import runs as U
from ddl_lab import Cluster
from ddl_lab.transformers.train import MODEL


def test_each_course_run_is_counted_by_its_rule_and_its_mfu_is_the_ratio():
    rows = {r["name"]: r for r in U.course_mfu(peak=1e11, repeats=1)}
    assert list(rows) == ["MLP", "CNN", "GPT"]
    mlp = build("digits-mlp")[0]
    n = sum(m.weight.numel() for m in mlp.modules() if isinstance(m, nn.Linear))
    assert rows["MLP"]["flops"] == 6 * n * U.COURSE_BATCH["MLP"]
    assert rows["GPT"]["flops"] == F.step_flops(MODEL, U.COURSE_BATCH["GPT"])
    cnn = build("digits-cnn")[0]
    weights = sum(p.numel() for p in cnn.parameters())
    # a convolution uses each weight at every position: far more than 6 FLOPs a weight
    assert rows["CNN"]["flops"] > 6 * weights * U.COURSE_BATCH["CNN"]
    for r in rows.values():
        assert r["seconds"] > 0
        assert r["mfu"] == pytest.approx(r["flops"] / (r["seconds"] * 1e11))


def test_the_panel_profiles_a_ddp_step_of_every_rank_and_merges_it(tmp_path):
    with Cluster(2, timeout=60) as cluster:
        run = U.panel_run(cluster, str(tmp_path), hidden=32, batch=2, bucket_mb=0.02, peak=1e11)
    trace = json.loads(open(run.trace).read())
    names = sorted(e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name")
    assert names == ["rank 0", "rank 1"]
    assert [r["rank"] for r in run.summary] == [0, 1]
    assert all(r["count"] > 1 and 0 <= r["overlap"] <= 1 for r in run.summary)   # buckets
    assert run.params == F.gpt_matmul_params(U.panel_config(32))
    assert run.mfu == pytest.approx(F.step_flops(U.panel_config(32), 2) / (run.seconds * 1e11))
    assert [op.name for op in run.ops] == ["matmul", "attention", "LayerNorm", "GELU"]
    assert all(op.seconds > 0 for op in run.ops)


def test_the_mfu_picture_has_one_bar_per_run_at_its_share():
    import matplotlib.pyplot as plt

    from ddl_lab.performance.plots import plot_mfu
    rows = [{"name": "MLP", "mfu": 0.12}, {"name": "GPT", "mfu": 0.43}]
    _, ax = plt.subplots()
    plot_mfu(rows, ax=ax)
    assert [round(p.get_width(), 6) for p in ax.patches] == [12.0, 43.0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["MLP", "GPT"]
    plt.close(ax.figure)
