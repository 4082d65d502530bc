"""MILP: the objectives made of several per-stage parts (ZB-H1's and GPipe's iteration estimates).

The parts (:mod:`.slot.schedule`: u and W, F and B) are linear in the layer
shares ``z`` of :mod:`.formulation`, so each is exact at integer decisions.
ZB-H1's stage-count factor ``k_P`` is switched per feasible count with a
big-M on ``active[P]`` (more than P stages): ``Z >= (m - 1) u_j + k_P W_j -
(k_P - k_J) W_max active[P]``, where ``k_J`` is the factor of the most
stages (whose constraint always holds) and ``W_max`` bounds W_j, so a
switched-off constraint is implied by that one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...core.lazy import lazy_module
from ..slot.data import SlotData, SlotDecisions
from ..slot.schedule import fill_stage_values, objective_parts, part_ms, send_terms, wgrad_steps

if TYPE_CHECKING:
    import pulp
else:
    pulp = lazy_module("pulp")

__all__ = ["MilpPartVars", "part_objective", "part_start_values"]


@dataclass
class MilpPartVars:
    compute: dict = field(default_factory=dict)  # name -> [var per slot]
    stage: dict = field(default_factory=dict)  # name -> [var per slot]
    reshard: dict = field(default_factory=dict)  # (name, j) -> var (parts paying r once)
    peak: dict = field(default_factory=dict)  # name -> var: Z (zb-h1: "w") or max F, max B


def _coefficients(data: SlotData, part, cap: float) -> list[list]:
    """Per layer and layout, the part's ms (capped at ``cap``), None where the cost entry is missing."""
    return [[min(part_ms(part, c), cap) if (c := layer.cost(lay)) is not None else None for lay in data.layouts]
            for layer in data.problem.layers]


def part_objective(lp: pulp.LpProblem, data: SlotData, z: dict, cap: float, before, pair: dict, reshard: list, send: list,
                   check=lambda: None):
    """Add every part's compute and stage variables and return the objective (see :mod:`.slot.schedule`);
    ``check()`` (the build guard) is called as it grows."""
    J, m = data.slots, data.microbatches
    parts = data.parts
    pv = MilpPartVars()
    coef = {}
    for part in parts:
        check()
        coef[part.name] = table = _coefficients(data, part, cap)
        rows: list[list] = [[] for _ in range(J)]
        for n, ((i, j, k), v) in enumerate(z.items()):
            if n % 4096 == 0:
                check()
            if table[i][k]:
                rows[j].append(table[i][k] * v)
        compute = []
        for j in range(J):
            check()
            c = pulp.LpVariable(f"compute{part.name}_{j}", lowBound=0)
            lp += c == pulp.lpSum(rows[j])
            compute.append(c)
        pv.compute[part.name] = compute
        stages = []
        for j in range(J):
            terms = [compute[j], *send_terms(part, j, J, send)]
            if part.reshards == 2 and not isinstance(reshard[j], int):
                terms.append(reshard[j])
            elif part.reshards == 1:
                once = [min(data.reshard_ms[g][p], cap) * w for (jj, g), row in pair.items() if jj == j
                        for p, w in row.items() if p in data.reshard_ms[g]]
                if once:
                    r = pulp.LpVariable(f"reshard{part.name}_{j}", lowBound=0)
                    lp += r == pulp.lpSum(once)
                    pv.reshard[part.name, j] = r
                    terms.append(r)
            t = pulp.LpVariable(f"time{part.name}_{j}", lowBound=0)
            lp += t == pulp.lpSum(terms)
            stages.append(t)
        pv.stage[part.name] = stages
    if [p.name for p in parts] == ["u", "w"]:
        u, w = pv.stage["u"], pv.stage["w"]
        w_max = sum(max((x for x in row if x is not None), default=0.0) for row in coef["w"])
        z_var = pulp.LpVariable("zb_peak", lowBound=0)
        for j in range(J):
            steps = wgrad_steps(data.counts, j, m)
            k_last = steps[-1][1]  # the most stages (P = J): always enforced
            for P, k in steps:
                relax = (k - k_last) * w_max * before[0][P] if P < J else 0
                lp += z_var >= (m - 1) * u[j] + k * w[j] - relax
        pv.peak["w"] = z_var
        return pulp.lpSum(u) + z_var, pv
    objective = []
    for name, stages in pv.stage.items():  # gpipe: two flow shops
        peak = pulp.LpVariable(f"peak{name}", lowBound=0)
        for t in stages:
            lp += peak >= t
        pv.peak[name] = peak
        objective += [pulp.lpSum(stages), (m - 1) * peak]
    return pulp.lpSum(objective), pv


def part_start_values(pv: MilpPartVars, data: SlotData, d: SlotDecisions, cap: float, used: dict, sends: list) -> dict:
    """Every part variable's value under the decisions ``d``; ``used[j, g]`` is the mesh pair
    slot j uses across boundary g (or None), ``sends[j]`` the value of x_j."""
    J = data.slots
    specs = {p.name: p for p in objective_parts(data.schedule, data.objective)}
    slot_of = d.slot_of(data)
    group_of = [0] * data.num_layers
    for g, (a, b) in enumerate(data.groups):
        group_of[a : b + 1] = [g] * (b - a + 1)
    out: dict = {}
    for name, compute in pv.compute.items():
        values = [0.0] * J
        for i, layer in enumerate(data.problem.layers):
            j = slot_of[i]
            values[j] += min(part_ms(specs[name], layer.costs[data.layouts[d.configs[j][group_of[i]]]]), cap)
        for j, c in enumerate(compute):
            out[c] = values[j]
    for (name, j), r in pv.reshard.items():
        out[r] = sum(min(data.reshard_ms[g][p], cap) for (jj, g), p in used.items() if jj == j and p in data.reshard_ms[g])
    twice = [0.0] * J
    for (j, g), p in used.items():
        if p in data.reshard_ms[g]:
            twice[j] += min(2 * data.reshard_ms[g][p], cap)
    fill_stage_values(pv, out, twice, sends, data, d.stages)
    return out
