"""Lesson 09's design check (``check/model_parallel.py`` exports it): a pipeline plan — GPipe
or 1F1B, and the number of micro-batches m — whose bubble stays under a target while no stage
keeps more than a budget of examples' activations, run on real workers.

The bubble is counted in operation slots (every forward and backward one slot, as with the
lesson's padded stages): the orders the stages really ran, replayed with their dependencies,
give the makespan, and 1 − 2m/makespan is the idle share — (p − 1)/(m + p − 1) for both
schedules. The clock's bubble of the same run is quoted beside it. The memory is measured:
the bytes autograd kept for backward on each stage (``ActivationMeter``), in examples."""
from __future__ import annotations

import functools
import itertools
from typing import Any, Callable, Sequence

import numpy as np

from ddl_lab.runtime.worlds import WorldFailed

from . import _answers as answers
from ._core import fail, passed, run_in_world, task
from ._diagnose import Cases

PAD = 0.002                 # seconds of padded compute per example and stage, as the lesson's
FIXED = [{"p": 4, "batch": 48, "max_bubble": 0.2, "max_examples": 16},
         {"p": 3, "batch": 36, "max_bubble": 0.25, "max_examples": 36},
         {"p": 2, "batch": 24, "max_bubble": 0.1, "max_examples": 4}]


DRAWN = 8                   # budgets per call the prompt never shows; the first is run for real


