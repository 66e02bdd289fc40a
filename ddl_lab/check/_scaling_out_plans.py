"""Lesson 11's design check (``check/scaling_out.py`` exports it): a FedAvg plan — local
epochs E and the fraction C of clients per round — that reaches a target test accuracy
within R rounds, uploading at most U client models and spending at most W client-epochs,
run as the lesson's federated training on 3 real workers (deterministic: every random
choice comes from the seed, the round and the client)."""
from __future__ import annotations

import functools
import itertools
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import fail, passed, run_on_workers, task
from ._diagnose import Cases

CLIENTS = 10                # K, as in the lesson
SKEW = 0.5                  # label skew: half the shards sorted by label, half at random
TARGET = 0.85               # test accuracy to reach
MAX_E = 20                  # local epochs a client may run in one round
FIXED = [{"rounds": 6, "uploads": 18, "epochs": 180},
         {"rounds": 8, "uploads": 16, "epochs": 240}]
DRAWN = 8                   # budgets per call the prompt never shows; the first is run for real


def _draws() -> Callable[[np.random.Generator], dict[str, int]]:
    """Budgets the prompt never shows. The first drawn is run for real, so it is one that
    k = 2 or 3 clients a round with 10–15 local epochs meet (lesson 11's runs reach 85 % by
    round 5 with them); the others range far (3–40 rounds, 1–10 uploads and 1–20 epochs a
    round), judged by their arithmetic."""
    calls = itertools.count()

    def draw(rng: np.random.Generator) -> dict[str, int]:
        if next(calls) == 0:
            R, k, E = int(rng.integers(6, 11)), int(rng.integers(2, 4)), int(rng.integers(10, 16))
            U = k * R + int(rng.integers(0, R))
            return {"rounds": R, "uploads": U, "epochs": U * E + int(rng.integers(0, U))}
        R = int(rng.integers(3, 41))
        U = int(rng.integers(R, 10 * R + 1))
        return {"rounds": R, "uploads": U, "epochs": int(rng.integers(U, 20 * U + 1))}
    return draw


def _choice(out: Any, name: str, case: Any) -> tuple[int, float]:
    if problem := answers.plan(out, name, {"E": "local epochs",
                                         "C": "the fraction of clients per round"}, f" ({case})"):
        fail(problem)
    E, C = answers.whole(out["E"]), answers.scalar(out["C"])
    if E is None or not 1 <= E <= MAX_E:
        fail(f"{name} chose E = {out['E']!r}: a whole number of local epochs from 1 to {MAX_E} "
             f"(what a client can afford in one round) ({case}).")
    if C is None or not 0 < C <= 1:
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
    run = run_on_workers(federated, 3, K=CLIENTS, rounds=rounds, E=E, C=C, skew=SKEW,
                         timeout=120)[0]
    return run.accuracy, sum(run.alive)


@task("scaling_out")
def fedavg_plan(my_fedavg_plan: Callable[[int, int, int], dict], seed: int = 0) -> None:
    """Lesson 11, design: ``my_fedavg_plan(rounds, uploads, epochs)`` returns {E, C} such that
    FedAvg on the lesson's 10 label-skewed clients (skew 0.5) reaches 85 % test accuracy
    within ``rounds`` rounds, with at most ``uploads`` client models sent to the server and
    at most ``epochs`` local epochs in all (each picked client runs E per round). Every
    case's budgets are checked — the fixed ones and budgets drawn per call, far from them —
    and the fixed ones and the first drawn run as federated training on real workers."""
    name = getattr(my_fedavg_plan, "__name__", "your function")
    cases = list(Cases("fedavg_plan", seed, FIXED, draws=DRAWN, draw=_draws()))
    plans = [_choice(answers.plan_call(my_fedavg_plan, dict(c.params), name, str(c),
                                       c.index >= len(FIXED)), name, c) for c in cases]
    for case, (E, C) in zip(cases, plans):
        _budgets(name, case, E, C, plans)
    done = []
    for case, (E, C) in zip(cases[:len(FIXED) + 1], plans):
        R, U, W = (case.params[k] for k in ("rounds", "uploads", "epochs"))
        per_round = clients_per_round(C)
        accuracy, uploaded = _federated(R, E, per_round / CLIENTS)
        reached = next((t for t, a in enumerate(accuracy) if a >= TARGET), None)
        if reached is None:
            fail(f"{_chose(name, case, E, C)}: after {R} rounds the test accuracy was "
                 f"{', '.join(f'{100 * a:.1f}%' for a in accuracy[1:])} — never {TARGET:.0%}. "
                 + _accuracy_hint(E, per_round, R, U, W) + _unseen(case, plans) + f" ({case})")
        done.append(f"{TARGET:.0%} in round {reached} of {R}, {uploaded} of {U} uploads, "
                    f"{uploaded * E} of {W} epochs")
    passed("fedavg_plan", f"FedAvg on 3 real workers — {'; '.join(done)}; and {len(cases)} "
           "budgets (3–40 rounds) kept")


def _chose(name: str, case: Any, E: int, C: float) -> str:
    R, U, W = (case.params[k] for k in ("rounds", "uploads", "epochs"))
    return (f"{name}(rounds={R}, uploads={U}, epochs={W}) chose E = {E}, C = {C:g} "
            f"({clients_per_round(C)} client(s) a round)")


def _unseen(case: Any, plans: list) -> str:
    return (" These budgets were drawn by the check, not shown in the prompt." if
            case.index >= len(FIXED) else "") + answers.same_for_all(plans)


def _budgets(name: str, case: Any, E: int, C: float, plans: list) -> None:
    """Fails if the plan uploads more models or runs more local epochs than the budgets."""
    R, U, W = (case.params[k] for k in ("rounds", "uploads", "epochs"))
    per_round = clients_per_round(C)
    if per_round * R > U:
        fail(f"{_chose(name, case, E, C)}: {R} rounds upload {per_round * R} models, over {U}. "
             + _upload_hint(per_round, U) + _unseen(case, plans) + f" ({case})")
    if per_round * R * E > W:
        fail(f"{_chose(name, case, E, C)}: the clients would run {per_round * R} × {E} = "
             f"{per_round * R * E} local epochs, over {W}: fewer epochs per round, or fewer "
             f"clients.{_unseen(case, plans)} ({case})")


def _upload_hint(per_round: int, U: int) -> str:
    if per_round >= min(U, CLIENTS):
        return ("The budget is for the whole run, not one round: every picked client uploads "
                "its model in every round.")
    return f"Each round uploads ⌊C·K⌋ models, so ⌊C·K⌋·rounds ≤ {U}."


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
