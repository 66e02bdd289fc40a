"""The interleaved 1F1B schedule (lesson 09): a valid order, the bubble (p − 1)/(v·m) counted
in slots, and on real workers the same training as one process."""
import pytest
import torch

from ddl_lab.model_parallel import interleaved as I
from ddl_lab.model_parallel import pipeline as P
from ddl_lab.model_parallel import plots
from ddl_lab.runtime import shared_cluster


@pytest.fixture(scope="module")
def cluster():
    return shared_cluster(5)


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("v", [1, 2, 3])
def test_order_is_valid_and_its_slot_bubble_is_the_formula(p, v):
    for m in (p, 2 * p, 3 * p):
        orders = [I.interleaved_order(r, p, m, v) for r in range(p)]
        assert I.validate_interleaved(orders, m, v) is None
        assert all(len(o) == 2 * m * v for o in orders)
        assert I.slot_bubble_of_ideal(orders, v) == pytest.approx((p - 1) / (v * m))


def test_megatron_warm_up_and_chunk_order():
    """Rank r warms up with 2(p − r − 1) + (v − 1)p forwards, chunks in groups of p."""
    p, m, v = 4, 8, 2
    for r in range(p):
        order = I.interleaved_order(r, p, m, v)
        first_backward = next(k for k, op in enumerate(order) if op[0] == "B")
        assert first_backward == 2 * (p - r - 1) + (v - 1) * p + 1    # warm-up, then 1F1B
    assert I.interleaved_order(1, 2, 4, 2)[:6] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1),
                                                  ("B", 0, 1), ("F", 1, 1), ("B", 1, 1)]


def test_bad_orders_are_named():
    good = [I.interleaved_order(r, 2, 2, 2) for r in range(2)]
    backward_first = [list(good[0]), [("B", 0, 1)] + [o for o in good[1] if o != ("B", 0, 1)]]
    assert "comes before" in I.validate_interleaved(backward_first, 2, 2)
    # rank 0 starts on chunk 1, which needs rank 1's chunk 0, which needs rank 0's chunk 0
    circle = [[("F", 0, 1)] + [o for o in good[0] if o != ("F", 0, 1)], list(good[1])]
    assert "wait for each other" in I.validate_interleaved(circle, 2, 2)
    assert "outside" in I.validate_interleaved([good[0] + [("F", 0, 5)], good[1]], 2, 2)
    with pytest.raises(ValueError, match="multiple of p"):
        I.interleaved_order(0, 2, 3, 2)


@pytest.mark.parametrize("p,v,m", [(2, 2, 4), (3, 2, 3)])
def test_interleaved_run_equals_one_process(cluster, p, v, m):
    runs = cluster.run(I.interleaved_run, p, v, m, steps=2, batch=24)
    ref_losses, ref_params = P.single_process_run("mlp", 2, 24, p=p * v)
    last = runs[(p * v - 1) % p]
    assert last.losses == pytest.approx(ref_losses, rel=1e-5, abs=1e-6)
    for r in range(p):
        want = torch.cat([ref_params[c * p + r] for c in range(v)])
        assert torch.allclose(runs[r].params, want, atol=1e-6)
        assert I.recorded_order(runs[r]) == I.interleaved_order(r, p, m, v)
    assert all(r is None for r in runs[p:])
    slots = I.slot_bubble_of_ideal([I.recorded_order(r) for r in runs[:p]], v)
    assert slots == pytest.approx((p - 1) / (v * m))
    ax = plots.plot_pipeline(runs)
    assert f"v = {v}" in ax.get_title() and "emulated" not in ax.get_title()


def test_padded_runs_say_they_are_emulated():
    run = P.StageRun(0, 2, 4, "gpipe", pad=0.0025)
    assert "emulated" in run.emulated and "2.5 ms per example and stage" in run.emulated
    assert P.StageRun(0, 2, 4, "gpipe").emulated == ""
    assert "1.25 ms per chunk" in P.StageRun(0, 2, 4, "interleaved 1F1B", v=2, pad=0.0025).emulated
    assert P.ideal_bubble(2, 4, 2) == pytest.approx(1 / 9)
