"""Bad input: the public functions of every lesson package and the command line,
given wrong types, shapes, sizes, world sizes, τ, k, s, staleness bounds or paths, answer
with a ValueError/TypeError naming the argument and what was expected, raised by ddl_lab
itself (not from deep inside torch or numpy), and nothing starts before it."""
import subprocess
import sys
import threading
import traceback
from pathlib import Path

import dill
import numpy as np
import pytest
import torch

import ddl_lab
from ddl_lab import Cluster, launch
from ddl_lab.compression import compressors as C
from ddl_lab.gradient_descent import experiments as E
from ddl_lab.hogwild import engine as H
from ddl_lab.message_passing import comm as M, parallel_gd as PG, pregel as PR
from ddl_lab.ml.models import linreg_grad, linreg_loss
from ddl_lab.model_parallel import hybrid, stages, tensor_parallel
from ddl_lab.parallel_models import shared_memory as SM, speedup, threads
from ddl_lab.parameter_server import downpour as D, rules, sandblaster as SB
from ddl_lab.parameter_server.server import ParameterServer
from ddl_lab.ring_allreduce import cost, engine as R
from ddl_lab.runtime import dumps
from ddl_lab.scaling_out import federated as F

from .system import descendants

PACKAGE = str(Path(ddl_lab.__file__).parent)
X, Y = np.ones((6, 2)), np.ones(6)
T = torch.ones(4)


def problem():
    return D.digits_problem(example_cost=0.0)


def graph():
    return PR.web_graph(20)


def hogwild_problem():
    return H.sparse_problem(m=50, d=20)


def body(comm):
    return comm.rank


