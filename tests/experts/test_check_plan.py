"""Lesson 14's tasks 2 and 3 (``check/experts.py``): the bytes along each mesh dimension and
the fastest layout that fits — right answers in several styles pass, the named wrong ones
fail with their names; the check's accounting equals ``planner.predict``'s bytes."""
import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.check import experts as X
from ddl_lab.experts import planner as P


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_accounting_is_the_planner_s(seed):
    """``_mesh_costs`` equals ``planner.predict``'s bytes for the untied dense model, psi =
    ``rank_params``, no vocabulary parallelism, whole activations between stages (sequence
    parallelism moves the same bytes: either setting)."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        p = X._draw_mesh(rng)
        model = P.Model(layers=p["L"], hidden=p["h"], heads=8, seq=p["s"], vocab=32000,
                        e=p["e"])
        for sp in (False, True):
            lay = P.Layout(dp=p["dp"], tp=p["tp"], pp=p["pp"], micro=p["b"], sp=sp,
                           vocab_parallel=False, scatter_gather=False)
            p["psi"] = P.rank_params(model, lay)
            got = P.predict(model, p["dp"] * p["m"] * p["b"], P.Cluster(1, 1e12, 1e12),
                            lay).bytes
            want = X._mesh_costs(p)
            for dim in ("dp", "tp", "pp"):
                assert got[dim] == pytest.approx(want[dim], rel=1e-12, abs=1e-9), (p, dim)


def ring_formulas(L, h, s, b, m, dp, tp, pp, psi, e):
    """Another right style: numpy float32 values, the pipeline by cases."""
    act = np.float32(b * s * h * e)
    pipe = {1: 0, 2: 1}.get(pp, 2)
    return {"dp": np.float32(2 * (dp - 1) * psi * e / dp),
            "tp": np.float32(8 * (tp - 1) / tp * act * L / pp * m),
            "pp": np.float32(pipe * act * m)}


def test_right_mesh_bytes_pass(capsys, solution):
    check.mesh_bytes(solution("14_experts", "my_mesh_bytes"))
    check.mesh_bytes(ring_formulas, seed=4)
    assert capsys.readouterr().out.count("✔ mesh_bytes: passed") == 2


def _wrong(mistake):
    def wrong(*args):
        return X._mesh_costs(dict(zip(X._MESH_ARGS, args)), mistake)
    return wrong


@pytest.mark.parametrize("mistake, fault", [
    ("2S", "counted as 2·S"),
    ("reduce-scatter", "a reduce-scatter alone"),
    ("forward only", "only the forward all-reduces of tensor parallelism"),
    ("no micro", "the micro-batches were forgotten"),
    ("all layers", "all L layers were counted"),
    ("pp both at an end", "with pp = 2 both stages are end stages"),
    ("pp once", "a middle stage was counted once"),
    ("global batch", r"the global batch \(dp · m · b sequences\)"),
    ("rank batch", r"the rank's whole batch \(m · b sequences\)"),
    ("elements", "elements were counted, not bytes"),
])
def test_mesh_bytes_mistakes_are_named(mistake, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.mesh_bytes(_wrong(mistake))


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda *a: (1, 2, 3), 'return a dict with the keys dp, tp and pp'),
    (lambda *a: {"dp": "x", "tp": 0, "pp": 0}, "return dp: bytes ≥ 0"),
    (lambda *a: P.predict, "package's own implementation"),
])
def test_mesh_bytes_refuses_what_is_no_answer(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.mesh_bytes(wrong)


# ---------------------------------------------------------------- choose_layout

def _search(model, batch, cluster, keep=lambda lay: True, fits=True, key="total"):
    """All valid layouts (micro ≤ 8), the fastest by ``key`` among those ``keep`` allows."""
    n = cluster.devices
    ds = [d for d in range(1, n + 1) if n % d == 0]
    best = None
    for tp in ds:
        for pp in ds:
            for cp in ds:
                if n % (tp * pp * cp):
                    continue
                dp = n // (tp * pp * cp)
                if model.heads % tp or model.kv % tp or model.layers % pp or \
                        model.seq % cp or batch % dp:
                    continue
                for zero in range(4 if pp == 1 else 2):
                    for rec in ("none", "selective", "full"):
                        for micro in range(1, 9):
                            if (batch // dp) % micro:
                                continue
                            lay = P.Layout(dp, tp, pp, cp, 1, zero, rec, micro)
                            q = P.predict(model, batch, cluster, lay)
                            if keep(lay) and (q.fits or not fits) and (
                                    best is None or q.seconds[key] < best.seconds[key]):
                                best = q
    return best


def as_dict(model, batch, cluster):
    """Another right style: the fastest layout as a dict of its fields."""
    best = _search(model, batch, cluster)
    return None if best is None else {k: getattr(best.layout, k) for k in
                                      ("dp", "tp", "pp", "cp", "zero", "recompute", "micro")}


def test_right_layouts_pass(capsys, solution):
    check.choose_layout(solution("14_experts", "my_choose_layout"))
    check.choose_layout(as_dict, seed=3)
    assert capsys.readouterr().out.count("✔ choose_layout: passed") == 2


def ignores_memory(model, batch, cluster):
    best = _search(model, batch, cluster, fits=False)
    return best.layout


def only_data_parallel(model, batch, cluster):
    """ZeRO-3 data parallelism, the least memory DP has — slow where tp or pp would do."""
    best = _search(model, batch, cluster, keep=lambda lay: lay.tp == lay.pp == lay.cp == 1)
    return None if best is None else best.layout


def tp_everywhere(model, batch, cluster):
    best = _search(model, batch, cluster,
                   keep=lambda lay: lay.tp == max(d for d in (1, 2, 4, 8, 16, 32)
                                                  if model.heads % d == 0 and
                                                  model.kv % d == 0 and
                                                  cluster.devices % d == 0))
    return None if best is None else best.layout


def zero3_with_pipeline(model, batch, cluster):
    best = _search(model, batch, cluster)
    if best is None:
        return None
    return {"dp": cluster.devices // 2, "pp": 2, "zero": 3}


def never_none(model, batch, cluster):
    return _search(model, batch, cluster, fits=False).layout if _search(
        model, batch, cluster) is None else _search(model, batch, cluster).layout


def borrowed(model, batch, cluster):
    return P.plan(model, batch, cluster)[0].layout


@pytest.mark.parametrize("wrong, fault", [
    (ignores_memory, r"which does not fit: a device would hold [\d.]+ GB, [\d.]+ GB \(\d+%\) "
                     r"over its"),
    (only_data_parallel, r"it fits, but a step takes [\d.]+ s, [\d.]+× the fastest layout "
                         r"that fits .* the fastest that fits is"),
    (tp_everywhere, r"it fits, but a step takes [\d.]+ s, [\d.]+× the fastest .* yours spends"),
    (zero3_with_pipeline, r"not a valid layout — ZeRO-3 with pp = 2"),
    (never_none, r"which does not fit: .*nothing fits here, so return None"),
    (borrowed, "package's own implementation"),
    (lambda m, b, c: {"dp": c.devices, "tensor": 1}, r"keys \['tensor'\] that a Layout does "
                                                     "not have"),
    (lambda m, b, c: "dp", r"return a planner.Layout, a dict of its fields, or None"),
])
def test_wrong_layouts_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.choose_layout(wrong)


def test_the_cases_include_one_where_nothing_fits():
    trial = X.Trial("choose_layout", stub, 0, X._fixed_layout(), draws=6,
                    draw=X._layout_draws())
    fits = [P.plan(*X._objects(c.params))[0].fits for c in trial]
    assert not all(fits) and sum(fits) >= 5
