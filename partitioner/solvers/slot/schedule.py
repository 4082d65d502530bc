"""What the slot model (``cpsat``, ``milp``) needs to know about the pipeline schedule.

The schedule enters the slot model in two places: the activation stash of
each slot (memory), and the objective. Both models (:mod:`.cpsat.formulation`,
:mod:`.milp.formulation`) read them from here, so they optimise the same thing.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.slot.schedule``.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ...plan.schedules import stash
from ...problem import LayerCost

__all__ = [
    "Part",
    "objective_parts",
    "slot_stash",
    "wgrad_factor",
    "wgrad_steps",
    "error_terms",
    "ceiling_ms",
    "part_ms",
    "exact_part",
    "send_terms",
    "peak_values",
    "fill_stage_values",
]


@dataclass(frozen=True)
class Part:
    """One per-stage time the objective weighs: its layer cost, reshard factor and sends.

    ``sends`` lists the send terms of slot j: ``"in"`` is ``x_j`` (the
    transfer with slot j + 1, the previous stage: the backward's gradient),
    ``"out"`` is ``x_{j-1}`` (with slot j - 1, the next stage: the forward's
    activations).
    """

    name: str
    reshards: int  # how many times the stage's reshards count: 2 (F and B), 1, or 0
    sends: tuple[str, ...]


T = Part("t", 2, ("out", "in"))
U = Part("u", 2, ("out", "in"))
W = Part("w", 0, ())
F = Part("f", 1, ("out",))
B = Part("b", 1, ("in",))


def objective_parts(schedule: str, objective: str) -> tuple[Part, ...]:
    """The parts of the slot model's objective (module docstring); ``(T,)`` for 1F1B's."""
    if objective == "iteration" and schedule == "zb-h1":
        return (U, W)
    if objective == "iteration" and schedule == "gpipe":
        return (F, B)
    return (T,)


def slot_stash(schedule: str, microbatches: int, slots: int) -> tuple[int, ...]:
    """Microbatches each slot stashes (slot j = stage ``slots - 1 - j``): :func:`partitioner.plan.schedules.stash`
    read from the end -- GPipe all m, 1F1B and ZB-H1 ``min(m, j + 1)``."""
    return tuple(reversed(stash(schedule, slots, microbatches)))


def wgrad_factor(stages: int, microbatches: int) -> int:
    """ZB-H1's k_P = max(m - P + 1, 1): the bottleneck's W's that do not hide in its bubble."""
    return max(microbatches - stages + 1, 1)


def wgrad_steps(counts, slot: int, microbatches: int) -> list[tuple[int, int]]:
    """The ``(P, k_P)`` whose constraint slot ``slot`` needs: feasible counts P > slot,
    dropping a count whose k equals the next larger count's (that constraint implies it)."""
    mine = sorted(P for P in counts if P > slot)
    out = []
    for n, P in enumerate(mine):
        k = wgrad_factor(P, microbatches)
        if n + 1 < len(mine) and wgrad_factor(mine[n + 1], microbatches) == k:
            continue
        out.append((P, k))
    return out


def error_terms(schedule: str, objective: str, slots: int, counts, microbatches: int) -> int:
    """How many stage-part errors the objective adds up (at most): CP-SAT's error count.

    ``bottleneck`` 1; 1F1B ``iteration`` J + m - 1; ZB-H1 J (sum of u) + m - 1
    (the max's u) + k_max (its W); GPipe twice J + m - 1.
    """
    J, m = slots, microbatches
    if objective == "bottleneck":
        return 1
    parts = objective_parts(schedule, objective)
    if parts == (U, W):
        return J + m - 1 + max((wgrad_factor(P, m) for P in counts), default=m)
    return len(parts) * (J + m - 1)


def ceiling_ms(schedule: str, objective: str, value: float, microbatches: int) -> float:
    """The largest stage time t (hence each part) of a plan whose objective is at most ``value``.

    ``bottleneck`` is max t. 1F1B's and GPipe's iteration estimates are at least
    m t_c for every stage c (GPipe: sum F + (m-1) max F >= m F_c, the same for B).
    ZB-H1's is at least m u_c + k W_c >= u_c + W_c = t_c (m, k >= 1), and no more.
    """
    if objective == "bottleneck":
        return value
    if objective_parts(schedule, objective) == (U, W):
        return value
    return value / microbatches


def part_ms(part: Part, cost: LayerCost) -> float:
    """The layer's contribution to ``part`` (float ms)."""
    if part.name == "t":
        return cost.fwd_ms + cost.bwd_ms
    if part.name == "f":
        return cost.fwd_ms
    if part.name == "b":
        return cost.bwd_ms
    w = cost.split()[1]
    return w if part.name == "w" else cost.fwd_ms + cost.bwd_ms - w


def exact_part(part: Part, cost: LayerCost) -> Fraction:
    """:func:`part_ms` in exact rational arithmetic (every double is a dyadic rational)."""
    fwd, bwd = Fraction(cost.fwd_ms), Fraction(cost.bwd_ms)
    if part.name == "t":
        return fwd + bwd
    if part.name == "f":
        return fwd
    if part.name == "b":
        return bwd
    w = Fraction(cost.split()[1])
    return w if part.name == "w" else fwd + bwd - w


def send_terms(part: Part, j: int, slots: int, send: list) -> list:
    """The sends ``part`` of slot j pays: ``"out"`` x_{j-1} (to the next stage), ``"in"`` x_j."""
    if not send:
        return []
    out = []
    if "out" in part.sends and j > 0:
        out.append(send[j - 1])
    if "in" in part.sends and j < slots - 1:
        out.append(send[j])
    return out


def peak_values(stages: dict, num_stages: int, microbatches: int) -> dict:
    """The max terms of the objective from every part's stage values ``{name: [per slot]}``:
    ZB-H1 ``{"w": max_j (m - 1) u_j + k_P W_j}``, GPipe ``{"f": max F, "b": max B}``."""
    m = microbatches
    if "w" in stages:
        k = wgrad_factor(num_stages, m)
        return {"w": max((m - 1) * u + k * w for u, w in zip(stages["u"], stages["w"]))}
    return {name: max(values) for name, values in stages.items()}


def fill_stage_values(pv, out: dict, twice: list, send: list, data, num_stages: int) -> None:
    """Set ``out`` for every part's stage and peak variables of ``pv`` (either model's part
    variables: ``compute``, ``stage``, ``reshard``, ``peak``), given ``out`` already holds the
    compute and once-paid reshard values, ``twice[j]`` slot j's ``2 r`` and ``send[j]`` x_j."""
    specs = {p.name: p for p in objective_parts(data.schedule, data.objective)}
    J = data.slots
    for name, stages in pv.stage.items():
        part = specs[name]
        for j, t in enumerate(stages):
            value = out[pv.compute[name][j]] + sum(send_terms(part, j, J, send))
            if part.reshards == 2:
                value += twice[j]
            elif (name, j) in pv.reshard:
                value += out[pv.reshard[name, j]]
            out[t] = value
    values = {name: [out[t] for t in stages] for name, stages in pv.stage.items()}
    for name, value in peak_values(values, num_stages, data.microbatches).items():
        out[pv.peak[name]] = value
