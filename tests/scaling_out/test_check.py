"""Lesson 11's checks accept right answers written in two styles and name the mistakes
learners make: the stub, an unweighted FedAvg, a resume at the wrong step or with a fresh
optimizer, a rendezvous naming a rank's own address, a step model without its bytes."""
import os

import pytest
import torch

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.scaling_out import calculator, elastic, federated

STEM = "11_scaling_out"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------------ fedavg

def fedavg_stacked(states, sizes):
    w = torch.tensor(sizes, dtype=torch.float64)
    w = w / w.sum()
    return {k: (torch.stack([s[k].double() for s in states]) * w.view(-1, *[1] * states[0][k]
            .dim())).sum(0).to(states[0][k].dtype) for k in states[0]}


def unweighted(states, sizes):
    return {k: sum(s[k] for s in states) / len(states) for k in states[0]}


def divided_by_clients(states, sizes):
    return {k: sum(n * s[k] for n, s in zip(sizes, states)) / len(states) for k in states[0]}


def accumulates_in_place(states, sizes):
    out = states[0]
    for k in out:
        out[k] *= sizes[0]
        for n, s in zip(sizes[1:], states[1:]):
            out[k] += n * s[k]
        out[k] /= sum(sizes)
    return out


def the_package_s(states, sizes):
    return federated.fedavg(states, sizes)


def test_fedavg(solution, capsys):
    check.fedavg(fedavg_stacked)
    assert capsys.readouterr().out.count("✔ fedavg: passed") == 1
    for fn, message in [(stub, "not implemented yet"),
                        (unweighted, "averaged the clients equally.*weight each client by "
                                     "its size n_k"),
                        (divided_by_clients, "divided the weighted sum by the number of "
                                             "clients K"),
                        (accumulates_in_place, "changed client 0's state in place"),
                        (the_package_s, "package's own implementation")]:
        with pytest.raises(CheckFailed, match=message):
            check.fedavg(fn)


# ------------------------------------------------------------------ resume

def save_plain(path, step, model, optimizer):
    torch.save([step, model.state_dict(), optimizer.state_dict()], path)


def resume_plain(path, model, optimizer):
    try:
        step, m, o = torch.load(path)
    except FileNotFoundError:
        return 0
    model.load_state_dict(m)
    optimizer.load_state_dict(o)
    return step


def save_model_only(path, step, model, optimizer):
    torch.save({"step": step, "model": model.state_dict()}, path)


def resume_model_only(path, model, optimizer):
    if not os.path.exists(path):
        return 0
    s = torch.load(path)
    model.load_state_dict(s["model"])
    return s["step"]


def resume_next_step(path, model, optimizer):
    return resume_plain(path, model, optimizer) + (1 if os.path.exists(path) else 0)


def resume_raises_without_a_file(path, model, optimizer):
    step, m, o = torch.load(path)
    model.load_state_dict(m)
    optimizer.load_state_dict(o)
    return step


def test_resume(solution, capsys):
    check.resume(solution(STEM, "my_save_checkpoint"), solution(STEM, "my_resume"))
    check.resume(save_plain, resume_plain)
    assert capsys.readouterr().out.count("✔ resume: passed") == 2
    for pair, message in [((stub, stub), "not implemented yet"),
                          ((save_model_only, resume_model_only), "optimizer's state was not "
                                                                 "restored"),
                          ((save_plain, resume_next_step), "resumed at step 7.*last checkpoint "
                                                           "was written after step 6.*one too "
                                                           "many"),
                          ((save_plain, resume_raises_without_a_file), "raised "
                                                                       "FileNotFoundError"),
                          ((elastic.save_checkpoint, elastic.resume), "package's own")]:
        with pytest.raises(CheckFailed, match=message):
            check.resume(*pair)


# ------------------------------------------------------------------ rendezvous_env

def env_ints(layout, host, local_rank):
    P = layout.nproc
    return dict(MASTER_ADDR=layout.hosts[0], MASTER_PORT=layout.port, LOCAL_RANK=local_rank,
                RANK=host * P + local_rank, WORLD_SIZE=P * len(layout.hosts))


