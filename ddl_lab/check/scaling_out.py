"""Checks for lesson 11 (scaling out): FedAvg's aggregation and checkpoint/resume on real workers;
a multi-host layout's env:// settings, met by real processes; when workers pay; a FedAvg plan."""
from __future__ import annotations

import functools
import os
import tempfile
from typing import Any, Callable

import numpy as np

from ddl_lab.runtime.costs import ring_time, star_time

from . import _answers as answers
from ._core import call_local, fail, judge, name_of, on_workers, passed, stub_message, task
from ._diagnose import describe_value, differs, explain, table
from ._trial import Trial

__all__ = ["fedavg", "resume", "rendezvous_env", "best_workers", "fedavg_plan"]

WORKERS = 3


def _stub_first(fn: Callable, *args: Any) -> None:
    """The stub reported here, before any worker starts (other errors: on the workers)."""
    try:
        fn(*args)
    except NotImplementedError:
        fail(stub_message(fn))
    except Exception:
        pass


# ------------------------------------------------------------------ task 1: FedAvg

def _fed_case(rng: np.random.Generator) -> dict[str, Any]:
    K = int(rng.integers(1, 9))
    return {"K": K, "sizes": [int(s) for s in rng.integers(1, 200, size=K)],
            "dtype": str(rng.choice(["float32", "float64"])), "d": int(rng.integers(1, 6))}


