"""Lesson 11's pictures, on small made-up records, and its self-check quiz."""
import matplotlib.pyplot as plt
import torch

from ddl_lab.data_parallel.workloads import Run
from ddl_lab.scaling_out import plots
from ddl_lab.scaling_out.calculator import Fit
from ddl_lab.scaling_out.elastic import ElasticRun
from ddl_lab.scaling_out.federated import FedRun


def texts(ax) -> str:
    return " ".join(t.get_text() for t in ax.texts)


def test_two_hosts_show_ranks_env_and_the_bytes_each_way():
    ranks = [{"rank": r, "addr": f"10.200.0.{1 + r // 2}",
              "env": {"RANK": str(r), "LOCAL_RANK": str(r % 2)}} for r in range(4)]
    ax = plots.plot_two_hosts(ranks, {"ns-a": {"rx": 5, "tx": 96e6}, "ns-b": {"rx": 96e6,
                                                                            "tx": 5e6}})
    assert "A → B 96.0 MB" in texts(ax) and "B → A 5.0 MB" in texts(ax)
    assert "host B: 10.200.0.2" in texts(ax) and "LOCAL_RANK=1" in texts(ax)
    plt.close("all")


def test_the_elastic_picture_marks_the_kill_and_the_resume():
    log = [{"event": "start", "attempt": 0, "step": 0, "world": 2}] + \
          [{"event": "step", "attempt": 0, "step": s, "loss": 2.0 - s / 100} for s in range(1, 8)] + \
          [{"event": "checkpoint", "attempt": 0, "step": 5},
           {"event": "start", "attempt": 1, "step": 5, "world": 2}] + \
          [{"event": "step", "attempt": 1, "step": s, "loss": 2.0 - s / 100} for s in range(6, 11)]
    run = ElasticRun([], log, torch.zeros(3), "")
    ax = plots.plot_elastic(run)
    assert "killed after step 7" in texts(ax) and "resumed from checkpoint 5" in texts(ax)
    assert [a["start"] for a in run.attempts()] == [0, 5] and run.checkpoints() == [5]
    plt.close("all")


def test_ddp_federated_and_calculator_figures_have_their_panels():
    r = Run(0, loss=[1.0, 0.9], time=[0.01, 0.02], rounds=2)
    assert len(plots.figure_ddp({"a": [r], "b": [r]}).axes) == 2
    fed = FedRun("x", [0.1, 0.5], [0, 10], [0.3])
    assert len(plots.figure_federated([fed], FedRun("c", [0.1, 0.9], [0, 4])).axes) == 3
    ax = plots.plot_calculator(Fit(0, 1e-5, 1e-4, 1e-9, 2, 1000), 64, {1: 1e-3, 2: 2e-3})
    assert len(ax.patches) == 16                                    # 8 × (compute + comm)
    assert ax.get_title().startswith("modelled") and "φ = 0.00" in ax.get_title()
    f = Fit(0, 1e-5, 1e-4, 1e-9, 2, 1000).with_overlap(0.5, "test", bucket_bytes=400)
    ax = plots.plot_calculator(f, 64, {1: 1e-3}, alone=1.5e-3)
    assert len(ax.patches) == 24                                    # + the hidden allreduce
    labels = ax.get_legend_handles_labels()[1]
    assert "one process, measured" in labels and "measured step" in labels
    assert not any("measured" in x for x in labels if x.startswith("modelled"))
    ax = plots.plot_seed_case([{"link_gbit": 1, "overlap": p, "workers": n, "speedup": n ** 0.5}
                               for p in (0.0, 1.0) for n in (1, 8)])
    assert "modelled" in ax.get_title() and len(ax.lines) == 3     # 2 overlaps + perfect
    plt.close("all")


def test_the_quiz_grades_its_answers():
    from ddl_lab.active import load_quiz
    q = load_quiz("scaling_out")
    assert q[0].grade("the mean of all ranks' gradients") and not q[0].grade("rank 0's gradient, broadcast")
    assert q[3].grade(2.5) and not q[3].grade(2.0)                  # FedAvg weighs by n_k
    assert all(q_.explanation() for q_ in q)
