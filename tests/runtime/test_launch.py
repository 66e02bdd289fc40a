"""The launch shapes users arrive with (README, \"Bring your own code\"): tutorial-style ``run(rank, size)``
functions run unchanged, and the runtime's options never take the function's own
keyword arguments."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from ddl_lab import Cluster, WorkerError, launch, launch_with, rank_size

from .notebook import Notebook


@pytest.fixture(scope="module")
def cluster2():
    with Cluster(2, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def tutorial():
    nb = Notebook()
    nb.cell('''
        import torch
        import torch.distributed as dist

        def run(rank, size):
            """All-reduce example, as in "Writing Distributed Applications with PyTorch"."""
            group = dist.new_group(list(range(size)))
            tensor = torch.ones(1)
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
            return rank, size, tensor[0].item()
    ''')
    return nb


def test_a_tutorial_run_rank_size_runs_unchanged(cluster2, tutorial):
    assert cluster2.run(rank_size(tutorial["run"])) == [(0, 2, 2.0), (1, 2, 2.0)]
    assert launch(rank_size(tutorial["run"]), 3) == [(r, 3, 3.0) for r in range(3)]


def test_calling_it_directly_says_to_use_rank_size(cluster2, tutorial):
    with pytest.raises(WorkerError, match=r"missing 2 required positional arguments.*"
                       r"A tutorial-style run\(rank, size\)\? Run it as "
                       r"launch\(rank_size\(run\), n\)"):
        cluster2.run(tutorial["run"])


def _echo_options(x, *, timeout, backend):
    return x, timeout, backend


def test_launch_hands_every_keyword_argument_to_the_function():
    assert launch(_echo_options, 1, 7, timeout=0.25, backend="mine") == [(7, 0.25, "mine")]


def test_runtime_options_go_to_launch_with_and_run_with(cluster2):
    got = launch_with(_echo_options, 1, (7,), {"timeout": 1, "backend": "b"}, timeout=None,
                      backend="gloo")
    assert got == [(7, 1, "b")]
    assert cluster2.run_with(_echo_options, (1,), {"timeout": 2, "backend": "c"},
                             timeout=10) == [(1, 2, "c")] * 2


def test_a_stray_runtime_option_says_where_options_go(cluster2):
    with pytest.raises(WorkerError, match=r"unexpected keyword argument 'timeout'.*"
                       r"runtime options go to cluster\.run_with"):
        cluster2.run(torch.zeros, 3, timeout=5)
    assert cluster2.run(dist.get_rank) == [0, 1]


def test_a_run_rank_size_module_runs_under_torchrun(tmp_path):
    (tmp_path / "tutorial.py").write_text(textwrap.dedent("""
        import torch
        import torch.distributed as dist
        from ddl_lab import rank_size

        def run(rank, size, scale):
            t = torch.tensor([float(rank)]) * scale
            dist.all_reduce(t)
            return size, t.item()

        main = rank_size(run)
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          "-m", "ddl_lab.torchrun", "tutorial:main", "10"],
                         capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rank 0: (2, 10.0)" in out.stdout and "rank 1: (2, 10.0)" in out.stdout