CASES = {
    # runtime (lesson 00)
    "Cluster world_size 0": (lambda: Cluster(0), "world_size"),
    "Cluster world_size '4'": (lambda: Cluster("4"), "world_size"),
    "Cluster timeout -1": (lambda: Cluster(2, timeout=-1), "timeout"),
    "Cluster num_threads 0": (lambda: Cluster(2, num_threads=0), "num_threads"),
    "Cluster num_threads '2'": (lambda: Cluster(2, num_threads="2"), "num_threads"),
    "Cluster backend": (lambda: Cluster(2, backend="mpi"), "backend"),
    "launch a non-function": (lambda: launch(42, 2), "function"),
    "launch world_size -2": (lambda: launch(print, -2), "world_size"),
    # 01 gradient descent
    "record_run epochs -1": (lambda: E.record_run(X, Y, linreg_grad, linreg_loss, 0.1, -1, 2),
                             "epochs"),
    "record_run batch_size 0": (lambda: E.record_run(X, Y, linreg_grad, linreg_loss, 0.1, 1, 0),
                                "batch_size"),
    "record_run lr -1": (lambda: E.record_run(X, Y, linreg_grad, linreg_loss, -1.0, 1, 2), "lr"),
    "record_run y of another length": (
        lambda: E.record_run(X, np.ones(5), linreg_grad, linreg_loss, 0.1, 1, 2), "y has 5"),
    "gd_path steps -1": (lambda: E.gd_path(np.zeros(2), X, Y, linreg_grad, 0.1, -1), "steps"),
    # 02 parallel models
    "parallel_for num_threads 0": (lambda: threads.parallel_for(abs, 10, num_threads=0),
                                   "num_threads"),
    "parallel_for schedule": (lambda: threads.parallel_for(abs, 10, schedule="eager"),
                              "schedule"),
    "parallel_for chunk 0": (lambda: threads.parallel_for(abs, 10, chunk=0), "chunk"),
    "parallel_for iterations -3": (lambda: threads.parallel_for(abs, -3), "iterations"),
    "static_chunks num_threads 0": (lambda: threads.static_chunks(10, 0), "num_threads"),
    "amdahl p 1.5": (lambda: speedup.amdahl(1.5, 4), "p"),
    "count_race processes 0": (lambda: SM.count_race(processes=0), "processes"),
    "count_race method": (lambda: SM.count_race(method="prayer"), "method"),
    # 03 hogwild
    "sparse_problem d 0": (lambda: H.sparse_problem(m=10, d=0), "d"),
    "hogwild run mode": (lambda: H.run(hogwild_problem(), mode="wild"), "mode"),
    "hogwild run processes 0": (lambda: H.run(hogwild_problem(), processes=0), "processes"),
    "hogwild run delay -1": (lambda: H.run(hogwild_problem(), delay=-1), "delay"),
    # 04 message passing
    "comm_run world_size 0": (lambda: M.comm_run(body, 0), "world_size"),
    "comm_run timeout 0": (lambda: M.comm_run(body, 2, timeout=0), "timeout"),
    "split_sizes k 0": (lambda: PG.split_sizes(10, 0), "k"),
    "run_parallel_gd world_size 0": (lambda: PG.run_parallel_gd(X, Y, 0), "world size"),
    "run_parallel_gd steps -1": (lambda: PG.run_parallel_gd(X, Y, 2, steps=-1), "steps"),
    "web_graph n 0": (lambda: PR.web_graph(0), "n"),
    "pagerank damping 1.5": (lambda: PR.pagerank_power(graph(), damping=1.5), "damping"),
    "pregel world_size 0": (lambda: PR.pregel_pagerank(graph(), world_size=0), "world_size"),
    # 06 ring allreduce
    "chunk_bounds parts 0": (lambda: R.chunk_bounds(10, 0), "parts"),
    "chunk_bounds length -1": (lambda: R.chunk_bounds(-1, 2), "length"),
    "allreduce algorithm": (lambda: R.allreduce(T, "hypercube"), "algorithm"),
    "allreduce ring segments 0": (lambda: R.allreduce(T, "ring", segments=0), "segments"),
    "allreduce a list": (lambda: R.allreduce([1.0, 2.0], "tree"), "torch.Tensor"),
    "ring_bytes world_size 0": (lambda: R.ring_bytes(0, 100), "world_size"),
    "cost_model algorithm": (lambda: cost.cost_model("hypercube", 4, 1e6, 1e-5, 1e-9),
                             "'hypercube'"),
    "cost_model n 0": (lambda: cost.cost_model("ring", 0, 1e6, 1e-5, 1e-9), "n"),
    # 07 parameter server
    "Setup replicas 0": (lambda: D.Setup(replicas=0), "replicas"),
    "Setup staleness bound -1": (lambda: D.Setup(mode="ssp", s=-1), "staleness bound s"),
    "Setup mode": (lambda: D.Setup(mode="eventual"), "mode"),
    "Setup lr -1": (lambda: D.Setup(lr=-1.0), "lr"),
    "Setup rule": (lambda: D.Setup(rule="adam"), "rule"),
    "downpour run tau 0": (lambda: D.run(problem(), algorithm="easgd", tau=0), "tau"),
    "ParameterServer shards 0": (lambda: ParameterServer(np.zeros(4), shards=0), "shards"),
    "ParameterServer shards > params": (lambda: ParameterServer(np.zeros(2), shards=3),
                                        "shards"),
    "ParameterServer timeout 0": (lambda: ParameterServer(np.zeros(4), timeout=0), "timeout"),
    "shard_ranges shards 'two'": (lambda: rules.shard_ranges(4, "two"), "shards"),
    "sandblaster replicas 0": (lambda: SB.run(problem(), replicas=0), "replicas"),
    "sandblaster slices 0": (lambda: SB.run(problem(), slices=0), "slices"),
    # 08 compression
    "Threshold τ 0": (lambda: C.Threshold(0.0), "τ"),
    "TopK ratio 0": (lambda: C.TopK(0.0), "ratio"),
    "TopK ratio 2": (lambda: C.TopK(2.0), "ratio"),
    "QSGD s 0": (lambda: C.QSGD(s=0), "s"),
    "QSGD s 300": (lambda: C.QSGD(s=300), "s"),
    "OneBit bucket 0": (lambda: C.OneBit(bucket=0), "bucket"),
    "Scheme name": (lambda: C.Scheme("gzip"), "compressor"),
    "ErrorFeedback of a string": (lambda: C.ErrorFeedback("topk"), "ErrorFeedback"),
    "encode a string": (lambda: C.FP32().encode("gradient"), "float tensor"),
    "encode integers": (lambda: C.TopK(0.5).encode(torch.arange(4)), "float"),
    "decode bytes of another compressor": (lambda: C.FP16().decode(b"\0" * 16, 4), "fp16"),
    # 09 model parallel
    "hybrid layout replicas 0": (lambda: hybrid.layout(0, 2), "replicas"),
    "cut p 0": (lambda: stages.cut(stages.build_layers(), 0), "p"),
    "microbatches m 0": (lambda: stages.microbatches(torch.ones(4, 2), torch.ones(4), 0), "m"),
    "tensor shard n 0": (lambda: tensor_parallel.shard(torch.ones(4, 4), 0, 0, 0), "n"),
    # 11 scaling out
    "federated K 0": (lambda: F.federated(K=0), "K"),
    "federated C 1.5": (lambda: F.federated(C=1.5), "C"),
    "federated E 0": (lambda: F.federated(E=0), "E"),
    "federated B 0": (lambda: F.federated(B=0), "B"),
}


