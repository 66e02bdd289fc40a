"""Every lesson, as a learner meets it in JupyterLab: it runs without an error shown, its
widgets render, and moving a control re-runs the experiment and redraws its figure in place.
The lesson as it ran is saved into build/lessons/ (as `make lessons` would write it), so the
website (tests/site) is built from this run instead of executing every lesson again.

A lesson without an entry in LESSON_CONTROLS is covered by moving the first control of its
first experiment panel, so a new lesson gets its browser test without touching this file.

The longest experiments run smaller here (SMALLER: fewer epochs and steps, the same code,
every cell): `make test` has to fit 15 minutes on two cores, and these runs prove that the
lesson works, not the figures its prose quotes (`make lessons` and `ddl-lab times --measure`
run them whole). The saved copy says so (``metadata.ddl_lab.smaller``), so `ddl-lab site`
runs such a lesson again, whole, before it publishes it.
"""
import json
from pathlib import Path

import pytest

from ddl_lab.tools.site.build import SMALLER as SMALLER_KEY
from lab_harness import EXECUTED, ROOT, Control, check_lesson

pytestmark = pytest.mark.browser

LESSONS = sorted(p.stem for p in (ROOT / "lessons").glob("[0-9][0-9]_*.ipynb"))

# The control a learner is most likely to try, where the first one is slow or says little.
LESSON_CONTROLS = {
    "00_welcome": Control("seed"),                     # new darts, same cluster: cheap
    "02_parallel_models": Control("schedule"),         # static → dynamic: a new timeline
    "04_message_passing": Control("KB / message"),     # 16 → 256 KB: new bandwidth bars
    "06_ring_allreduce": Control("step"),              # the next step of the same ring
    "10_memory": Control("stage"),                     # ZeRO-1 → 2: gradients sharded too
    "14_experts": Control("devices", panel=1),         # the planner: 64 → 128 devices
}
# Further controls moved after that one, in the same page.
MORE_CONTROLS = {
    "06_ring_allreduce": [Control("step", panel=2)],   # §7: halving/doubling, stepped
    "12_transformers": [Control("ring step", panel=1)],  # §6: the ring-attention stepper
    "14_experts": [Control("mesh", panel=0)],            # §3: another mesh and its groups
}


# Each replacement is made in the served copy of the lesson, once (a lesson edited so that a
# line below no longer appears fails here, saying which): the sizes of the longest runs.
SMALLER = {
    "05_data_parallel": [("def averaging_runs(periods, skew, steps=96):",
                          "def averaging_runs(periods, skew, steps=32):"),
                         ("B.run_batches(cluster, steps=150, base_lr=0.2, warmup=30)",
                          "B.run_batches(cluster, steps=50, base_lr=0.2, warmup=10)")],
    "08_compression": [("EPOCHS = 8 ", "EPOCHS = 2 "),
                       ("SWEEP_EPOCHS = 4 ", "SWEEP_EPOCHS = 1 "),
                       ("steps=100, eval_every=20", "steps=40, eval_every=20")],
    "03_hogwild": [("hogwild.compare_modes(p, processes=2, epochs=2)",
                    "hogwild.compare_modes(p, processes=2, epochs=1)")],
    "07_parameter_server": [("slow=slow, steps=150,", "slow=slow, steps=60,")],
    "09_model_parallel": [("    for _ in range(3):                 # alternated",
                           "    for _ in range(1):                 # alternated")],
    "10_memory": [("segments=(0, 2, 4, 8, 16), repeats=3)", "segments=(0, 2, 4, 8, 16), repeats=1)")],
    "11_scaling_out": [("steps, M, lr = 40, 64, 0.1", "steps, M, lr = 10, 64, 0.1"),
                       ("for e in (1, 5, 20)]", "for e in (1, 2, 5)]"),
                       ('OPTION_ARGS = ("digits-mlp", 100, 64, 0.3)',
                        'OPTION_ARGS = ("digits-mlp", 20, 64, 0.3)'),
                       ("NBYTES, REPEATS = 64 << 20, 3", "NBYTES, REPEATS = 16 << 20, 2")],
    "12_transformers": [("Tr.TrainConfig(steps=150, eval_every=50)",
                         "Tr.TrainConfig(steps=50, eval_every=25)")],
    "14_experts": [("TrainConfig(steps=60, batch=16, eval_every=60,",
                    "TrainConfig(steps=20, batch=16, eval_every=20,"),
                   ("rows = C.table(CFG, C.LAYOUTS, steps=3, batch=8)",     # DP2×TP2 only:
                    "rows = C.table(CFG, C.LAYOUTS[4:5], steps=3, batch=8)")],  # 4 ranks
}


def make_smaller(lesson: str, served: Path) -> list[int]:
    """Make SMALLER's replacements in the served copy of ``lesson``; the cells changed."""
    nb = json.loads(served.read_text())
    changed = []
    for old, new in SMALLER.get(lesson, []):
        found = [i for i, c in enumerate(nb["cells"]) if old in "".join(c["source"])]
        assert len(found) == 1, (f"{lesson}: SMALLER's {old!r} is in {len(found)} cells of the "
                                 "lesson, not one: update SMALLER in this file")
        cell = nb["cells"][found[0]]
        cell["source"] = "".join(cell["source"]).replace(old, new)
        changed.append(found[0])
    served.write_text(json.dumps(nb, indent=1, ensure_ascii=False))
    return changed


def mark_smaller(lesson: str, saved: Path, changed: list[int]) -> None:
    """The saved run with the lesson's own code back in the changed cells (the outputs are
    the smaller run's), marked ``metadata.ddl_lab.smaller`` with what was changed."""
    if not changed or not saved.exists():
        return
    nb = json.loads(saved.read_text())
    lesson_nb = json.loads((ROOT / "lessons" / f"{lesson}.ipynb").read_text())
    for i in changed:
        nb["cells"][i]["source"] = lesson_nb["cells"][i]["source"]
    nb.setdefault("metadata", {}).setdefault("ddl_lab", {})[SMALLER_KEY] = \
        [f"{old} -> {new}" for old, new in SMALLER[lesson]]
    saved.write_text(json.dumps(nb, indent=1, ensure_ascii=False))


def test_there_are_lessons_to_test():
    assert "00_welcome" in LESSONS


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_runs_and_its_widgets_redraw(lesson, open_notebook, lab):
    spec = LESSON_CONTROLS.get(lesson, Control())
    (EXECUTED / f"{lesson}.ipynb").unlink(missing_ok=True)    # a failed run leaves none
    changed = make_smaller(lesson, lab.root / "lessons" / f"{lesson}.ipynb")
    nb = open_notebook(f"lessons/{lesson}.ipynb")
    try:
        took, changes = check_lesson(nb, spec, keep=EXECUTED,
                                     more=tuple(MORE_CONTROLS.get(lesson, ())))
        mark_smaller(lesson, EXECUTED / f"{lesson}.ipynb", changed)
        print(f"{lesson}: run all {took:.0f} s")
        for control, change in zip((spec, *MORE_CONTROLS.get(lesson, ())), changes):
            print(f"{lesson}, panel {control.panel}: {change.action}")
            assert change.after.images or change.after.text.strip(), (
                f"{lesson}: panel {control.panel} shows nothing after the re-run")
    finally:
        panels = nb.panels()
        nb.screenshot(f"lesson-{lesson}",
                      focus=panels.nth(spec.panel) if panels.count() > spec.panel else None)
