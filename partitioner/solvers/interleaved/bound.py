"""A proven lower bound of the interleaved space for one group count: a linear relaxation that keeps memory.

The fastest entry of every layer bounds the objective from below, but far
from it when memory binds (a MoE layer's fastest entry often holds its
experts unsharded). :func:`relaxed_bound` solves, with HiGHS, a linear
program whose optimum is at most the value of every plan of the space
with P groups:

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.interleaved.bound``.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ...core.stdio import quiet_stdout
from ...problem import Layout, Problem
from .space import group_configs, held_states, send_ms

__all__ = ["relaxed_bound", "BOUND_MARGIN"]

BOUND_MARGIN = 1e-7  # relative, for HiGHS's primal and dual feasibility tolerances (1e-7 by default)


def _least_sends(problem: Problem, groups: int) -> list[float]:
    """S_g: per group, the least sends its chunks pay (module docstring).

    Chunk c ends after a layer in [c, L - K + c] (the chunks before it and
    after it each keep a layer), so its send x_c on link c mod P is at least
    the least send of a layer in that window.
    """
    P, v, L = groups, problem.training.virtual_stages, problem.num_layers
    if P == 1:
        return [0.0]
    K = P * v
    least = [min(send_ms(problem, i, P, c % P) for i in range(c, L - K + c + 1)) for c in range(K - 1)]
    out = [0.0] * P
    for c in range(K):
        if c < K - 1:
            out[c % P] += least[c]
        if c > 0:
            out[c % P] += least[c - 1]
    return out


def _pareto_columns(entries: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The (time, bytes) columns of one layer and group that no other matches or beats in both: a
    dominated column can be swapped for its dominator in any LP point without raising a time or a row."""
    kept: list[tuple[float, float]] = []
    for t, b in sorted(set(entries)):
        if not kept or b < kept[-1][1]:
            kept.append((t, b))
    return kept


def relaxed_bound(problem: Problem, objective: str, groups: int, time_limit: float | None = None,
                  configs: Sequence[Layout] | None = None) -> float | None:
    """The LP bound of the module docstring for P = ``groups`` (ms); inf when the LP proves no plan fits,
    None when HiGHS gives no optimum (time limit, numerical trouble). ``configs``: those of the group
    size (:func:`.space.group_configs`), when the caller holds them."""
    import highspy

    P, v, m = groups, problem.training.virtual_stages, problem.microbatches
    allowed = set(group_configs(problem, problem.num_devices // P) if configs is None else configs)
    if P * v > problem.num_layers:
        return math.inf
    capacity = problem.cluster.gpu_memory_bytes
    nu = [max(min(s) for s in held_states(P, m, v, g)) for g in range(P)]
    sends = _least_sends(problem, P)
    L = problem.num_layers
    # rows: [0, L) layer cover (== 1); then P memory rows (<= capacity); P time rows (T_g - sum = S_g);
    # P rows T_g - z <= 0
    mem_row, time_row, top_row = L, L + P, L + 2 * P
    starts: list[int] = [0]
    index: list[int] = []
    value: list[float] = []
    slowest = 0.0
    for i, layer in enumerate(problem.layers):
        entries = [e for lay, e in layer.costs.items() if lay in allowed]
        if not entries:
            return math.inf  # a layer with no config of the group size: no plan has P groups
        slowest = max(slowest, min(e.fwd_ms + e.bwd_ms for e in entries))
        for g in range(P):
            columns = _pareto_columns([(e.fwd_ms + e.bwd_ms, float(e.weight_bytes - e.tied_weight_bytes + nu[g] * e.act_bytes))
                                       for e in entries])
            for t, b in columns:  # x[i, g, k]
                index.extend((i, mem_row + g, time_row + g))
                value.extend((1.0, b, -t))
                starts.append(len(index))
    n_x = len(starts) - 1
    for g in range(P):  # T_g
        index.extend((time_row + g, top_row + g))
        value.extend((1.0, 1.0))
        starts.append(len(index))
    index.extend(range(top_row, top_row + P))  # z
    value.extend([-1.0] * P)
    starts.append(len(index))
    n_col, n_row = n_x + P + 1, L + 3 * P
    inf = highspy.kHighsInf
    row_lower = np.concatenate([np.ones(L), np.full(P, -inf), np.asarray(sends), np.full(P, -inf)])
    row_upper = np.concatenate([np.ones(L), np.full(P, float(capacity)), np.asarray(sends), np.zeros(P)])
    obj_T = 1.0 / v if objective == "iteration" else 0.0
    obj_z = (m - 1.0 / v) if objective == "iteration" else 1.0
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_col, n_row
    lp.col_cost_ = np.concatenate([np.zeros(n_x), np.full(P, obj_T), [obj_z]])
    lp.col_lower_ = np.concatenate([np.zeros(n_x + P), [slowest]])
    lp.col_upper_ = np.full(n_col, inf)
    lp.row_lower_, lp.row_upper_ = row_lower, row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.asarray(starts, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.asarray(value, dtype=float)
    with quiet_stdout():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    if time_limit is not None:
        h.setOptionValue("time_limit", max(1e-3, float(time_limit)))
    h.passModel(lp)
    if h.run() == highspy.HighsStatus.kError and h.getModelStatus() == highspy.HighsModelStatus.kNotset:
        # one process-wide HiGHS scheduler: an earlier solve with another thread count blocks run()
        # (milp's backend does the same); nothing else is solving, so reset it and run again
        highspy.Highs.resetGlobalScheduler(True)
        h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return math.inf
    if status != highspy.HighsModelStatus.kOptimal:
        return None
    found = float(h.getInfo().objective_function_value)
    return max(0.0, found - BOUND_MARGIN * max(abs(found), 1.0))