class Births:
    """Every process started below this one while active (sampled every 10 ms)."""

    def __enter__(self):
        self.before, self.seen, self.done = descendants(), set(), threading.Event()
        self.thread = threading.Thread(target=self._watch)
        self.thread.start()
        return self

    def _watch(self):
        while not self.done.wait(0.01):
            self.seen |= descendants() - self.before

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("call, argument", CASES.values(), ids=CASES.keys())
def test_bad_input_is_a_clear_error_naming_the_argument(call, argument):
    with Births() as births, pytest.raises((ValueError, TypeError)) as e:
        call()
    where = traceback.extract_tb(e.tb)[-1]
    assert where.filename.startswith(PACKAGE), (
        f"raised in {where.filename}:{where.lineno}, not by ddl_lab: {e.value!r}")
    assert argument in str(e.value), f"{e.value!r} does not name {argument!r}"
    assert not births.seen, "processes were started for nothing"


# ------------------------------------------------------------------ the command line

def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ddl_lab", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd)


@pytest.mark.parametrize("args, says", [
    (["execute", "no/such/lesson.ipynb"], "no/such/lesson.ipynb"),
    (["execute", "notes.txt"], "notes.txt"),
    (["progress", "--file", "no/such/progress.json"], "no/such/progress.json"),
    (["grade", "no/such/folder"], "no/such/folder"),
    (["grade", ".", "--jobs", "0"], "--jobs"),
    (["grade", ".", "--timeout", "-5"], "--timeout"),
    (["grade", ".", "--exercise", "99"], "99"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_the_command_line_names_a_bad_path_or_option(tmp_path, args, says):
    (tmp_path / "notes.txt").write_text("not a notebook")
    done = cli(*args, cwd=tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert says in done.stderr + done.stdout


# ------------------------------------------------------------------ what notebooks write

def test_cell_functions_that_call_each_other_or_name_a_collective_travel(cell):
    """dill alone loops forever on these (RecursionError): the runtime must send them."""
    ns = cell("""
        import torch.distributed as dist
        op = dist.all_reduce
        def is_even(n):
            return True if n == 0 else is_odd(n - 1)
        def is_odd(n):
            return False if n == 0 else is_even(n - 1)
        def step(t):
            op(t)
            return is_even(4)
    """)
    for name in ("is_even", "step"):
        fn = dill.loads(dumps(ns[name]))
        assert fn.__name__ == name
    assert dill.loads(dumps(ns["is_odd"]))(3)