def _draws() -> Callable[[np.random.Generator], dict[str, Any]]:
    """Feasible cases: 1F1B with some m0 meets each (bubble rounded up, its memory). The
    first drawn is small enough to run on the workers; the others range far (up to 8
    stages, batches up to 512), judged by the schedules' arithmetic."""
    calls = itertools.count()

    def draw(rng: np.random.Generator) -> dict[str, Any]:
        far = next(calls) > 0
        p, batch = int(rng.integers(2, 9 if far else 5)), int(rng.integers(16, 513 if far else 49))
        m0 = int(rng.integers(p, batch // 2 + 1))
        bubble = np.ceil(100 * (p - 1) / (m0 + p - 1)) / 100
        roomy = far and rng.random() < 0.3              # memory to spare: GPipe fits too
        return {"p": p, "batch": batch, "max_bubble": float(bubble),
                "max_examples": batch if roomy else min(p, m0) * -(-batch // m0)}
    return draw


def _kept(p: int, batch: int, schedule: str, m: int) -> int:
    """The most examples a stage keeps for backward: GPipe every micro-batch (the batch);
    1F1B on stage 0 the first min(p, m) micro-batches of ``torch.tensor_split``, the largest."""
    if schedule == "gpipe":
        return batch
    sizes = [batch // m + (1 if i < batch % m else 0) for i in range(m)]
    return sum(sizes[:min(p, m)])


def _choice(out: Any, name: str, case: Any) -> tuple[str, int]:
    if problem := answers.plan(out, name, {"schedule": "'gpipe' or '1f1b'", "m": ""},
                             f" ({case})"):
        fail(problem)
    schedule, m = out["schedule"], answers.whole(out["m"])
    if schedule not in ("gpipe", "1f1b"):
        fail(f"{name} chose the schedule {schedule!r}; choose 'gpipe' or '1f1b' ({case}).")
    batch = case.params["batch"]
    if m is None or not 1 <= m <= batch:
        fail(f"{name} chose m = {out['m']!r}: the number of micro-batches is a whole number "
             f"from 1 to the batch size, {batch} (a micro-batch holds at least one example) "
             f"({case}).")
    return str(schedule), m


def slot_bubble(orders: Sequence[Sequence[tuple[str, int]]]) -> float:
    """The idle share of a pipeline whose stage r ran ``orders[r]``, every operation one slot
    (lesson 09's slot replay, one chunk per stage): 1 − (busy slots) / (p × makespan)."""
    from ddl_lab.model_parallel.interleaved import slot_makespan
    chunked = [[(op, i, 0) for op, i in order] for order in orders]
    return 1.0 - sum(len(o) for o in orders) / (len(orders) * slot_makespan(chunked, 1))


def _ran(runs: Sequence[Any]) -> list[list[tuple[str, int]]]:
    """The order each stage ran in its last step, read off its timeline."""
    kinds = {"forward": "F", "backward": "B"}
    return [[(kinds[s.kind], s.step) for s in sorted(r.timelines[-1].spans, key=lambda s: s.start)
             if s.kind in kinds] for r in runs]


@functools.lru_cache(maxsize=16)
def _bytes_per_example(p: int, batch: int) -> tuple[float, ...]:
    """Bytes each stage keeps for backward per example: one micro-batch of the whole batch."""
    from ddl_lab.model_parallel.pipeline import pipeline_run
    runs = run_in_world(pipeline_run, p, "mlp", p, 1, "gpipe", 1, batch, fn=pipeline_run)
    return tuple(r.peak_activations / batch for r in runs)


def _measure(p: int, batch: int, schedule: str, m: int) -> tuple[float, float, float, int]:
    """(slot bubble, clock bubble, most examples any stage kept, that stage) of one real run."""
    from ddl_lab.model_parallel.pipeline import bubble_fraction, pipeline_run
    runs = run_in_world(pipeline_run, p, "mlp", p, m, schedule, 2, batch, 0.1, PAD,
                        fn=pipeline_run)
    per = _bytes_per_example(p, batch)
    # the last stage always keeps the fewest micro-batches; its loss adds a few bytes per
    # micro-batch that are not an example's, so the stages before it are the ones measured
    held = {r: runs[r].peak_activations / per[r] for r in range(p - 1 if p > 1 else 1)
            if per[r] > 0}
    worst = max(held, key=held.get)
    return slot_bubble(_ran(runs)), bubble_fraction(runs), held[worst], worst


_KEYS = ("p", "batch", "max_bubble", "max_examples")


@task("model_parallel")
def pipeline_plan(my_pipeline_plan: Callable[[int, int, float, int], dict],
                  seed: int = 0) -> None:
    """Lesson 09, design: ``my_pipeline_plan(p, batch, max_bubble, max_examples)`` returns
    {schedule: 'gpipe' | '1f1b', m} for the lesson's MLP cut into p padded stages training
    on batches of ``batch``: its bubble at most ``max_bubble`` and no stage keeping the
    activations of more than ``max_examples`` examples at once. Every case's plan is judged
    by the schedules' arithmetic — the fixed ones and budgets drawn per call, far from them —
    and two (the first fixed, the first drawn) run on p real workers: the bubble counted in
    slots, the memory measured."""
    name = getattr(my_pipeline_plan, "__name__", "your function")
    cases = list(Cases("pipeline_plan", seed, FIXED, draws=DRAWN, draw=_draws()))
    plans = [_choice(answers.plan_call(my_pipeline_plan, {k: c.params[k] for k in _KEYS}, name,
                                       str(c), c.index >= len(FIXED)), name, c)
             for c in cases]
    for case, (schedule, m) in zip(cases, plans):
        p, batch = case.params["p"], case.params["batch"]
        slots = (p - 1) / (m + p - 1)            # slot_bubble of either schedule's orders
        _judge(name, case, schedule, m, slots, None, _kept(p, batch, schedule, m), 0, plans)
    done = []
    for case, (schedule, m) in ((cases[i], plans[i]) for i in (0, len(FIXED))):
        p, batch = case.params["p"], case.params["batch"]
        try:
            slots, clock, held, stage = _measure(p, batch, schedule, m)
        except WorldFailed as e:
            fail(e.failure.message(name, p))
        _judge(name, case, schedule, m, slots, clock, held, stage, plans)
        done.append(f"p={p}: {schedule} m={m}, bubble {slots:.2f} ({clock:.2f} on the clock), "
                    f"{held:.0f} ≤ {case.params['max_examples']} examples")
    passed("pipeline_plan", f"on real workers — {'; '.join(done)}; and {len(cases) - 2} more "
           "budgets (up to 8 stages, batches up to 512) met by the schedules' arithmetic")


def _judge(name: str, case: Any, schedule: str, m: int, slots: float, clock: float | None,
           held: float, stage: int, plans: list) -> None:
    """Fails if the plan breaks the case's bubble target or memory budget, saying which."""
    p, batch = case.params["p"], case.params["batch"]
    target, budget = case.params["max_bubble"], case.params["max_examples"]
    chose = (f"{name}(p={p}, batch={batch}, max_bubble={target:g}, max_examples={budget}) "
             f"chose {schedule} with m = {m}")
    unseen = (" These budgets were drawn by the check, not shown in the prompt." if
              case.index >= len(FIXED) else "") + answers.same_for_all(plans)
    measured = f" ({clock:.3f} on the clock)" if clock is not None else " (counted in slots)"
    if slots > target + 1e-9:
        fail(f"{chose}: its bubble is {slots:.3f} of each step{measured}, over {target:g}. "
             + _bubble_hint(p, m, target) + f"{unseen} ({case})")
    if held > budget + 0.25:
        fail(f"{chose}: stage {stage} kept the activations of {held:.0f} examples at once, "
             f"over {budget}. " + _memory_hint(p, batch, schedule, m) + f"{unseen} ({case})")


def _bubble_hint(p: int, m: int, target: float) -> str:
    need = int(np.ceil((p - 1) * (1 - target) / target - 1e-9))
    if m < p:
        return (f"The bubble is (p − 1)/(m + p − 1): with m = {m} ≤ p micro-batches most of "
                f"each step is filling and draining; it takes m ≥ {need}.")
    return (f"The bubble is (p − 1)/(m + p − 1), the same for GPipe and 1F1B: it falls to "
            f"{target:g} only at m ≥ {need}.")


def _memory_hint(p: int, batch: int, schedule: str, m: int) -> str:
    if schedule == "gpipe":
        return (f"GPipe runs every forward before any backward, so each stage keeps all m "
                f"micro-batches — the whole batch of {batch}, whatever m is. 1F1B keeps at "
                "most p − rank micro-batches.")
    return (f"1F1B keeps up to p micro-batches on the first stages (p − rank on rank rank), "
            f"here of up to ⌈{batch}/{m}⌉ = {-(-batch // m)} examples each: more, smaller "
            "micro-batches keep fewer examples.")