def _client_states(case: dict, k: int) -> dict:
    """Client k's model after a real local SGD step on its own data (every rank agrees)."""
    import torch
    dtype = getattr(torch, case["dtype"])
    torch.manual_seed(1000 * case["seed"] + k)
    model = torch.nn.Linear(case["d"], 3).to(dtype)
    X = torch.randn(case["sizes"][k], case["d"], dtype=dtype) * (k + 1)
    y = torch.randint(3, (case["sizes"][k],))
    torch.nn.functional.cross_entropy(model(X), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    return {k_: v.detach().clone() for k_, v in model.state_dict().items()}


def _fed_rounds(fn: Callable, cases: list[dict]) -> list | None:
    """Worker: per case, clients k live on rank k mod R; rank 0 (the server) gathers their
    states and sizes and calls the learner's aggregation. Rank 0 returns what it saw."""
    import torch.distributed as dist
    rank, n = dist.get_rank(), dist.get_world_size()
    out = []
    for case in cases:
        mine = [(k, case["sizes"][k], _client_states(case, k)) for k in range(case["K"])
                if k % n == rank]
        gathered = [None] * n if rank == 0 else None
        dist.gather_object(mine, gathered, dst=0)
        if rank == 0:
            _, sizes, states = map(list, zip(*sorted(c for part in gathered for c in part)))
            before = [{k: v.clone() for k, v in s.items()} for s in states]
            out.append((before, sizes, fn(states, sizes), states))
    return out if rank == 0 else None


def _mean(states: list[dict], weights: list[float], divide: float) -> dict:
    return {k: sum(w * s[k].double() for w, s in zip(weights, states)) / divide for k in states[0]}


def _fed_message(name: str, before: list[dict], sizes: list[int], got: Any,
                 after: list[dict], case: Any) -> str | None:
    """None if ``got`` is the weighted average, else what the learner's code did."""
    K, total = len(sizes), sum(sizes)
    for k, (b, a) in enumerate(zip(before, after)):
        if any(differs(b[key], a[key], rtol=0.0) for key in b):
            return (f"{name} changed client {k}'s state in place: it accumulated into the "
                    "clients' own tensors. Build new tensors (e.g. `total = n * w` or "
                    f"`sum(...)`) and leave the clients' models as they were. [{case}]")
    if not isinstance(got, dict):
        return (f"{name} returned {describe_value(got)}: return the new global model as a "
                f"dict, key → tensor, like the clients' state_dicts. [{case}]")
    if set(got) != set(before[0]):
        return (f"{name} returned keys {sorted(got)}; the clients' state_dicts have "
                f"{sorted(before[0])}: average every entry. [{case}]")
    want = _mean(before, sizes, total)
    bad = {key: differs(want[key].to(before[0][key].dtype), got[key]) for key in want}
    if (key := next((k for k, v in bad.items() if v), None)) is None:
        return None
    mistakes = {
        "it averaged the clients equally (Σ w_k / K): with unequal data, weight each "
        "client by its size n_k — w = Σ n_k·w_k / Σ n_k": _mean(before, [1] * K, K),
        "it divided the weighted sum by the number of clients K; divide by the total "
        "number of examples Σ n_k": _mean(before, sizes, K),
        "it returned the weighted SUM Σ n_k·w_k without dividing by Σ n_k":
            _mean(before, sizes, 1),
        "it weighted each client by 1/n_k — the small clients count most; weight by n_k":
            _mean(before, [1 / s for s in sizes], sum(1 / s for s in sizes)),
        "it returned one client's model: average over all of them": before[-1],
    }
    hint = explain(got[key], {m: v[key] for m, v in mistakes.items()})
    detail = f"entry {key!r}: {bad[key]}"
    return (f"{name}: {hint} ({detail}) [{case}]" if hint else
            f"{name}: {detail}; expected Σ n_k·w_k / Σ n_k. [{case}]")


@task("scaling_out", refuses=("ddl_lab.scaling_out", "fedavg", "federated"))
def fedavg(my_fedavg: Callable, seed: int = 0) -> None:
    """Lesson 11, task 1: ``my_fedavg(states, sizes)`` — the server's step of FedAvg: the
    clients' state_dicts averaged entry by entry, client k weighted by its data size n_k:
    w = Σ n_k·w_k / Σ n_k, as a new dict (the clients' tensors unchanged)."""
    import torch
    _stub_first(my_fedavg, [{"w": torch.ones(1)}], [1])
    fixed = table("K sizes dtype d", (3, [10, 50, 200], "float32", 4), (1, [7], "float64", 2),
                  (2, [1, 99], "float64", 3), (5, [3, 3, 3, 3, 3], "float32", 1))
    trial = Trial("fedavg", my_fedavg, seed, fixed, draws=4, draw=_fed_case)
    payload = [{**c.params, "seed": seed * 100 + c.index} for c in trial]
    got = on_workers(_fed_rounds, WORKERS, my_fedavg, payload, fn=my_fedavg)[0]
    for case, (before, sizes, answer, after) in zip(trial, got):
        judge(_fed_message(name_of(my_fedavg), before, sizes, answer, after, case))
    passed("fedavg", f"the server on rank 0 averaged real client models from {WORKERS} "
           f"workers in {len(trial)} rounds (1–{max(c.params['K'] for c in trial)} clients, "
           "unequal sizes, float32 and float64), weighted by n_k")


# ------------------------------------------------------------------ task 2: checkpoint, resume

def _resume_case(rng: np.random.Generator) -> dict[str, Any]:
    every = int(rng.integers(2, 5))
    steps = int(rng.integers(3 * every, 5 * every))
    return {"steps": steps, "every": every, "kill": int(rng.integers(1, steps - 1)),
            "opt": str(rng.choice(["sgd", "adam"])), "dtype": str(rng.choice(["float32",
                                                                              "float64"]))}


def _train(case: dict, path: str, save: Callable | None, load: Callable | None,
           kill: int = -1) -> tuple[Any, Any]:
    """Worker: one attempt of the case's training — ``load`` (resume), sync SGD over the
    ranks, ``save`` every k steps on rank 0, stop before step ``kill``. Returns (what
    ``load`` returned, the final parameters, or None if stopped or the step is not an int)."""
    import torch
    import torch.distributed as dist

    from ddl_lab.ml.models import flat_params
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(case["seed"])                  # a restart runs the same code again
    model = torch.nn.Linear(3, 2).to(getattr(torch, case["dtype"]))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if case["opt"] == "sgd" \
        else torch.optim.Adam(model.parameters(), lr=0.05)
    start = load(path, model, opt) if load else 0
    if answers.whole(start) is None:
        return start, None
    for t in range(answers.whole(start), case["steps"]):
        if t == kill:
            return start, None
        g = torch.Generator().manual_seed(case["seed"] * 1000 + 10 * t + rank)
        X = torch.randn(4, 3, generator=g).to(model.weight.dtype)
        y = torch.randn(4, 2, generator=g).to(model.weight.dtype)
        opt.zero_grad()
        ((model(X) - y) ** 2).mean().backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= n
        opt.step()
        if save and (t + 1) % case["every"] == 0:
            if rank == 0:
                save(path, t + 1, model, opt)
            dist.barrier()
    return start, flat_params(model).double().numpy()


def _reference_save(path, step, model, optimizer):
    import torch
    torch.save({"step": step, "model": model.state_dict(), "opt": optimizer.state_dict()}, path)


def _reference_load(skip: str) -> Callable:
    """The right resume, or one that forgets the ``skip`` part ('model' or 'optimizer')."""
    def load(path, model, optimizer):
        import torch
        if not os.path.exists(path):
            return 0
        s = torch.load(path, weights_only=True)
        if skip != "model":
            model.load_state_dict(s["model"])
        if skip != "optimizer":
            optimizer.load_state_dict(s["opt"])
        return s["step"]
    return load


def _resume_runs(save: Callable, load: Callable, cases: list[dict], folder: str) -> list | None:
    """Worker: per case, the learner's stopped-and-resumed run, the uninterrupted run, and
    the reference pair forgetting the model or the optimizer."""
    import torch.distributed as dist
    out = []
    for i, case in enumerate(cases):
        mine, ref = os.path.join(folder, f"{i}-mine.pt"), os.path.join(folder, f"{i}-ref.pt")
        try:
            first, _ = _train(case, mine, save, load, case["kill"])
        except FileNotFoundError:
            first = FileNotFoundError.__name__
        saved = os.path.exists(mine)
        resumed, got = _train(case, mine, save, load)
        _, want = _train(case, "", None, None)
        _train(case, ref, _reference_save, _reference_load(""), case["kill"])
        variants = {skip: _train(case, ref, None, _reference_load(skip))[1]
                    for skip in ("model", "optimizer")}
        out.append({"first": first, "saved": saved, "resumed": resumed, "got": got,
                    "want": want, "variants": variants})
    return out if dist.get_rank() == 0 else None


def _resume_message(name: str, r: dict, case: Any) -> str | None:
    p = case.params
    last = (p["kill"] // p["every"]) * p["every"]
    nofile = ("" if r["saved"] else " — and no file was at `path` after the first attempt: "
              "my_save_checkpoint must write the checkpoint to the path it is given")
    if r["first"] == "FileNotFoundError":
        return (f"{name} raised FileNotFoundError before any checkpoint existed: a fresh job "
                f"has none yet — if os.path.exists(path) is False, return 0. [{case}]")
    if answers.whole(r["first"]) != 0:
        return (f"{name} returned {describe_value(r['first'])} before any checkpoint "
                f"existed; with no file at `path` it must return 0. [{case}]")
    if answers.whole(r["resumed"]) is None:
        return (f"{name} returned {describe_value(r['resumed'])}; return the number of steps "
                f"the checkpoint had done, a whole number. [{case}]")
    if answers.whole(r["resumed"]) != last:
        off = {last + 1: " (one too many: the saved number is the steps DONE, which is also "
                         "the index of the next step to run)",
               last - 1: " (one too few: the run would repeat a step)",
               0: " (it started over: return the step stored in the checkpoint)"}
        return (f"{name} resumed at step {r['resumed']}, but the run was stopped after step "
                f"{p['kill']} and its last checkpoint was written after step "
                f"{last}{off.get(r['resumed'], '')}{nofile}. [{case}]")
    if differs(r["want"], r["got"]) is None:
        return None
    v = r["variants"]
    hint = explain(r["got"], {
        "the optimizer's state was not restored (a fresh optimizer: its momentum or Adam "
        "moments start again from zero). Save optimizer.state_dict() with the model and "
        "load it back with optimizer.load_state_dict(...)": v["optimizer"],
        "the model's parameters were not restored: save model.state_dict() and load it "
        "back with model.load_state_dict(...)": v["model"]})
    return (f"the resumed run did not end where an uninterrupted one does: {hint}. [{case}]"
            if hint else f"the resumed run's final parameters differ from an uninterrupted "
            f"run's ({differs(r['want'], r['got'])}): restore the model AND the optimizer "
            f"state, and return the saved step. [{case}]")


@task("scaling_out", refuses=("ddl_lab.scaling_out", "save_checkpoint", "resume", "train"))
def resume(my_save_checkpoint: Callable, my_resume: Callable, seed: int = 0) -> None:
    """Lesson 11, task 2: ``my_save_checkpoint(path, step, model, optimizer)`` (called on
    rank 0 after ``step`` steps) and ``my_resume(path, model, optimizer) -> int`` (called on
    every rank at start: restores the state, returns the steps done, 0 without a checkpoint)
    make a run stopped mid-way and restarted end exactly where an uninterrupted one does."""
    import torch
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with tempfile.TemporaryDirectory(prefix="ddl-check-") as folder:
        path = os.path.join(folder, "ckpt.pt")
        _stub_first(my_resume, path, model, opt)
        _stub_first(my_save_checkpoint, path, 1, model, opt)
    fixed = table("steps every kill opt dtype", (10, 3, 7, "sgd", "float32"),
                  (9, 4, 2, "sgd", "float64"), (12, 3, 6, "adam", "float32"))
    trial = Trial("resume", my_save_checkpoint, seed, fixed, draws=3, draw=_resume_case)
    payload = [{**c.params, "seed": seed * 100 + c.index} for c in trial]
    with tempfile.TemporaryDirectory(prefix="ddl-check-resume-") as folder:
        got = on_workers(_resume_runs, WORKERS, my_save_checkpoint, my_resume, payload, folder,
                         fn=my_resume, timeout=60)[0]
    for case, r in zip(trial, got):
        judge(_resume_message(name_of(my_resume), r, case))
    passed("resume", f"{len(trial)} runs on {WORKERS} workers stopped mid-way (before and "
           "after checkpoints, SGD with momentum and Adam, float32 and float64) and resumed "
           "with fresh objects ended exactly where uninterrupted runs end")


# ------------------------------------------------------------------ task 3: env:// settings

_KEYS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def _env_case(rng: np.random.Generator) -> dict[str, Any]:
    net = f"10.{int(rng.integers(0, 256))}.{int(rng.integers(0, 256))}"
    hosts = int(rng.integers(2, 5))
    return {"hosts": tuple(f"{net}.{i + 1 + int(rng.integers(0, 40))}" for i in range(hosts)),
            "nproc": int(rng.integers(1, 5)), "port": int(rng.integers(20000, 40000))}


def _envs(fn: Callable, layout: Any) -> list[list[Any]]:
    return [[call_local(fn, layout, h, r) for r in range(layout.nproc)]
            for h in range(len(layout.hosts))]


def _env_message(name: str, layout: Any, envs: list[list[Any]], case: Any) -> str | None:
    """What is wrong with the env dicts of a layout (every process's), or None."""
    H, P = len(layout.hosts), layout.nproc
    W, endpoint = H * P, layout.hosts[0]
    where = f"{layout}, [{case}]"
    ranks: dict[int, tuple[int, int]] = {}
    for h, row in enumerate(envs):
        for r, env in enumerate(row):
            who = f"process {r} on host {h} ({layout.hosts[h]})"
            if not isinstance(env, dict):
                return f"{name} returned {describe_value(env)} for {who}: return a dict of " \
                       f"the env:// variables {list(_KEYS)}. {where}"
            if missing := [k for k in _KEYS if k not in env]:
                return f"{name} left out {missing} for {who}. {where}"
            e = {k: str(env[k]) for k in _KEYS}
            if e["MASTER_ADDR"] != endpoint:
                why = ("its own address: every process must name the ENDPOINT, host 0's "
                       "address, where rank 0's store listens — a process that names itself "
                       "waits for a store nobody started" if e["MASTER_ADDR"] == layout.hosts[h]
                       else "localhost, which on another machine is that machine itself: name "
                       "host 0's address" if e["MASTER_ADDR"] in ("localhost", "127.0.0.1")
                       else f"not the endpoint {endpoint} (host 0, where the store runs)")
                return f"{who} gets MASTER_ADDR={e['MASTER_ADDR']}: {why}. {where}"
            if e["MASTER_PORT"] != str(layout.port):
                return (f"{who} gets MASTER_PORT={e['MASTER_PORT']}; every process must use the "
                        f"store's port {layout.port}. {where}")
            if e["WORLD_SIZE"] != str(W):
                why = (f"that counts one host's processes{' (or the hosts)' if P == H else ''}"
                       if e["WORLD_SIZE"] == str(P) else "that counts hosts"
                       if e["WORLD_SIZE"] == str(H) else f"expected {W}")
                return (f"{who} gets WORLD_SIZE={e['WORLD_SIZE']}: {why}; WORLD_SIZE counts "
                        f"every process of every host: {H} hosts × {P} = {W}. {where}")
            if e["LOCAL_RANK"] != str(r):
                return (f"{who} gets LOCAL_RANK={e['LOCAL_RANK']}: LOCAL_RANK numbers the "
                        f"processes of one host, 0…{P - 1}; this one is {r}. {where}")
            if not e["RANK"].lstrip("-").isdigit() or not 0 <= int(e["RANK"]) < W:
                return f"{who} gets RANK={e['RANK']}: ranks run from 0 to {W - 1}. {where}"
            rank = int(e["RANK"])
            if rank in ranks:
                h0, r0 = ranks[rank]
                same_as_local = " — RANK is the global rank (host·nproc + local rank), " \
                                "not the local rank" if rank == r == r0 else ""
                return (f"process {r0} on host {h0} and {who} both get RANK={rank}: every "
                        f"process needs its own rank{same_as_local}. {where}")
            ranks[rank] = (h, r)
    if ranks[0][0] != 0:
        return (f"RANK=0 is on host {ranks[0][0]}, but rank 0 hosts the store at MASTER_ADDR "
                f"= host 0: give rank 0 to a process of host 0. {where}")
    return None


def _real_run(fn: Callable) -> str:
    """Start 2 hosts × 2 processes with the learner's settings; what they reported."""
    from ddl_lab.scaling_out.hosts import Layout, VirtualHosts, free_port, run_with_env, unavailable
    name, why = name_of(fn), unavailable()
    if why is None:
        with VirtualHosts() as vh:
            layout = Layout((vh.a.addr, vh.b.addr), 2, 29500)
            jobs = run_with_env(_envs(fn, layout), vh, timeout=20)
        where = "two network namespaces"
    else:
        layout = Layout(("127.0.0.1", "127.0.0.1"), 2, free_port())
        jobs = run_with_env(_envs(fn, layout), None, timeout=20)
        where = f"this machine's loopback ({why})"
    results = next((j.results() for j in jobs if j.results()), {})
    sums = {r.get("sum_of_ranks") for r in results.values() if isinstance(r, dict)}
    if len(results) != 4 or sums != {6.0}:
        failed = next((j for j in jobs if not j.ok), jobs[0])
        fail(f"with {name}'s settings for {layout}, the 4 processes on {where} did not all "
             f"meet: {failed.tail(3) or 'no output'}")
    return where


@task("scaling_out")
def rendezvous_env(my_rendezvous_env: Callable, seed: int = 0) -> None:
    """Lesson 11, task 3: ``my_rendezvous_env(layout, host, local_rank)`` returns the env://
    variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK) of process
    ``local_rank`` on host ``host`` of ``layout`` (a ``Layout``: the hosts' addresses, the
    store on ``hosts[0]``, ``nproc`` processes per host, the store's ``port``)."""
    from ddl_lab.scaling_out.hosts import Layout
    fixed = [{"hosts": h, "nproc": p, "port": port} for h, p, port in (
        (("10.200.0.1", "10.200.0.2"), 2, 29400), (("10.0.0.5", "10.0.0.9"), 1, 23456),
        (("192.168.1.10", "192.168.1.11", "192.168.1.12"), 3, 29500))]
    trial = Trial("rendezvous_env", my_rendezvous_env, seed, fixed, draws=4, draw=_env_case)
    for case in trial:
        layout = Layout(**case.params)
        judge(_env_message(trial.name, layout, _envs(my_rendezvous_env, layout), case))
    where = _real_run(my_rendezvous_env)
    passed("rendezvous_env", f"right for {len(trial)} layouts (2–4 hosts, 1–4 processes "
           f"each), and 2 hosts × 2 processes started with your settings met on {where} "
           "and summed their ranks")


# ------------------------------------------------------------------ task 4: when it pays

def _times(c: dict, n: int, mistake: str = "") -> float:
    S = c["params"] * (1 if mistake == "bits" else 4)
    alpha = 0.0 if mistake == "no latency" else c["alpha"]
    compute = c["per_example"] * c["batch"] / (1 if mistake == "undivided" else n)
    allreduce = star_time if mistake == "whole tensor" else ring_time   # S in every step, or S/n
    return compute + allreduce(n, S, alpha, c["beta"])


def _best(c: dict, mistake: str = "") -> int:
    top = c["max_workers"] - (1 if mistake == "range" else 0)
    return min(range(1, max(top, 1) + 1), key=lambda n: (_times(c, n, mistake), n))


@task("scaling_out", refuses=("ddl_lab.scaling_out", "step_time", "seed_case"))
def best_workers(my_best_workers: Callable, seed: int = 0) -> None:
    """Lesson 11, task 4: ``my_best_workers(params, batch, per_example, alpha, beta,
    max_workers)`` is the n in 1…max_workers with the shortest step of synchronous SGD on a
    fixed global batch: compute per_example·batch/n, plus for n > 1 a ring allreduce of the
    fp32 gradients, 2(n−1)·α + 2(n−1)/n·S·β with S = 4·params bytes."""
    name = name_of(my_best_workers)
    order = ("params", "batch", "per_example", "alpha", "beta", "max_workers")
    fixed = table(order, (16e6, 256, 6e-4, 5e-5, 8e-10, 64),      # middle
                  (25e6, 64, 2e-6, 1e-4, 8e-9, 16),               # 1 pays
                  (1e4, 8192, 1e-4, 1e-5, 1e-10, 32),             # all pay
                  (5e6, 1024, 1e-5, 2e-4, 8e-10, 40))
    trial = Trial("best_workers", my_best_workers, seed, fixed, draws=8, draw=lambda rng: {
        "params": int(10 ** rng.uniform(4, 9)), "batch": int(2 ** rng.integers(5, 15)),
        "per_example": float(10 ** rng.uniform(-7, -3)),
        "alpha": float(10 ** rng.uniform(-6, -3)), "beta": float(10 ** -rng.uniform(8, 11)),
        "max_workers": int(rng.integers(2, 129))})
    got = []
    for case in trial:
        n = answers.plan_call(my_best_workers, {k: case.params[k] for k in order}, name,
                              str(case), case.index >= len(fixed))
        if answers.whole(n) is None:
            fail(f"{name} returned {describe_value(n)}: return the number of workers, an int "
                 f"(a whole number, not the time per step). [{case}]")
        got.append(answers.whole(n))
    wrong = [(c, n) for c, n in zip(trial, got)
             if _times(c.params, int(n)) > _times(c.params, _best(c.params)) * (1 + 1e-9)
             or not 1 <= n <= c.params["max_workers"]]
    if not wrong:
        passed("best_workers", f"the best n for {len(trial)} cases (params 10⁴–10⁹, "
               "batches 32–16384, links 0.1–100 GB/s, 2–128 workers)")
        return
    mistakes = {
        "bits": "S is in bytes: 4 bytes per fp32 parameter, S = 4·params",
        "no latency": "the latency term is missing: each of the 2(n−1) ring steps pays α",
        "whole tensor": "each ring step sends a chunk S/n, not the whole tensor: the "
                        "bandwidth term is 2(n−1)/n·S·β",
        "undivided": "the compute is not divided among the workers: each computes batch/n",
        "range": "max_workers itself is never tried: the range is 1…max_workers inclusive"}
    for key, message in mistakes.items():
        if all(_best(c.params, key) == n for c, n in zip(trial, got)):
            fail(f"{name}: {message}. [{wrong[0][0]}]")
    c, n = wrong[0]
    b = _best(c.params)
    unseen = (" These were drawn by the check, not shown in the prompt." if
              c.index >= len(fixed) else "") + answers.same_for_all(got, "n")
    fail(f"{name} chose n = {n} for {c}: its step takes {_times(c.params, int(n)):.4g} s, "
         f"but n = {b} takes {_times(c.params, b):.4g} s (compute "
         f"{c.params['per_example'] * c.params['batch'] / b:.4g} s + allreduce).{unseen}")


# ------------------------------------------------------------------ task 5 (design): a FedAvg plan

CLIENTS = 10                # K, as in the lesson
SKEW = 0.5                  # label skew: half the shards sorted by label, half at random
TARGET = 0.85               # test accuracy to reach
MAX_E = 20                  # local epochs a client may run in one round
FIXED = [{"rounds": 6, "uploads": 18, "epochs": 180}, {"rounds": 8, "uploads": 16, "epochs": 240}]
DRAWN = 8                   # budgets per call the prompt never shows; the first is run for real


def _draw(rng: np.random.Generator, real: bool) -> dict[str, int]:
    """Budgets the prompt never shows: run for real (``real``), ones that k = 2 or 3 clients
    a round with 10–15 local epochs meet (lesson 11's runs reach 85 % by round 5 with them);
    else far (3–40 rounds, 1–10 uploads and 1–20 epochs a round), judged by arithmetic."""
    if real:
        R, k, E = int(rng.integers(6, 11)), int(rng.integers(2, 4)), int(rng.integers(10, 16))
        U = k * R + int(rng.integers(0, R))
        return {"rounds": R, "uploads": U, "epochs": U * E + int(rng.integers(0, U))}
    R = int(rng.integers(3, 41))
    U = int(rng.integers(R, 10 * R + 1))
    return {"rounds": R, "uploads": U, "epochs": int(rng.integers(U, 20 * U + 1))}


def _choice(out: Any, name: str, case: Any) -> tuple[int, float]:
    judge(answers.plan(out, name, {"E": "local epochs", "C": "the fraction of clients per round"},
                       f" ({case})"))
    E, C = answers.Whole(1, MAX_E).read(out["E"]), answers.Real(0, 1, closed="right").read(out["C"])
    if E is None:
        fail(f"{name} chose E = {out['E']!r}: a whole number of local epochs from 1 to {MAX_E} "
             f"(what a client can afford in one round) ({case}).")
    if C is None:
        fail(f"{name} chose C = {out['C']!r}: the fraction of the {CLIENTS} clients picked "
             f"each round, 0 < C ≤ 1 ({case}).")
    return E, C


def clients_per_round(C: float) -> int:
    """⌊C·K⌋ clients, at least one (a float32 0.7 still picks 7)."""
    return max(1, int(np.floor(C * CLIENTS + 1e-6)))


@functools.lru_cache(maxsize=16)
def _federated(rounds: int, E: int, C: float) -> tuple[list[float], int]:
    """(test accuracy after each round, models uploaded) of the lesson's FedAvg run."""
    from ddl_lab.scaling_out.federated import federated
    run = on_workers(functools.partial(federated, K=CLIENTS, rounds=rounds, E=E, C=C,
                                       skew=SKEW), 3, fn=federated, timeout=120)[0]
    return run.accuracy, sum(run.alive)


@task("scaling_out")
def fedavg_plan(my_fedavg_plan: Callable[[int, int, int], dict], seed: int = 0) -> None:
    """Lesson 11, design: ``my_fedavg_plan(rounds, uploads, epochs)`` returns {E, C} such that
    FedAvg on the lesson's 10 label-skewed clients (skew 0.5) reaches 85 % test accuracy
    within ``rounds`` rounds, with at most ``uploads`` client models sent to the server and
    at most ``epochs`` local epochs in all (each picked client runs E per round). Every
    case's budgets are checked — the fixed ones and budgets drawn per call, far from them —
    and the fixed ones and the first drawn run as federated training on real workers."""
    real = iter([True] + [False] * (DRAWN - 1))      # the first drawn is run for real
    trial = Trial("fedavg_plan", my_fedavg_plan, seed, FIXED, draws=DRAWN,
                  draw=lambda rng: _draw(rng, next(real)))
    plans = [_choice(answers.plan_call(my_fedavg_plan, dict(c.params), trial.name, str(c),
                                       c.index >= len(FIXED)), trial.name, c) for c in trial]
    for case, (E, C) in zip(trial, plans):
        _budgets(trial.name, case, E, C, plans)
    done = []
    for case, (E, C) in zip(trial.cases[:len(FIXED) + 1], plans):
        R, U, W = (case.params[k] for k in ("rounds", "uploads", "epochs"))
        per_round = clients_per_round(C)
        accuracy, uploaded = _federated(R, E, per_round / CLIENTS)
        reached = next((t for t, a in enumerate(accuracy) if a >= TARGET), None)
        if reached is None:
            fail(f"{_chose(trial.name, case, E, C)}: after {R} rounds the test accuracy was "
                 f"{', '.join(f'{100 * a:.1f}%' for a in accuracy[1:])} — never {TARGET:.0%}. "
                 + _accuracy_hint(E, per_round, R, U, W)
                 + answers.drawn(trial.unseen(case), plans) + f" ({case})")
        done.append(f"{TARGET:.0%} in round {reached} of {R}, {uploaded} of {U} uploads, "
                    f"{uploaded * E} of {W} epochs")
    passed("fedavg_plan", f"FedAvg on 3 real workers — {'; '.join(done)}; and {len(trial)} "
           "budgets (3–40 rounds) kept")


def _chose(name: str, case: Any, E: int, C: float) -> str:
    R, U, W = (case.params[k] for k in ("rounds", "uploads", "epochs"))
    return (f"{name}(rounds={R}, uploads={U}, epochs={W}) chose E = {E}, C = {C:g} "
            f"({clients_per_round(C)} client(s) a round)")


def _budgets(name: str, case: Any, E: int, C: float, plans: list) -> None:
    """Fails if the plan uploads more models or runs more local epochs than the budgets."""
    R, U, W = (case.params[k] for k in ("rounds", "uploads", "epochs"))
    per_round, unseen = clients_per_round(C), answers.drawn(case.index >= len(FIXED), plans)
    if per_round * R > U:
        fail(f"{_chose(name, case, E, C)}: {R} rounds upload {per_round * R} models, over {U}. "
             + ("The budget is for the whole run, not one round: every picked client uploads "
                "its model in every round." if per_round >= min(U, CLIENTS) else
                f"Each round uploads ⌊C·K⌋ models, so ⌊C·K⌋·rounds ≤ {U}.")
             + unseen + f" ({case})")
    if per_round * R * E > W:
        fail(f"{_chose(name, case, E, C)}: the clients would run {per_round * R} × {E} = "
             f"{per_round * R * E} local epochs, over {W}: fewer epochs per round, or fewer "
             f"clients.{unseen} ({case})")


def _accuracy_hint(E: int, clients: int, R: int, U: int, W: int) -> str:
    if clients == 1:
        return ("One client a round: the average of one model is that client's model, which "
                "knows its own digits best — take more clients a round.")
    spare = W // (clients * R)
    if E < spare:
        return (f"Local epochs cost no bytes: with {clients} clients a round the budget allows "
                f"E = {min(spare, MAX_E)}, and more local work makes each round count more "
                "(FedAvg's point against FedSGD).")
    return ("Spend the budgets differently: more clients a round average out the clients' "
            f"skew, more local epochs make each round count (U = {U}, W = {W}).")
