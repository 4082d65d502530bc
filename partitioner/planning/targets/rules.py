"""``plan --target``: the plans a training framework runs, as restrictions of the problem the solver sees.

What each framework runs is stated once, in its home
(:class:`~partitioner.frameworks.FrameworkRules`, ``RULES`` of
:mod:`partitioner.frameworks.megatron`, :mod:`~partitioner.frameworks.torchtitan`
and :mod:`~partitioner.frameworks.deepspeed`; the exporters read the same
record): its schedules, one mesh (dp, tp, cp) for every stage and one expert
split (ep, etp) per model, its knobs (ZeRO stages, recompute, on decoder
blocks only or not), the axes it lacks, and where it may cut. This module
applies them to a problem.

More (the detail of this module): ``docs/internals/planning.md``, section ``partitioner.planning.targets.rules``.
"""
from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Literal, Mapping, Sequence, get_args

from ...costs.memory.recompute import acting_modules, merge_settings
from ...costs.variants import Knobs, parse_variant
from ...frameworks import RULES, FrameworkName, FrameworkRules, Mesh
from ...plan import Plan, Stage
from ...problem import Layer, LayerCost, Layout, Problem, ProblemError

__all__ = ["Target", "TARGETS", "Mesh", "FrameworkRules", "RULES", "rules_for", "restrict", "settings", "module_variant",
           "layer_groups", "single_layout", "expand", "layouts", "runs", "config_of"]

Target = Literal["any", FrameworkName]
TARGETS: tuple[Target, ...] = get_args(Target)


def rules_for(target: str) -> FrameworkRules | None:
    """The rules of ``target`` (None for ``any``); ProblemError for an unknown target."""
    if target not in TARGETS:
        raise ProblemError(f"must be one of {', '.join(TARGETS)}, got {target!r}", path="target")
    return RULES.get(target)


def _roles(problem: Problem) -> list[str]:
    """Each layer's role, from the cost model's hints (``decoder`` when the problem has none)."""
    hints = problem.workload.layers
    if len(hints) == problem.num_layers:
        return [h.role for h in hints]
    return ["decoder"] * problem.num_layers


def _acts(problem: Problem) -> list[frozenset[str]]:
    """Per layer, the recompute modules that act on it (the cost model's hints; by role without them)."""
    hints = problem.workload.layers
    roles = _roles(problem)
    if len(hints) != problem.num_layers:
        return [acting_modules(r) for r in roles]
    return [acting_modules(r, h.recompute_modules) for r, h in zip(roles, hints)]


def _decoder_modules(problem: Problem) -> frozenset[str]:
    """The modules that hold decoder layers (those a decoder-only recompute may cover)."""
    return frozenset(layer.module for layer, role in zip(problem.layers, _roles(problem)) if role == "decoder")


def module_variant(rules: FrameworkRules, setting: str, has_decoder: bool) -> str:
    """The variant a module takes under the uniform ``setting``: without recompute where the target cannot recompute it."""
    knobs = parse_variant(setting)
    if rules.recompute_decoder_only and not has_decoder:
        knobs = Knobs(knobs.zero, "none")
    return knobs.name


def _allowed(rules: FrameworkRules, variant: str, has_decoder: bool) -> bool:
    try:
        knobs = parse_variant(variant)
    except ValueError:  # a variant the cost model did not write: no framework option stands for it
        return False
    return rules.allows(knobs) and not (rules.recompute_decoder_only and not has_decoder and knobs.recompute != "none")


def _mesh(lay: Layout) -> Mesh:
    return (lay.dp, lay.tp, lay.cp, lay.ep, lay.etp)


def restrict(problem: Problem, rules: FrameworkRules) -> Problem:
    """``problem`` without the cost entries of knobs the target cannot set (per module: decoder-only recompute)
    and of the axes it does not run (DeepSpeed's cp, torchtitan's and DeepSpeed's etp): its solves and its
    baselines see only what it runs."""
    decoders = _decoder_modules(problem)
    layers = []
    done: dict[tuple[int, bool], Mapping[Layout, LayerCost]] = {}
    for layer in problem.layers:
        has_decoder = layer.module in decoders
        key = (id(layer.costs), has_decoder)
        if key not in done:
            done[key] = MappingProxyType({lay: c for lay, c in layer.costs.items()
                                          if _allowed(rules, lay.variant, has_decoder) and rules.runs_mesh(_mesh(lay))})
        layers.append(Layer(layer.name, layer.module, layer.out_bytes, done[key], layer.tied_to))
    variants = {v: d for v, d in problem.variants.items() if _allowed(rules, v, True) or _allowed(rules, v, False)}
    return replace(problem, layers=tuple(layers), variants=MappingProxyType(variants), source=None)


