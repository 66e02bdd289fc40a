"""One worker function, four engines: the course runtime, torchrun, Spark, Ray (lesson 11).

``sgd_summary`` is lesson 05's synchronous SGD (``data_parallel.engine.sync_sgd``) returning
plain data. The same function runs on ``Cluster.run``, under ``torchrun``, through
pyspark's ``TorchDistributor(local_mode=True)`` on a local Spark, and through Ray Train's
``TorchTrainer`` on a local Ray. Each ``run_*`` returns an ``EngineRun``: rank 0's summary,
the seconds from the call to the workers' first line (start-up) and the median step.
A worker that raises inside Spark or Ray surfaces as ``WorkerFailed`` naming its rank and
carrying its traceback, as the course runtime does. Spark and Ray are the optional extra
``engines`` (``ddl_lab.runtime.engines``: ``missing`` says how to install what is absent).
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from ddl_lab.runtime.engines import missing, require, spark_session, start_ray

__all__ = ["sgd_summary", "EngineRun", "WorkerFailed", "run_course", "run_torchrun",
           "run_spark", "run_ray", "accuracy", "compare", "summary_lines", "ENGINES",
           "missing", "spark_session", "start_ray"]

ENGINES = ("course runtime", "torchrun", "spark", "ray")


class WorkerFailed(RuntimeError):
    """A worker raised inside an engine: its rank and its traceback."""


@dataclass
class EngineRun:
    """One engine's run of ``sgd_summary``: rank 0's summary and the times around it."""

    engine: str
    summary: dict[str, Any]
    startup_s: float          # from the call to the workers' first line (engine already up)
    step_s: float             # median seconds per step, as rank 0 timed them
    engine_s: float = 0.0     # starting the engine itself, once (a Spark session, ray.init)

    @property
    def params(self) -> torch.Tensor:
        return torch.tensor(self.summary["params"])


def sgd_summary(workload: str = "digits-mlp", steps: int = 30, batch: int = 64,
                lr: float = 0.1, seed: int = 0) -> dict[str, Any]:
    """Worker function (every engine): lesson 05's ``sync_sgd``, as plain data — when this
    rank started (wall clock), its step times, losses and final parameters."""
    from ddl_lab.data_parallel.engine import sync_sgd
    entered = time.time()
    run = sync_sgd(workload, steps, batch, lr, seed=seed, barrier=False)
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "entered": entered,
            "time": list(run.time), "loss": [float(x) for x in run.loss],
            "params": run.params.tolist(), "pid": os.getpid()}


def accuracy(workload: str, params: torch.Tensor, seed: int = 0) -> float:
    """Test-set accuracy of ``workload``'s model with these flat parameters."""
    from ddl_lab.ml.workloads import build
    from ddl_lab.ml.models import set_flat_params
    from ddl_lab.ml.training import evaluate_accuracy
    model, _, test, _ = build(workload, seed)
    set_flat_params(model, params)
    return float(evaluate_accuracy(model, test))


# ------------------------------------------------------------------ the engines

def _guarded(fn: Callable, errdir: str, *args: Any) -> Any:
    """Run ``fn`` in an engine's worker: join the group from env:// if the engine did not,
    one thread as on the course runtime, and leave a traceback file if ``fn`` raises."""
    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    try:
        return fn(*args)
    except BaseException:
        Path(errdir, f"rank-{rank}.txt").write_text(traceback.format_exc())
        raise


def _surface(engine: str, errdir: str, error: BaseException | None) -> WorkerFailed | None:
    """The error of the lowest rank that raised, with its traceback; the engine's own error
    when no worker raised (None when there was none: TorchDistributor returns rank 0's
    result even when another rank failed)."""
    files = sorted(Path(errdir).glob("rank-*.txt"),
                   key=lambda p: int(p.stem.split("-")[1]))
    if not files:
        return error and WorkerFailed(f"{engine} failed before any worker raised: {error}")
    first = files[0]
    return WorkerFailed(f"{first.stem.replace('-', ' ')} raised inside {engine} "
                        f"(ranks that raised: {[int(p.stem[5:]) for p in files]}):\n"
                        f"{first.read_text()}")


def _finish(engine: str, called: float, summary: dict[str, Any],
            engine_s: float = 0.0) -> EngineRun:
    t = [0.0] + list(summary["time"])
    step = statistics.median(b - a for a, b in zip(t, t[1:])) if len(t) > 1 else 0.0
    return EngineRun(engine, summary, summary["entered"] - called, step, engine_s)


def run_course(n: int, *args: Any, fn: Callable = sgd_summary, timeout: float = 120.0
               ) -> EngineRun:
    """A fresh ``Cluster(n)`` (its start-up counted), ``fn(*args)`` on every rank."""
    from ddl_lab import Cluster
    called = time.time()
    with Cluster(n, echo=False) as cluster:
        out = cluster.run_with(fn, args, timeout=timeout)
    return _finish("course runtime", called, out[0])


def run_torchrun(n: int, *args: Any, target: str = "ddl_lab.scaling_out.engines:sgd_summary",
                 timeout: float = 120.0) -> EngineRun:
    """``torchrun --standalone --nproc-per-node=n -m ddl_lab.torchrun target args``."""
    from .launch import run_jobs, torchrun_command
    called = time.time()
    job = run_jobs([torchrun_command(target, *args, nproc=n)], timeout)[0]
    job.raise_for_failure()
    return _finish("torchrun", called, job.results()[0])


