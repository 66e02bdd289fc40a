"""Lesson 12's panel and pictures (transformers §6): one real step per setting, every measure
equal to its formula; the ring stepper's picture and its refusals; the quiz loads."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from ddl_lab.active import load_quiz  # noqa: E402
from ddl_lab.runtime import Cluster  # noqa: E402
from ddl_lab.runtime.worlds import in_worlds  # noqa: E402
from ddl_lab.transformers import panel as P  # noqa: E402
from ddl_lab.transformers import plots  # noqa: E402
from ddl_lab.transformers import ring as R  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with Cluster(4, backend="gloo", timeout=30) as c:
        yield c


@pytest.mark.parametrize("t, sp, c, s", [(2, False, 4, 32), (4, True, 2, 32), (1, True, 3, 30)])
def test_the_panel_step_equals_its_formulas(cluster, t, sp, c, s):
    run = P.panel_run(cluster, t, sp, c, s)
    assert run.sp == (sp and t > 1)               # t = 1 has nothing to shard
    assert len(run.activations) == len(run.tp_sent) == t
    assert len(run.ring_sent) == len(run.ring_work) == c
    for measured, formula in run.activations + run.tp_sent + run.ring_sent:
        assert measured == pytest.approx(formula)
    assert (t == 1) == (run.tp_sent[0][0] == 0)
    assert max(run.ring_work) - min(run.ring_work) <= max(run.ring_work) // 4   # zig-zag
    fig = plots.figure_panel(run)
    assert len(fig.axes) == 3
    plt.close(fig)


def test_sequence_parallelism_shrinks_the_panel_activations(cluster):
    plain, sharded = (P.panel_run(cluster, 4, sp, 1, 32) for sp in (False, True))
    assert sharded.activations[0][0] < plain.activations[0][0]
    assert sharded.loss == pytest.approx(plain.loss, rel=1e-5)


def test_the_ring_stepper_draws_every_step_and_refuses_others(cluster):
    outs = cluster.run(in_worlds, R.ring_case, [(3, (1, 1, 12, 2, True, False))])
    steps = [o[0]["steps"] for o in outs[:3]]
    assert [[st.block for st in mine] for mine in steps] == \
        [[(r - k) % 3 for k in range(3)] for r in range(3)]
    for k in range(3):
        ax = plots.plot_ring_step(steps, k, plt.figure().gca())
        assert f"ring step {k}" in ax.get_title()
        plt.close("all")
    with pytest.raises(ValueError, match="step must be in 0..2"):
        plots.plot_ring_step(steps, 3)


def test_the_quiz_loads():
    assert len(load_quiz("transformers")) >= 5