def settings(problem: Problem, rules: FrameworkRules, escalation: Sequence[str]) -> list[str]:
    """The uniform knob settings the target may run, in ``escalation`` order then the others (the plain one included)."""
    names = [v for v in ["", *problem.variants] if _allowed(rules, v, True)]
    return [v for v in escalation if v in names] + [v for v in names if v not in escalation]


def layer_groups(problem: Problem, rules: FrameworkRules) -> list[tuple[int, int]]:
    """The runs of layers no cut of the target may separate, ``(first, last)`` in order (singletons elsewhere).

    The target's :attr:`~partitioner.frameworks.FrameworkRules.cut_groups` of
    the layers' roles; a target whose rule the model cannot meet raises
    :class:`ProblemError` (torchtitan without an embedding after the vision
    encoder).
    """
    return rules.cut_groups(_roles(problem))


def layouts(problem: Problem) -> list[Mesh]:
    """The meshes ``(dp, tp, cp, ep, etp)`` one plan may run on every layer, by devices, tp, cp, ep, etp.

    ``(dp, tp, cp)``: every layer has some entry in it. ``(ep, etp)``: every
    layer of the modules that offer expert parallelism has it there (the
    other modules run ep = etp = 1: they have no experts to split).
    """
    common: set[tuple[int, int, int]] | None = None
    for table in _tables(problem):
        meshes = {(lay.dp, lay.tp, lay.cp) for lay in table}
        common = meshes if common is None else common & meshes
    expert_tables = [t for t in _tables(problem, _expert_modules(problem))]
    out = []
    for dp, tp, cp in common or ():
        splits: set[tuple[int, int]] = {(1, 1)}
        if expert_tables:
            splits = set.intersection(*({(lay.ep, lay.etp) for lay in t if (lay.dp, lay.tp, lay.cp) == (dp, tp, cp)}
                                        for t in expert_tables))
        out += [(dp, tp, cp, ep, etp) for ep, etp in splits]
    return sorted(out, key=lambda m: (m[0] * m[1] * m[2], m[1], m[2], m[3], m[4]))


def _tables(problem: Problem, modules: frozenset[str] | None = None) -> list[Mapping[Layout, LayerCost]]:
    """The distinct cost tables of the layers (of ``modules`` only, when given)."""
    seen: dict[int, Mapping[Layout, LayerCost]] = {}
    for layer in problem.layers:
        if modules is None or layer.module in modules:
            seen.setdefault(id(layer.costs), layer.costs)
    return list(seen.values())


def _expert_modules(problem: Problem) -> frozenset[str]:
    """The modules some of whose layers have an ep or etp key (the cost model gives them to MoE modules)."""
    return frozenset(layer.module for layer in problem.layers if any(c.ep > 1 or c.etp > 1 for c in layer.costs))


def _variant_at(variant: str, dp: int) -> str:
    """``variant`` at ``dp`` replicas (dp x cp): without its ZeRO part when there is one (ZeRO shards over replicas)."""
    if dp > 1 or not variant.startswith("zero"):
        return variant
    return "+".join(variant.split("+")[1:])


def _sum(costs: Sequence[LayerCost]) -> LayerCost:
    """The entry of layers merged into one: every time and byte count adds up (B/W split kept when all have it)."""
    split = all(c.bwd_input_ms is not None and c.bwd_weight_ms is not None for c in costs)
    return LayerCost(sum(c.fwd_ms for c in costs), sum(c.bwd_ms for c in costs), sum(c.weight_bytes for c in costs),
                     sum(c.act_bytes for c in costs),
                     sum(c.bwd_input_ms for c in costs) if split else None,  # type: ignore[misc]
                     sum(c.bwd_weight_ms for c in costs) if split else None)  # type: ignore[misc]


