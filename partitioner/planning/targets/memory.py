"""``plan --target T``: weight memory as T keeps it, per ZeRO stage (:attr:`~partitioner.frameworks.FrameworkRules.memory`).

The cost model's default bytes per parameter are Megatron-LM's (18; 6 +
12/d with the distributed optimizer). A plan for torchtitan or DeepSpeed
must fit the memory that framework allocates, and the count depends on the
ZeRO stage the plan runs (torchtitan: DDP under autocast 18, FSDP2 with
``reshard_after_forward`` off 2 + 16/d, FSDP2 16/d; DeepSpeed:
``BF16_Optimizer`` 4 + 12/d, ZeRO-1 4 + 16/d). :func:`stage_options` gives,
per ZeRO stage the target runs, the cost options of its count;
:func:`merge_stages` takes each variant's entries from the problem built
with its stage's options, so one problem carries every stage's own count.

More (the detail of this module): ``docs/internals/planning.md``, section ``partitioner.planning.targets.memory``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from types import MappingProxyType
from typing import Any, Mapping

from ...costs import CostOptions
from ...costs.memory.param_memory import param_memory
from ...costs.variants import Knobs, parse_variant
from ...frameworks import RULES, FrameworkRules
from ...problem import Layer, LayerCost, Layout, Problem

__all__ = ["MemoryCounts", "DEFAULT_COUNT", "user_count", "stage_options", "target_costs", "stage_knobs", "memory_counts",
           "merge_stages", "default_counts"]

DEFAULT_COUNT = CostOptions().memory_count  # the cost model's default (Megatron-LM's, distributed optimizer)
_COUNT_FIELDS = ("memory_count", "bytes_per_param", "optimizer_bytes_per_param", "frozen_bytes_per_param")


@dataclass(frozen=True)
class MemoryCounts:
    """Which bytes-per-parameter count the plan's problem charged, per ZeRO stage.

    Parameters
    ----------
    target : str
        The ``plan --target`` (``any`` included).
    counts : mapping of int to str
        ZeRO stage -> the count's name (:data:`~partitioner.costs.PARAM_MEMORY`).
    source : {"target", "user", "default"}
        ``target``: the target's own counts; ``user``: the options set the
        count (``-c memory_count=...`` or a bytes-per-parameter field), kept
        instead of the target's; ``default``: the cost model's default
        (Megatron-LM's), as ``--target any`` charges.
    note : str
        One sentence for the user.
    """

    target: str
    counts: Mapping[int, str]
    source: str
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "counts": {f"zero{z}": c for z, c in sorted(self.counts.items())},
                "source": self.source, "note": self.note}


def user_count(options: Mapping[str, Any] | CostOptions | None) -> str | None:
    """The count the user set (``memory_count``, or ``custom`` for a bytes-per-parameter field), else None.

    A :class:`CostOptions` object counts as set when any of those fields
    differs from the default.
    """
    if options is None:
        return None
    if isinstance(options, CostOptions):
        default = CostOptions()
        changed = [f.name for f in fields(CostOptions)
                   if f.name in _COUNT_FIELDS and getattr(options, f.name) != getattr(default, f.name)]
        if not changed:
            return None
        return options.memory_count if "memory_count" in changed else "custom"
    named = options.get("memory_count")
    if named is not None:
        return str(named)
    return "custom" if any(k in options for k in _COUNT_FIELDS) else None


def target_costs(rules: FrameworkRules | None, options: Mapping[str, Any] | CostOptions | None,
                 built: CostOptions) -> CostOptions:
    """``built`` with how ``rules``' framework runs its routed experts' gated activation (``expert_fused_glu``).

    Unchanged without a target, or when the user set ``expert_fused_glu``
    (a key of the options mapping, or a :class:`CostOptions` whose value
    differs from the default).
    """
    if rules is None:
        return built
    if isinstance(options, CostOptions):
        stated = options.expert_fused_glu != CostOptions().expert_fused_glu
    else:
        stated = "expert_fused_glu" in (options or {})
    return built if stated else replace(built, expert_fused_glu=rules.expert_fused_glu)


def stage_options(target: str, zero: tuple[int, ...], options: Mapping[str, Any] | CostOptions | None,
                  built: CostOptions) -> dict[int, CostOptions]:
    """Per ZeRO stage of ``zero``, the cost options of ``target``'s count there (``built`` when none applies).

    ``built`` is the run's options (:func:`~partitioner.planning.plan_options`);
    a stage gets them unchanged when the user set a count
    (:func:`user_count`) or the target has no count for it.
    """
    stages = _memory(target)
    if user_count(options) is not None:
        return {z: built for z in zero}
    return {z: _with_count(built, stages[z]) if z in stages else built for z in zero}


def _memory(target: str) -> Mapping[int, str]:
    """ZeRO stage -> the count ``target`` keeps there (none for ``any``)."""
    return RULES[target].memory if target in RULES else {}


def _with_count(built: CostOptions, name: str) -> CostOptions:
    """``built`` with the bytes-per-parameter fields of count ``name``."""
    fields_of: dict[str, Any] = {**param_memory(name).option_overrides(), "memory_count": name}
    return replace(built, **fields_of)


def memory_counts(target: str, zero: tuple[int, ...], options: Mapping[str, Any] | CostOptions | None,
                  built: CostOptions) -> MemoryCounts:
    """The :class:`MemoryCounts` of a ``plan --target`` run (``target`` ``any``: the default count)."""
    mine = user_count(options)
    if mine is not None:
        return MemoryCounts(target, {z: built.memory_count for z in zero}, "user",
                            f"the options' count ({mine}) is kept" + (f" instead of {target}'s own" if target != "any" else ""))
    if target not in RULES:  # any
        return default_counts(target, zero)
    stages = _memory(target)
    counts = {z: stages.get(z, built.memory_count) for z in zero}
    missing = [z for z in zero if z not in stages]
    note = f"weights charged as {target} keeps them per ZeRO stage"
    if missing:
        note += f" (ZeRO-{', '.join(map(str, missing))}: no {target} count, the cost model's default)"
    return MemoryCounts(target, counts, "target", note)


def default_counts(target: str, zero: tuple[int, ...] = (0, 1, 3)) -> MemoryCounts:
    """The cost model's default count (Megatron-LM's: 18 B/param, 6 + 12/d with ZeRO-1), as ``--target any`` charges."""
    counts = {z: ("megatron" if z == 0 else DEFAULT_COUNT) for z in zero}
    return MemoryCounts(target, counts, "default", "weights charged with Megatron-LM's count (18 B/param; 6 + 12/d "
                        "with the distributed optimizer), the cost model's default")


def _knob_variant(variant: str, knob: int) -> str:
    """``variant`` with its ZeRO part set to the cost-model knob ``knob``."""
    k = parse_variant(variant)
    return Knobs(knob, k.recompute).name


def _entry(costs: Mapping[Layout, LayerCost], lay: Layout, knob: int) -> LayerCost | None:
    """The entry of ``lay`` built with knob ``knob``; the same layout's at dp = 1 (no ZeRO variant there)."""
    if parse_variant(lay.variant).zero == knob:
        return costs.get(lay)
    found = costs.get(replace(lay, variant=_knob_variant(lay.variant, knob)))  # cp, ep, etp kept
    return found if found is not None or lay.dp > 1 else costs.get(lay)