def own_address(layout, host, local_rank):
    return {**env_ints(layout, host, local_rank), "MASTER_ADDR": layout.hosts[host]}


def per_host_world(layout, host, local_rank):
    return {**env_ints(layout, host, local_rank), "WORLD_SIZE": layout.nproc}


def local_as_global(layout, host, local_rank):
    return {**env_ints(layout, host, local_rank), "RANK": local_rank}


def test_rendezvous_env(solution, capsys):
    check.rendezvous_env(env_ints)
    assert capsys.readouterr().out.count("✔ rendezvous_env: passed") == 1
    for fn, message in [(stub, "not implemented yet"),
                        (own_address, "host 1 .* gets MASTER_ADDR=10.200.0.2: its own address"),
                        (per_host_world, "counts one host's processes"),
                        (local_as_global, "both get RANK=0.*not the local rank")]:
        with pytest.raises(CheckFailed, match=message):
            check.rendezvous_env(fn)


# ------------------------------------------------------------------ best_workers

def best_loop(params, batch, per_example, alpha, beta, max_workers):
    best, best_t = 1, per_example * batch
    for n in range(2, max_workers + 1):
        t = per_example * batch / n + 2 * (n - 1) * (alpha + 4 * params * beta / n)
        if t < best_t:
            best, best_t = n, t
    return best


def bits_not_bytes(params, batch, per_example, alpha, beta, max_workers):
    return min(range(1, max_workers + 1), key=lambda n: per_example * batch / n + (
        2 * (n - 1) * alpha + 2 * (n - 1) / n * params * beta))


def whole_tensor(params, batch, per_example, alpha, beta, max_workers):
    return min(range(1, max_workers + 1), key=lambda n: per_example * batch / n + (
        2 * (n - 1) * (alpha + 4 * params * beta)))


def returns_time(params, batch, per_example, alpha, beta, max_workers):
    return per_example * batch


def uses_the_calculator(params, batch, per_example, alpha, beta, max_workers):
    f = calculator.Fit(0.0, per_example, alpha, beta, max_workers, int(params))
    return min(range(1, max_workers + 1),
               key=lambda n: calculator.step_time(n, batch, f)["total"])


def test_best_workers(solution, capsys):
    check.best_workers(best_loop)
    assert capsys.readouterr().out.count("✔ best_workers: passed") == 1
    for fn, message in [(stub, "not implemented yet"),
                        (bits_not_bytes, "4 bytes per fp32 parameter"),
                        (whole_tensor, "sends a chunk S/n, not the whole tensor"),
                        (returns_time, "return the number of workers, an int"),
                        (uses_the_calculator, "package's own implementation")]:
        with pytest.raises(CheckFailed, match=message):
            check.best_workers(fn)


def best_looked_up(params, batch, per_example, alpha, beta, max_workers):
    """Answers found by trial at the prompt's case (and the lecture's), kept in a table."""
    return {(16e6, 256, 6e-4, 5e-5, 8e-10, 64): 23, (16e6, 256, 6e-4, 5e-5, 8e-9, 64): 8}[
        params, batch, per_example, alpha, beta, max_workers]


def best_constant(params, batch, per_example, alpha, beta, max_workers):
    return 23


def test_best_workers_that_ignore_their_inputs_are_named():
    with pytest.raises(CheckFailed, match=r"raised KeyError: .*: a plan must be a "
                                          "function of its inputs"):
        check.best_workers(best_looked_up)
    with pytest.raises(CheckFailed, match="chose n = 23 .*It returned the same n, 23, for all "
                                          "12 budgets it was given"):
        check.best_workers(best_constant)


def test_verdicts_are_the_same_every_run():
    for _ in range(3):
        with pytest.raises(CheckFailed, match="averaged the clients equally"):
            check.fedavg(unweighted)


def test_rendezvous_env_meets_on_loopback_where_namespaces_cannot_be_made(monkeypatch,
                                                                         capsys):
    from ddl_lab.scaling_out import hosts
    monkeypatch.setattr(hosts, "unavailable", lambda: "planted: not root")
    check.rendezvous_env(env_ints)
    assert "met on this machine's loopback (planted: not root)" in capsys.readouterr().out