def config_of(problem: Problem, rules: FrameworkRules, setting: str, mesh: Mesh) -> dict[str, Layout]:
    """Per module, its config under the one ``mesh`` and uniform knob ``setting`` (ep and etp on the modules with
    experts only; ZeRO shards over the dp x cp replicas)."""
    dp, tp, cp, ep, etp = mesh
    decoders, experts = _decoder_modules(problem), _expert_modules(problem)
    out = {}
    for layer in problem.layers:
        if layer.module not in out:
            variant = _variant_at(module_variant(rules, setting, layer.module in decoders), dp * cp)
            split = (ep, etp) if layer.module in experts else (1, 1)
            out[layer.module] = Layout(dp, tp, variant, cp, *split)
    return out


def single_layout(problem: Problem, groups: Sequence[tuple[int, int]], configs: Mapping[str, Layout]) -> Problem | None:
    """The problem of ``groups`` (one layer each) in the one config per module ``configs``.

    A merged layer's entry sums its layers' entries (:func:`_sum`) and sends
    its last layer's output; the solver's plans of it are the plans of
    ``problem`` whose cuts fall between groups, all in ``configs``, with the
    same times and memory. A tied layer's copy is subtracted from its group
    when the group also holds the layer it is tied to, and otherwise ties
    the two groups (format v3). Format v1 when no config has cp, ep or etp
    and nothing is tied. None when a layer has no entry in its config.
    """
    group_of = {i: g for g, (a, b) in enumerate(groups) for i in range(a, b + 1)}
    layers = []
    for g, (a, b) in enumerate(groups):
        entries, tied_to, tied_bytes = [], None, 0
        for k in range(a, b + 1):
            layer = problem.layers[k]
            cost = layer.costs.get(configs[layer.module])
            if cost is None:
                return None
            if layer.tied_to is not None and cost.tied_weight_bytes:
                if group_of[layer.tied_to] == g:  # both in one group: the copy is held once
                    cost = replace(cost, weight_bytes=cost.weight_bytes - cost.tied_weight_bytes, tied_weight_bytes=0)
                else:
                    tied_to, tied_bytes = group_of[layer.tied_to], tied_bytes + cost.tied_weight_bytes
            entries.append(cost)
        cost = entries[0] if len(entries) == 1 else _sum(entries)
        cost = replace(cost, tied_weight_bytes=tied_bytes)
        if (cost.bwd_input_ms is None) != (cost.bwd_weight_ms is None):
            cost = replace(cost, bwd_input_ms=None, bwd_weight_ms=None)
        last = problem.layers[b]
        name = last.name if a == b else f"{problem.layers[a].name}..{last.name}"
        plain = replace(configs[last.module], variant="")
        layers.append(Layer(name, last.module, last.out_bytes, MappingProxyType({plain: cost}), tied_to))
    five_d = any(c.cp > 1 or c.ep > 1 or c.etp > 1 for c in configs.values()) or any(x.tied_to is not None for x in layers)
    meta = {k: v for k, v in (problem.meta or {}).items() if k != "layers"}  # the hints describe the full problem's layers
    return replace(problem, layers=tuple(layers), version=3 if five_d else 1, variants=MappingProxyType({}), source=None,
                   meta=MappingProxyType(meta))


def expand(plan: Plan, groups: Sequence[tuple[int, int]], problem: Problem, configs: Mapping[str, Layout]) -> Plan:
    """A plan of :func:`single_layout`'s problem as a plan of ``problem``: layer indices and per-segment configs."""
    stages = []
    for s in plan.stages:
        first, last = groups[s.first_layer][0], groups[s.last_layer][1]
        segs = problem.segments(first, last)
        stages.append(Stage.from_configs(first, last, s.devices, [configs[problem.layers[a].module] for a, _ in segs],
                                         s.device_ids))
    return Plan(tuple(stages))


