"""Which allreduce wins where: the α–β models' map over (n, S) beside the map measured on
this machine (lesson 06 §7)."""
from __future__ import annotations

from typing import Any, Sequence

from ddl_lab.ring_allreduce.cost import best_chunks, cost_model, shared_cores
from ddl_lab.ring_allreduce.engine import best_of, time_allreduce
from ddl_lab.runtime.worlds import in_worlds

__all__ = ["CONTENDERS", "model_map", "measured_map", "winners", "agreement"]

CONTENDERS = ("tree", "ring", "halving_doubling", "pipelined_tree")
Cell = tuple[int, int]                              # (world size, bytes)


def _options(algorithm: str, n: int, S: int, alpha: float, beta: float) -> dict[str, Any]:
    return {"chunks": best_chunks(n, S, alpha, beta, most=64)} \
        if algorithm == "pipelined_tree" else {}


def model_map(ns: Sequence[int], sizes: Sequence[int], alpha: float, beta: float,
              gamma: float = 0.0, cores: int | None = None) -> dict[Cell, dict[str, float]]:
    """Modelled seconds of every contender in every cell (the pipelined tree with the
    number of pieces the model finds best, at most 64, as ``measured_map`` runs it): the
    α–β model, or with ``cores`` the same on a machine of that many cores
    (``cost.shared_cores``)."""
    def one(a: str, n: int, S: int) -> float:
        opts = _options(a, n, S, alpha, beta)
        if cores is None:
            return cost_model(a, n, S, alpha, beta, gamma, **opts)
        return shared_cores(a, n, S, alpha, beta, cores, gamma, **opts)
    return {(n, S): {a: one(a, n, S) for a in CONTENDERS} for n in ns for S in sizes}


def _time_cell(plan: list[tuple[str, int, dict]], repeats: int) -> list[list[float]]:
    """Worker, on an n-rank world: each (algorithm, bytes, options) timed ``repeats`` times."""
    return [time_allreduce(a, S, repeats, **opts) for a, S, opts in plan]


def measured_map(cluster, ns: Sequence[int], sizes: Sequence[int], alpha: float, beta: float,
                 repeats: int = 3, gloo: bool = True) -> dict[Cell, dict[str, float]]:
    """Measured seconds (best of ``repeats``, slowest rank) of every contender, and of
    ``dist.all_reduce`` if ``gloo``, in every cell, on worlds carved out of ``cluster``."""
    names = CONTENDERS + (("dist.all_reduce",) if gloo else ())
    cases = [(n, ([(a, S, _options(a, n, S, alpha, beta)) for S in sizes for a in names],
                  repeats)) for n in ns]
    per_rank = cluster.run(in_worlds, _time_cell, cases)
    out: dict[Cell, dict[str, float]] = {}
    for k, n in enumerate(ns):
        ranks = [per_rank[r][k] for r in range(n)]
        for j, (a, S, _) in enumerate(cases[k][1][0]):
            out.setdefault((n, S), {})[a] = best_of([r[j] for r in ranks])
    return out


def winners(times: dict[Cell, dict[str, float]]) -> dict[Cell, str]:
    """The fastest contender in each cell (``dist.all_reduce`` is not a contender)."""
    return {cell: min(CONTENDERS, key=t.get) for cell, t in times.items()}


def agreement(model: dict[Cell, dict[str, float]], measured: dict[Cell, dict[str, float]],
              tie: float = 0.10) -> tuple[float, list[dict[str, Any]]]:
    """The share of cells where the model picks the measured winner — or an algorithm the
    clock puts within ``tie`` of it (a tie on the clock) — and one row per other cell:
    both winners, how far apart the model puts them, whether the model calls it a tie."""
    mw, ew = winners(model), winners(measured)
    rows = []
    for cell in model:
        if measured[cell][mw[cell]] > (1 + tie) * measured[cell][ew[cell]]:
            gap = model[cell][ew[cell]] / model[cell][mw[cell]] - 1
            rows.append({"n": cell[0], "bytes": cell[1], "model": mw[cell],
                         "measured": ew[cell], "model_gap": gap, "model_tie": gap <= tie,
                         "measured_gap": measured[cell][mw[cell]] / measured[cell][ew[cell]] - 1})
    return 1 - len(rows) / len(model), rows
