"""Composition on a DeviceMesh (lesson 14, experts, section 3): the composed layouts of the
small GPT (2-D FSDP2 × TP, HSDP; 3-D DP × TP × PP) train to one process's losses, and the
planner predicts each mesh dimension's bytes and each rank's model states as measured."""
import pytest

from ddl_lab.experts import compose as C
from ddl_lab.experts import planner as P
from ddl_lab.ml.gpt import GPTConfig, build_gpt

CFG = GPTConfig(vocab=32, seq=16, hidden=32, heads=4, layers=2)
STEPS, BATCH = 3, 8
# The composed layouts, which hold every kind of dimension between them: hand data
# parallelism, FSDP2, HSDP, tensor and pipeline parallelism (the 1-D ones are each a
# dimension of these; `compose.table()` runs all of LAYOUTS, as the lesson will).
NAMES = ["FSDP2×TP2", "HSDP2×2", "DP2×TP2×PP2"]
pytestmark = pytest.mark.slow          # the workers import DTensor, FSDP2 and pipelining
# float32, 3 Adam steps: the layouts sum in other orders (rounding ~1e-7 a sum); Adam's
# first steps move each weight by ≈ lr whatever its gradient's size, so the rounding reaches
# the loss only through weights whose gradients are ≈ 0 — 2e-6 relative leaves room for it.
RTOL = 2e-6


@pytest.fixture(scope="module")
def rows():
    layouts = [lay for lay in C.LAYOUTS if lay["name"] in NAMES]
    assert [lay["name"] for lay in layouts] == NAMES
    return {row["name"]: row for row in C.table(CFG, layouts, steps=STEPS, batch=BATCH)}


@pytest.fixture(scope="module")
def checked(rows):
    c = dict(flop_s=1e10, alpha=1e-5, beta=1e-9)
    return {v["name"]: v for v in C.validate(list(rows.values()), **c)}


@pytest.mark.parametrize("name", NAMES)
def test_every_layout_trains_to_one_process_s_losses(rows, name):
    row = rows[name]
    for losses in row["losses"]:                     # the global mean, on every rank
        assert losses == pytest.approx(row["reference"], rel=RTOL)
    assert row["reference"][-1] < row["reference"][0]


@pytest.mark.parametrize("name", NAMES)
def test_bytes_per_dimension_are_the_planner_s(checked, name):
    v = checked[name]
    assert v["unpredicted"] == {}                   # nothing outside the mesh's dimensions
    for dim, want in v["bytes_predicted"].items():
        assert v["bytes"][dim] == pytest.approx(want, rel=1e-9), dim


@pytest.mark.parametrize("name", NAMES)
def test_model_states_are_the_planner_s(checked, name):
    v = checked[name]
    assert v["states"] == pytest.approx(v["states_predicted"], rel=0.10)


def test_every_step_sends_the_same_bytes_but_the_pipeline_s_first(rows):
    for row in rows.values():
        for run in row["runs"]:
            steps = run["bytes_steps"]
            assert all(s == steps[-1] for s in steps[1:]), row["name"]


def test_the_planner_counts_the_course_s_gpt_whole():
    m = C._model(CFG)
    n = sum(p.numel() for p in build_gpt(CFG).parameters())
    assert m.params() == n
    assert P.rank_params(m, P.Layout()) == n
