"""An exact reduction of a problem's keys: drop a config some other config of its mesh is never worse than.

:func:`reduce_dominated` removes, within every maximal run of consecutive
layers of one module, each config ``b`` that another config ``a`` of the same
mesh (dp, tp, cp; the memory-knob variant and the expert split ep, etp may
differ, ``a``'s ep * etp dividing its devices) *dominates* there: every layer of the run that has ``b`` has ``a`` too, and ``a``'s entry
is at most ``b``'s in every number a plan's value or memory reads
(:func:`entry_at_most`). The optimum of the reduced problem is the optimum of
the problem, with the same value: it is what ``plan`` solves exactly
(:mod:`.exact`), each segment choosing its knobs inside the solve.

More (the detail of this module): ``docs/internals/planning.md``, section ``partitioner.planning.search.dominance``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping

from ...plan import Plan, Stage
from ...problem import Layer, LayerCost, Layout, Problem

__all__ = ["Reduction", "reduce_dominated", "entry_at_most", "module_runs"]


def entry_at_most(a: LayerCost, b: LayerCost, tied: bool = False) -> bool:
    """Whether entry ``a`` is never worse than ``b``: times (F, B, B's input and weight parts) and bytes all at most.

    ``tied`` (the layer is tied to an earlier one): also the weights less
    the tied bytes, which a stage holding both layers counts.
    """
    if a.fwd_ms > b.fwd_ms or a.bwd_ms > b.bwd_ms or a.weight_bytes > b.weight_bytes or a.act_bytes > b.act_bytes:
        return False
    if any(x > y for x, y in zip(a.split(), b.split())):
        return False
    return not tied or a.weight_bytes - a.tied_weight_bytes <= b.weight_bytes - b.tied_weight_bytes


def module_runs(problem: Problem) -> list[tuple[int, int]]:
    """The maximal runs ``(first, last)`` of consecutive layers of one module (a segment never leaves one)."""
    return list(problem.segments(0, len(problem.layers) - 1)) if problem.version >= 2 else \
        [(0, len(problem.layers) - 1)]


@dataclass(frozen=True)
class Reduction:
    """A problem without its dominated configs (:func:`reduce_dominated`).

    ``replaced`` maps ``(run start, dropped config)`` to a kept config that
    dominates it on that run; ``keys`` and ``kept`` count the distinct
    configs of the problem and of the reduced one.
    """

    problem: Problem
    replaced: Mapping[tuple[int, Layout], Layout]
    keys: int
    kept: int

    def map_plan(self, source: Problem, plan: Plan) -> Plan:
        """``plan`` (of ``source``, the unreduced problem) with every dropped config swapped for its dominator."""
        if not self.replaced:
            return plan
        starts = [a for a, _ in module_runs(source)]
        stages = []
        for stage in plan.stages:
            configs = []
            for (a, _b), config in stage.segment_configs(source):
                run = max(s for s in starts if s <= a)
                configs.append(self.replaced.get((run, config), config))
            stages.append(Stage.from_configs(stage.first_layer, stage.last_layer, stage.devices, configs,
                                             stage.device_ids))
        return Plan(tuple(stages))


def _dominates(layers: list[Layer], a: Layout, b: Layout) -> bool:
    """Whether ``a`` dominates ``b`` on ``layers`` (present and never worse wherever ``b`` is)."""
    for layer in layers:
        y = layer.costs.get(b)
        if y is None:
            continue
        x = layer.costs.get(a)
        if x is None or not entry_at_most(x, y, layer.tied_to is not None):
            return False
    return True


def _dropped(layers: list[Layer]) -> dict[Layout, Layout]:
    """The configs dominated on ``layers``, each mapped to a kept config dominating it."""
    by_mesh: dict[tuple[int, ...], list[Layout]] = {}
    for lay in sorted({lay for layer in layers for lay in layer.costs}, key=lambda c: c.key):
        by_mesh.setdefault(lay.mesh, []).append(lay)
    out: dict[Layout, Layout] = {}
    for group in by_mesh.values():
        if len(group) < 2:
            continue
        # a dominator must be a config a plan may use (rule 5: ep * etp divides the devices)
        dom = {(a, b): a.devices % (a.ep * a.etp) == 0 and _dominates(layers, a, b)
               for a in group for b in group if a != b}
        beaten = {b: next((a for i, a in enumerate(group) if a != b and dom[a, b]
                           and (not dom[b, a] or i < group.index(b))), None) for b in group}
        for b, first in beaten.items():
            a = first
            while a is not None and beaten[a] is not None:  # a dropped dominator: follow the chain to a kept one
                a = beaten[a]
            if a is not None:
                out[b] = a
    return out


def reduce_dominated(problem: Problem) -> Reduction:
    """``problem`` without the configs dominated on each maximal module run (exact: see the module docstring)."""
    keys = len({lay for layer in problem.layers for lay in layer.costs})
    layers = list(problem.layers)
    replaced: dict[tuple[int, Layout], Layout] = {}
    tables: dict[tuple[int, frozenset[Layout]], Mapping[Layout, LayerCost]] = {}  # layers sharing a table share its cut
    for first, last in module_runs(problem):
        run = layers[first: last + 1]
        drop = _dropped(run)
        if not drop:
            continue
        replaced.update({(first, b): a for b, a in drop.items()})
        gone = frozenset(drop)
        for i in range(first, last + 1):
            costs = layers[i].costs
            if not gone & set(costs):
                continue
            table = tables.get((id(costs), gone))
            if table is None:
                table = tables[id(costs), gone] = MappingProxyType({k: v for k, v in costs.items() if k not in gone})
            layers[i] = replace(layers[i], costs=table)
    if not replaced:
        return Reduction(problem, {}, keys, keys)
    reduced = replace(problem, layers=tuple(layers), source=None)
    kept = len({lay for layer in reduced.layers for lay in layer.costs})
    return Reduction(reduced, MappingProxyType(replaced), keys, kept)