def runs(rules: FrameworkRules, problem: Problem, plan: Plan) -> list[str]:
    """Why the target cannot run ``plan`` on ``problem`` (its schedule, meshes, knobs and cuts); [] when it can.

    The rules of :data:`RULES`, checked on a plan found without them (``plan
    --target any`` reports per target the best candidate that passes).
    """
    reasons: list[str] = []
    schedule = problem.training.schedule
    if schedule not in rules.schedules:
        reasons.append(f"schedule {schedule}: {rules.name} runs {', '.join(rules.schedules)}")
    fp8 = problem.workload.precision
    if fp8 is not None and fp8.get("fp8_recipe") not in rules.fp8_recipes:
        reasons.append(f"FP8 recipe {fp8.get('fp8_recipe')}: {rules.name} "
                       + (f"runs {', '.join(rules.fp8_recipes)}" if rules.fp8_recipes else "has no FP8 training path"))
    configs = [(s, (a, b), c) for s in plan.stages for (a, b), c in s.segment_configs(problem)]
    meshes = {(c.dp, c.tp, c.cp) for _, _, c in configs}
    if len(meshes) > 1:
        reasons.append(f"{len(meshes)} meshes (dp, tp, cp) {sorted(meshes)}: {rules.name} runs one for every stage")
    experts = _expert_modules(problem)
    splits = {(c.ep, c.etp) for _, (a, _b), c in configs if problem.layers[a].module in experts or c.ep * c.etp > 1}
    if len(splits) > 1:
        reasons.append(f"{len(splits)} expert splits (ep, etp) {sorted(splits)}: {rules.name} runs one per model")
    if not rules.cp and any(c.cp > 1 for _, _, c in configs):
        reasons.append(f"context parallelism: {rules.name}'s pipeline engine has none")
    if not rules.etp and any(c.etp > 1 for _, _, c in configs):
        reasons.append(f"expert tensor parallelism (etp > 1): {rules.name} has none")
    decoders = _decoder_modules(problem)
    knobs = []
    for _, (a, _b), c in configs:
        has_decoder = problem.layers[a].module in decoders
        if not _allowed(rules, c.variant, has_decoder):
            reasons.append(f"knobs {c.variant or 'plain'} on {problem.layers[a].module}: not a {rules.name} setting")
        knobs.append((parse_variant(c.variant) if _known(c.variant) else Knobs(), c.dp * c.cp, has_decoder))
    zeros = {k.zero for k, dp, _ in knobs if dp > 1}  # dp here counts the dp x cp replicas  # ZeRO-0 next to ZeRO-1 runs as ZeRO-1 (the exporters' one_zero)
    if 3 in zeros and len(zeros) > 1:
        reasons.append(f"mixed ZeRO stages {sorted(zeros)}: {rules.name} sets one")
    acts = _acts(problem)
    covered = [(k.recompute, frozenset().union(*(acts[i] for i in range(a, b + 1))))
               for (k, _, dec), (_, (a, b), _) in zip(knobs, configs) if dec or not rules.recompute_decoder_only]
    # Megatron's module lists merge where each module acts (merge_settings)
    merged = merge_settings(covered) if rules.modules else (covered[0][0] if len({r for r, _ in covered}) == 1 else None)
    if covered and merged is None and not rules.recompute_per_stage:
        reasons.append(f"mixed recompute settings {sorted({r for r, _ in covered})}: {rules.name} sets one")
    reasons += _mtp_reasons(rules, problem, plan)
    try:
        starts = {a for a, _ in layer_groups(problem, rules)}
    except ProblemError as err:
        return [*reasons, err.reason]
    inside = [s.first_layer for s in plan.stages if s.first_layer not in starts]
    if inside:
        reasons.append(f"cut before layer(s) {inside}: {rules.name} does not cut there (vision encoder placement)")
    return reasons


def _mtp_reasons(rules: FrameworkRules, problem: Problem, plan: Plan) -> list[str]:
    """Why the target cannot train ``plan``'s multi-token prediction modules (:attr:`FrameworkRules.mtp_stages`)."""
    if rules.mtp_stages is None or "mtp" not in _roles(problem):
        return []
    if rules.mtp_stages == 0:
        return [f"multi-token prediction modules: {rules.name} trains none; plan without them (--mtp-layers 0)"]
    if len(plan.stages) > rules.mtp_stages:
        return [f"multi-token prediction modules over {len(plan.stages)} pipeline stages: {rules.name} trains them "
                f"on at most {rules.mtp_stages}; plan without them (--mtp-layers 0)"]
    return []


def _known(variant: str) -> bool:
    try:
        parse_variant(variant)
    except ValueError:
        return False
    return True