def stage_knobs(target: str, options: Mapping[int, CostOptions]) -> dict[int, int]:
    """Per stage, the cost-model ZeRO knob whose entries carry its count (the stage itself unless the count is ``target``'s)."""
    stages = _memory(target)
    return {z: param_memory(o.memory_count).knob if o.memory_count == stages.get(z) else z for z, o in options.items()}


def merge_stages(base: Problem, problems: Mapping[int, Problem], knobs: Mapping[int, int],
                 counts: Mapping[int, str]) -> Problem:
    """``base`` whose entries of each ZeRO stage in ``problems`` come from that stage's problem.

    ``problems[z]`` is the same model built with stage z's count
    (:func:`stage_options`); an entry of variant ``v`` with ZeRO stage z is
    taken from ``problems[z]`` at the variant of knob ``knobs[z]``
    (:func:`_entry`). Entries of other stages, and layouts the stage's
    problem lacks, stay ``base``'s. Layers that shared one cost table still
    share one; ``meta.memory_counts`` records ``counts`` (stage -> count).
    """
    merged: dict[tuple[int, ...], Mapping[Layout, LayerCost]] = {}
    layers = []
    for i, layer in enumerate(base.layers):
        key = (id(layer.costs), *(id(p.layers[i].costs) for p in problems.values()))
        if key not in merged:
            table = {}
            for lay, cost in layer.costs.items():
                z = _zero(lay.variant)
                if z is not None and z in problems:
                    cost = _entry(problems[z].layers[i].costs, lay, knobs[z]) or cost
                table[lay] = cost
            merged[key] = MappingProxyType(table)
        layers.append(Layer(layer.name, layer.module, layer.out_bytes, merged[key]))
    meta = {**(base.meta or {}), "memory_counts": {f"zero{z}": c for z, c in sorted(counts.items())}}
    return replace(base, layers=tuple(layers), meta=MappingProxyType(meta), source=None)


def _zero(variant: str) -> int | None:
    try:
        return parse_variant(variant).zero
    except ValueError:
        return None