def run_spark(n: int, *args: Any, fn: Callable = sgd_summary, engine_s: float = 0.0) -> EngineRun:
    """``TorchDistributor(num_processes=n, local_mode=True, use_gpu=False).run(fn, *args)`` on
    the active Spark session (``spark_session()``); rank 0's result comes back."""
    require("spark")
    from pyspark.ml.torch.distributor import TorchDistributor
    errdir = tempfile.mkdtemp(prefix="ddl-spark-")
    called = time.time()
    try:
        out = TorchDistributor(num_processes=n, local_mode=True, use_gpu=False).run(
            functools.partial(_guarded, fn, errdir), *args)
    except Exception as e:
        raise _surface("Spark's TorchDistributor", errdir, e) from e
    else:
        failed = _surface("Spark's TorchDistributor", errdir, None)
        if failed:
            raise failed
    finally:
        shutil.rmtree(errdir, ignore_errors=True)
    return _finish("Spark TorchDistributor", called, out, engine_s)


def _ray_loop(config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker``: the same function; rank 0 reports its result
    as a checkpoint (every rank must call ``report``; the trainer keeps rank 0's)."""
    import ray.train
    out = _guarded(config["fn"], config["errdir"], *config["args"])
    with tempfile.TemporaryDirectory(prefix="ddl-ray-ckpt-") as folder:
        checkpoint = None
        if dist.get_rank() == 0:
            torch.save(out, Path(folder, "summary.pt"))
            checkpoint = ray.train.Checkpoint.from_directory(folder)
        ray.train.report({"final_loss": out["loss"][-1] if out["loss"] else None},
                         checkpoint=checkpoint)


def run_ray(n: int, *args: Any, fn: Callable = sgd_summary, engine_s: float = 0.0) -> EngineRun:
    """Ray Train's ``TorchTrainer`` with ``n`` CPU workers (``ScalingConfig``) on the local
    Ray (``start_ray()``); rank 0's result comes back through ``ray.train.report``."""
    require("ray")
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    errdir = tempfile.mkdtemp(prefix="ddl-ray-")
    called = time.time()
    try:
        trainer = TorchTrainer(_ray_loop, train_loop_config={"fn": fn, "args": args,
                                                             "errdir": errdir},
                               scaling_config=ScalingConfig(num_workers=n, use_gpu=False),
                               run_config=RunConfig(storage_path=errdir, name="sgd"))
        result = _keeping_ctrl_c(trainer.fit)
        with result.checkpoint.as_directory() as folder:
            summary = torch.load(Path(folder, "summary.pt"))
    except Exception as e:
        raise _surface("Ray Train's TorchTrainer", errdir, e) from e
    finally:
        shutil.rmtree(errdir, ignore_errors=True)
    return _finish("Ray Train TorchTrainer", called, summary, engine_s)


def _keeping_ctrl_c(fit: Callable[[], Any]) -> Any:
    """``fit()``, then the SIGINT handler that was there before: Ray Train's ``fit`` leaves
    one behind that swallows Ctrl-C (it asks the finished run to abort), so an interrupted
    cell, and an interrupted ``Cluster.run``, would no longer stop."""
    if threading.current_thread() is not threading.main_thread():
        return fit()
    before = signal.getsignal(signal.SIGINT)
    try:
        return fit()
    finally:
        signal.signal(signal.SIGINT, before)


def _timed_start(start: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    start()
    return time.perf_counter() - t0


def compare(n: int = 2, *args: Any, engines: tuple[str, ...] = ENGINES,
            say: Callable[[str], None] = print) -> list[EngineRun]:
    """``sgd_summary(*args)`` on ``n`` workers on each engine in turn; an engine whose extra
    (or Java) is missing is skipped, saying how to install it."""
    runs = []
    for name in engines:
        if name in ("spark", "ray") and missing(name):
            say(f"{name}: skipped — {missing(name)}")
        elif name == "spark":
            runs.append(run_spark(n, *args, engine_s=_timed_start(spark_session)))
        elif name == "ray":
            runs.append(run_ray(n, *args, engine_s=start_ray()))
        else:
            runs.append((run_course if name == "course runtime" else run_torchrun)(n, *args))
    return runs


def summary_lines(runs: list[EngineRun], workload: str = "digits-mlp") -> list[str]:
    """One line per engine: start-up and step time (× the first run's), the largest
    parameter difference from the first run, test accuracy."""
    base = runs[0]
    out = [f"{'engine':<24}{'engine start':>13}{'job start-up':>14}{'per step':>16}"
           f"{'max |Δθ|':>11}{'accuracy':>10}"]
    for r in runs:
        gap = float((r.params - base.params).abs().max())
        out.append(f"{r.engine:<24}{r.engine_s:>11.1f} s{r.startup_s:>8.1f} s "
                   f"{r.startup_s / base.startup_s:>4.1f}×{1e3 * r.step_s:>8.2f} ms "
                   f"{r.step_s / base.step_s:>4.1f}×{gap:>11.1e}"
                   f"{accuracy(workload, r.params):>10.1%}")
    return out
