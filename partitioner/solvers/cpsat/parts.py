"""CP-SAT: stage compute, and the objectives made of several per-stage parts.

:func:`stage_compute` states a slot's compute (of ``t``, or of one part) from
per-layer integer times; :func:`part_objective` builds ZB-H1's and GPipe's
iteration estimates from their parts (:mod:`.slot.schedule`: u and W, F and
B) and :func:`part_hint_values` gives their variables' values under a plan.
1F1B's objectives (and every ``bottleneck``) use ``t`` alone and stay in
:mod:`.formulation`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..slot.data import SlotData, SlotDecisions
from ..slot.schedule import fill_stage_values, send_terms, wgrad_factor, wgrad_steps
from ..slot.times import IntegerTimes

__all__ = ["PartVars", "stage_compute", "part_objective", "part_hint_values", "part_objective_units"]


@dataclass
class PartVars:
    """Per part name: its compute and stage variables per slot, its segments (several groups),
    its reshard variables (GPipe's once-paid ``r``), and the objective's max variables."""

    compute: dict = field(default_factory=dict)  # name -> [var per slot]
    stage: dict = field(default_factory=dict)  # name -> [var per slot]
    segment: dict = field(default_factory=dict)  # (name, j, g) -> var
    reshard: dict = field(default_factory=dict)  # (name, j) -> var (parts paying r once)
    peak: dict = field(default_factory=dict)  # name -> var: Z (zb-h1: "w") or max F, max B


def _zero(value) -> bool:
    return isinstance(value, int) and value == 0


def stage_compute(model, data: SlotData, tau, top: int, members, use, size, cover, check, tag: str = "") -> tuple[list, dict]:
    """Per slot, its compute in units of ``tau`` (per layout, per layer), lower-bounded per segment
    by the segment's layout; the redundant device budget ``d compute_j >= sum_i work_i x_ij``.
    Returns the compute variables and, with several groups, the segments' ``{(j, g): var}``."""
    J, L, nl = data.slots, data.num_layers, len(data.layouts)
    present = data.present
    work = [min(data.layouts[k].devices * tau[k][i] for k in range(nl) if present[k][i]) for i in range(L)]
    compute, segment = [], {}
    for j in range(J):
        check()
        c = model.new_int_var(0, top, f"compute{tag}{j}")
        if len(data.groups) == 1:
            for k in range(nl):
                if not isinstance(use[j][0][k], int):
                    model.add(c >= sum(tau[k][i] * x for i, x in members[j] if tau[k][i])).only_enforce_if(use[j][0][k])
        else:
            parts = []
            for g, (a, b) in enumerate(data.groups):
                if _zero(cover[j][g]):
                    continue
                cg = model.new_int_var(0, top, f"compute{tag}{j}_{g}")
                for k in range(nl):
                    if not isinstance(use[j][g][k], int):
                        terms = [tau[k][i] * x for i, x in members[j][a : b + 1] if tau[k][i]]
                        model.add(cg >= sum(terms)).only_enforce_if(use[j][g][k])
                segment[j, g] = cg
                parts.append(cg)
            model.add(c == sum(parts))
        for s, d in enumerate(data.sizes):
            model.add(d * c >= sum(work[i] * x for i, x in members[j] if work[i])).only_enforce_if(size[j][s])
        compute.append(c)
    return compute, segment


def part_objective(model, data: SlotData, times: IntegerTimes, parts, members, use, size, cover, active, pair, reshard, send, check):
    """The compute and stage variables of every part, and the objective (see :mod:`.slot.schedule`).

    ``reshard`` is the per-slot ``2 r`` (units, or 0); ``pair`` the mesh-pair
    literals from which a part paying ``r`` once builds its own; ``active[P]``
    the literal "more than P stages" (an int 0 for P >= J).
    """
    J, m, top = data.slots, data.microbatches, times.top
    pv = PartVars()
    for part in parts:
        tau = times.parts[part.name][1]
        pv.compute[part.name], segs = stage_compute(model, data, tau, top, members, use, size, cover, check, part.name)
        pv.segment.update({(part.name, j, g): v for (j, g), v in segs.items()})
    for part in parts:
        stages = []
        for j in range(J):
            terms = [pv.compute[part.name][j], *send_terms(part, j, J, send)]
            if part.reshards == 2 and not isinstance(reshard[j], int):
                terms.append(reshard[j])
            elif part.reshards == 1:
                once = [times.reshard_once[g][p] * w for (jj, g), row in pair.items() if jj == j
                        for p, w in row.items() if times.reshard_once[g].get(p, 0)]
                if once:
                    r = model.new_int_var(0, top, f"reshard{part.name}{j}")
                    model.add(r == sum(once))
                    pv.reshard[part.name, j] = r
                    terms.append(r)
            t = model.new_int_var(0, top, f"time{part.name}{j}")
            model.add(t == sum(terms))
            stages.append(t)
        pv.stage[part.name] = stages
    names = [p.name for p in parts]
    if names == ["u", "w"]:
        u, w = pv.stage["u"], pv.stage["w"]
        k_max = max(wgrad_factor(P, m) for P in data.counts)
        z = model.new_int_var(0, (m - 1 + k_max) * top, "zb_peak")
        for j in range(J):
            for P, k in wgrad_steps(data.counts, j, m):
                bound = model.add(z >= (m - 1) * u[j] + k * w[j])
                if P < J:
                    bound.only_enforce_if(~active[P])
        pv.peak["w"] = z
        return sum(u) + z, pv
    objective = 0
    for name in names:  # gpipe: two flow shops
        peak = model.new_int_var(0, top, f"peak{name}")
        model.add_max_equality(peak, pv.stage[name])
        pv.peak[name] = peak
        objective = objective + sum(pv.stage[name]) + (m - 1) * peak
    return objective, pv


def part_hint_values(pv: PartVars, data: SlotData, times: IntegerTimes, d: SlotDecisions, pair_used: dict, send: list) -> dict:
    """Every part variable's value under the decisions ``d``.

    ``pair_used[j, g]`` is the mesh pair slot j uses across boundary g (or None),
    ``send[j]`` the units of x_j.
    """
    J = data.slots
    ends = d.ends(data)
    out: dict = {}
    for name, compute in pv.compute.items():
        prefix = times.parts[name][0]
        for j in range(J):
            value = 0
            for g, (a, b) in enumerate(data.groups):
                lo, hi = (max(a, d.starts[j]), min(b + 1, ends[j])) if j < d.stages else (0, 0)
                seg = prefix[d.configs[j][g]][hi] - prefix[d.configs[j][g]][lo] if lo < hi else 0
                value += seg
                if (name, j, g) in pv.segment:
                    out[pv.segment[name, j, g]] = seg
            out[compute[j]] = value
    for (name, j), r in pv.reshard.items():
        out[r] = sum(times.reshard_once[g].get(p, 0) for (jj, g), p in pair_used.items() if jj == j and p is not None)
    twice = [0] * J
    for (j, g), p in pair_used.items():
        if p is not None:
            twice[j] += times.reshard[g].get(p, 0)
    fill_stage_values(pv, out, twice, send, data, d.stages)
    return out


def part_objective_units(pv: PartVars, values: dict, microbatches: int) -> int:
    """The objective's value (units) under the hint ``values``."""
    m = microbatches
    if "w" in pv.peak:
        return sum(values[u] for u in pv.stage["u"]) + values[pv.peak["w"]]
    return sum(sum(values[t] for t in pv.stage[name]) + (m - 1) * values[peak] for name, peak in pv.peak.items())
