"""What every exporter shares: the stage view of a plan and the checks and batch arithmetic they all make.

An exporter turns a plan into one framework's settings, or says why it
cannot. Its contract: ``expressible`` is True only when the settings give
exactly the plan's stages, layouts and microbatch count m; otherwise
``reasons`` says, in words, each thing the framework cannot express, and
no setting is emitted that would silently differ from the plan.

A stage is seen through :class:`StageView`: its layers' roles (vision,
projector, embedding, decoder, loss, action), their module FQNs, and its
*segments* — one ``(first, last, dp, tp)`` per run of layers that share a
config. A v1 plan has one segment per stage; a v2 stage with per-segment
``configs`` has one segment per maximal run of layers of one module
(``DESIGN.md``, format v2).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from ..costs.memory.recompute import acting_modules
from ..costs.variants import parse_variant
from ..plan import Plan
from ..problem import ProblemError, expert_tensor_parallel
from .common import LLM_ROLES, VISION_ROLES, LayerHint

__all__ = ["StageView", "Segment", "SegmentKnobs", "stage_views", "describe_shape", "ReplicaBatch", "per_replica_microbatch",
           "placement_note", "layout_reasons", "chunk_reasons", "segment_knobs", "segment_acts", "one_zero", "one_recompute",
           "not_expressible_text"]


@dataclass(frozen=True)
class Segment:
    """Layers ``first..last`` (plan indices) of one stage, run in layout (dp, tp, cp, ep, etp) with memory knobs ``variant``.

    ``cp``, ``ep`` and ``etp`` are format v3's axes (1 when the plan has none).
    """

    first: int
    last: int
    dp: int
    tp: int
    variant: str = ""
    cp: int = 1
    ep: int = 1
    etp: int = 1

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """``(dp, tp, cp, ep, etp)``: what a framework's mesh must match (not the knobs)."""
        return (self.dp, self.tp, self.cp, self.ep, self.etp)

    @property
    def expert_tp(self) -> int:
        """The ranks each routed expert is split over, as the plan charged it (tp without an expert split:
        :func:`~partitioner.problem.expert_tensor_parallel`)."""
        return expert_tensor_parallel(self.tp, self.ep, self.etp)


def describe_shape(shape: tuple[int, ...]) -> str:
    """``dp 8 x tp 2`` and, when not 1, ``x cp C``, ``ep E``, ``etp F``."""
    dp, tp, cp, ep, etp = (tuple(shape) + (1, 1, 1))[:5]
    text = f"dp {dp} x tp {tp}" + (f" x cp {cp}" if cp != 1 else "")
    return text + (f", ep {ep}" if ep != 1 else "") + (f", etp {etp}" if etp != 1 else "")


@dataclass(frozen=True)
class StageView:
    """A plan stage with the layer hints an exporter needs."""

    index: int
    first: int
    last: int
    devices: int
    device_ids: tuple[int, ...]
    roles: tuple[str, ...]
    names: tuple[str, ...]
    modules: tuple[str, ...]
    fqns: tuple[tuple[str, ...], ...]  # per layer
    segments: tuple[Segment, ...] = field(default=())

    def count(self, role: str) -> int:
        return self.roles.count(role)

    @property
    def layouts(self) -> set[tuple[int, int, int, int, int]]:
        """The ``(dp, tp, cp, ep, etp)`` shapes of the stage's segments."""
        return {s.shape for s in self.segments}

    @property
    def uniform(self) -> bool:
        """One (dp, tp) for every layer of the stage."""
        return len(self.layouts) == 1

    @property
    def dp(self) -> int:
        return self.segments[0].dp

    @property
    def tp(self) -> int:
        return self.segments[0].tp

    @property
    def cp(self) -> int:
        return self.segments[0].cp

    @property
    def ep(self) -> int:
        return self.segments[0].ep

    @property
    def etp(self) -> int:
        return self.segments[0].etp

    def segment_roles(self, seg: Segment) -> tuple[str, ...]:
        """The roles of the layers of ``seg`` (one of this stage's segments)."""
        return self.roles[seg.first - self.first : seg.last - self.first + 1]

    @property
    def is_llm(self) -> bool:
        return any(r in LLM_ROLES for r in self.roles)

    @property
    def is_vision(self) -> bool:
        return all(r in VISION_ROLES for r in self.roles)

    @property
    def is_action(self) -> bool:
        return all(r == "action" for r in self.roles)

    def describe_layouts(self) -> str:
        if self.uniform:
            return describe_shape(self.segments[0].shape)
        return " then ".join(f"{describe_shape(s.shape)} (layers {s.first}-{s.last})" for s in self.segments)


def _module_runs(modules: Sequence[str], first: int) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for i, mod in enumerate(modules):
        if runs and modules[i - 1] == mod:
            runs[-1] = (runs[-1][0], first + i)
        else:
            runs.append((first + i, first + i))
    return runs


def _segments(index: int, stage: Any, modules: Sequence[str]) -> tuple[Segment, ...]:
    """A stage's segments: its ``configs`` (v2, one per module run) or its one (dp, tp)."""
    configs = getattr(stage, "configs", None)
    if not configs:
        return (Segment(stage.first_layer, stage.last_layer, stage.dp, stage.tp, getattr(stage, "variant", "") or "",
                        *_axes(stage)),)
    runs = _module_runs(modules, stage.first_layer)
    if len(runs) != len(configs):
        raise ProblemError(
            f"stage {index} has {len(configs)} configs but its layers form {len(runs)} module segments", path=f"plan.stages[{index}].configs"
        )
    return tuple(Segment(a, b, c.dp, c.tp, getattr(c, "variant", "") or "", *_axes(c)) for (a, b), c in zip(runs, configs))


def _axes(config: Any) -> tuple[int, int, int]:
    """``(cp, ep, etp)`` of a stage or config: format v3's axes, 1 when absent (plans of formats v1 and v2)."""
    return tuple(int(getattr(config, axis, 1) or 1) for axis in ("cp", "ep", "etp"))  # type: ignore[return-value]


def _expert_split(views: Sequence[StageView]) -> tuple[int, int] | None:
    """The one ``(ep, etp)`` of the language model's segments, or None when they have none or several."""
    splits = {(g.ep, g.etp) for v in views for g in v.segments if _holds_llm(v, g)}
    return next(iter(splits)) if len(splits) == 1 else None


def _holds_llm(view: StageView, seg: Segment) -> bool:
    """Whether ``seg`` holds a layer of the language model (the module whose MoE layers ep and etp split)."""
    return any(r in LLM_ROLES for r in view.roles[seg.first - view.first: seg.last - view.first + 1])


def _fold_expert_axes(views: list[StageView]) -> list[StageView]:
    """The views with the language model's ``(ep, etp)`` on the segments that hold none of its layers.

    Expert parallelism splits only the MoE layers; a vision encoder or
    projector has no experts, so whatever ep a framework sets runs it alike
    (Megatron-LM and torchtitan set one EP per model). The cost model gives
    such layers ep = 1 keys only; here they take the model's, so that a
    stage holding the vision encoder and MoE layers counts as one layout.
    """
    split = _expert_split(views)
    if split is None or split == (1, 1):
        return views
    out = []
    for v in views:
        segs = tuple(g if _holds_llm(v, g) or (g.ep, g.etp) != (1, 1) else replace(g, ep=split[0], etp=split[1])
                     for g in v.segments)
        out.append(replace(v, segments=segs))
    return out


def stage_views(plan: Plan, hints: Sequence[LayerHint]) -> list[StageView]:
    """One :class:`StageView` per plan stage (segments without language-model layers take its ep and etp:
    :func:`_fold_expert_axes`)."""
    out = []
    ids = plan.device_ids()
    for p, s in enumerate(plan.stages):
        if s.last_layer >= len(hints):
            raise ProblemError(f"stage {p} ends at layer {s.last_layer}, but the hints describe {len(hints)} layers")
        sub = hints[s.first_layer : s.last_layer + 1]
        modules = tuple(h.module for h in sub)
        out.append(
            StageView(
                index=p,
                first=s.first_layer,
                last=s.last_layer,
                devices=s.devices,
                device_ids=tuple(ids[p]),
                roles=tuple(h.role for h in sub),
                names=tuple(h.name for h in sub),
                modules=modules,
                fqns=tuple(h.names for h in sub),
                segments=_segments(p, s, modules),
            )
        )
    return _fold_expert_axes(out)


@dataclass(frozen=True)
class ReplicaBatch:
    """A plan's batch as the frameworks set it: ``global_batch`` = ``microbatches`` x ``micro`` x dp."""

    global_batch: int
    microbatches: int
    micro: int  # samples per microbatch on one data-parallel replica


def per_replica_microbatch(global_batch: int | None, microbatches: int | None, dp: int
                           ) -> tuple[ReplicaBatch | None, str | None]:
    """The batch with its samples per microbatch on one data-parallel replica, or why there is no such whole number.

    Frameworks take the per-replica microbatch b and derive
    m = global_batch / (b * dp); the plan's m holds only when
    global_batch = m * b * dp exactly. ``(None, None)`` when the batch or m is not given.
    """
    if not global_batch or not microbatches:
        return None, None
    if global_batch % microbatches:
        return None, f"the global batch {global_batch} is not a multiple of the plan's m = {microbatches} microbatches"
    mb = global_batch // microbatches
    if mb % dp:
        return None, (
            f"the plan's microbatch ({global_batch} / m {microbatches} = {mb} samples) does not split over dp {dp}, "
            f"so no per-replica microbatch size gives m = {microbatches}"
        )
    return ReplicaBatch(global_batch, microbatches, mb // dp), None


def placement_note(stages: Sequence[StageView]) -> str | None:
    """A note when the plan's GPUs are not rank order (stage 0 on ranks 0.., stage 1 next, ...), else None.

    Megatron, torchtitan and DeepSpeed all give pipeline stage s the
    consecutive global ranks after stage s-1's; the plan's transfer times
    assume its own ``device_ids``.
    """
    ids = [d for s in stages for d in sorted(s.device_ids)]
    if ids == list(range(len(ids))):
        return None
    return ("the plan places stages on GPUs " + ", ".join(f"{s.index}: {min(s.device_ids)}..{max(s.device_ids)}" for s in stages)
            + ", not in rank order: map global ranks to GPUs so that stage s gets its planned GPUs (the frameworks give "
            "stage s the ranks after stage s-1's)")


def layout_reasons(stages: Sequence[StageView], rule: str) -> list[str]:
    """Why ``stages`` cannot share one (dp, tp), in a framework whose ``rule`` is one layout for all of them."""
    mixed = [s for s in stages if not s.uniform]
    if mixed:
        return ["stage(s) " + ", ".join(f"{s.index} ({s.describe_layouts()})" for s in mixed) + f" run two layouts on the same GPUs: {rule}"]
    if len(set().union(*(s.layouts for s in stages))) > 1:
        return ["the stages use different layouts (" + ", ".join(f"stage {s.index}: {s.describe_layouts()}" for s in stages) + f"): {rule}"]
    return []


def chunk_reasons(stages: Sequence[StageView], v: int) -> list[str]:
    """Why ``stages`` are not the P·v chunks of an interleaved plan (chunk c on the GPUs of group c mod P); [] when they are."""
    if v < 2:
        return [f"the interleaved schedule needs v >= 2 virtual stages per pipeline rank, got {v}"]
    if len(stages) % v:
        return [f"the plan's {len(stages)} stages are not P x v chunks for v = {v}"]
    P = len(stages) // v
    wrong = [s.index for s in stages if sorted(s.device_ids) != sorted(stages[s.index % P].device_ids)]
    if wrong:
        return [f"chunk(s) {wrong} do not run on the GPUs of their group (chunk c runs on group c mod {P})"]
    return []


# --------------------------------------------------------------------------- memory knobs


@dataclass(frozen=True)
class SegmentKnobs:
    """The memory knobs of one stage segment: ZeRO stage and recompute (the cost model's variant, parsed)."""

    stage: int
    first: int
    last: int
    dp: int
    zero: int
    recompute: str
    roles: tuple[str, ...]

    @property
    def decoder(self) -> bool:
        """Whether the segment holds language-model decoder layers (what the frameworks' recompute wraps)."""
        return "decoder" in self.roles

    def where(self) -> str:
        return f"stage {self.stage} (layers {self.first}-{self.last})"


def segment_knobs(stages: Sequence[StageView]) -> tuple[list[SegmentKnobs], list[str]]:
    """Every segment's knobs, and the reasons some variant names no knob setting of the cost model.

    A variant is opaque to the solvers (DESIGN.md, format v2); the export
    reads it as the cost model writes it (``zero1``, ``zero3``,
    ``recompute-selective``, ``recompute-full`` and ``+`` joins,
    :mod:`partitioner.costs.variants`). Any other name cannot be turned
    into a framework option, so the export cannot run the plan exactly.
    """
    out: list[SegmentKnobs] = []
    reasons: list[str] = []
    for s in stages:
        for g in s.segments:
            try:
                k = parse_variant(g.variant)
            except ValueError as err:
                reasons.append(f"stage {s.index} (layers {g.first}-{g.last}): {err}; the export cannot tell which "
                               "framework options it stands for")
                continue
            out.append(SegmentKnobs(s.index, g.first, g.last, g.dp, k.zero, k.recompute, s.segment_roles(g)))
    return out, reasons


def segment_acts(knobs: SegmentKnobs, acts: Sequence[Sequence[str] | None] | None) -> frozenset[str]:
    """The recompute modules that act on a segment's layers: ``acts``, per layer of the plan (the cost model's
    ``recompute_modules`` hints, :attr:`~.common.ExportContext.recompute_acts`), when given, else by role
    (:func:`~partitioner.costs.memory.recompute.acting_modules`)."""
    out: frozenset[str] = frozenset()
    for i, role in enumerate(knobs.roles):
        hint = acts[knobs.first + i] if acts is not None and knobs.first + i < len(acts) else None
        out |= acting_modules(role, hint)
    return out


def _mixed(knobs: Sequence[SegmentKnobs], value: Any, label: Any) -> str:
    groups: dict[Any, list[str]] = {}
    for k in knobs:
        groups.setdefault(value(k), []).append(k.where())
    return ", ".join(f"{label(v)} on " + ", ".join(w) for v, w in groups.items())


def one_zero(knobs: Sequence[SegmentKnobs], rule: str) -> tuple[int, list[str], list[str]]:
    """The plan's one ZeRO stage over the segments with dp > 1 (0 when none shards): ``(stage, notes, reasons)``.

    At dp = 1 ZeRO shards nothing (the cost model has no ZeRO variant there),
    so those segments agree with any stage. ZeRO-0 next to ZeRO-1 gives
    ZeRO-1 everywhere, with a note: sharding the optimizer states only lowers
    memory at the same traffic per step (reduce-scatter + all-gather moves
    what the all-reduce moves), and where ZeRO-1 saves nothing -- frozen
    weights have no optimizer states -- the planner keeps ZeRO-0 as the tie.
    ZeRO-3 next to another stage has no single setting: the reasons say so.
    """
    sharded = [k for k in knobs if k.dp > 1]
    stages = {k.zero for k in sharded}
    if stages == {0, 1}:
        where = ", ".join(k.where() for k in sharded if k.zero == 0)
        return 1, [f"ZeRO-1 also on {where}, planned with ZeRO-0 (equal there, or frozen weights): sharding the optimizer "
                   "states there only lowers memory, at the same traffic per step"], []
    if len(stages) > 1:
        return 0, [], ["the plan mixes ZeRO stages (" + _mixed(sharded, lambda k: k.zero, lambda z: f"ZeRO-{z}") + "): " + rule]
    return (next(iter(stages)) if stages else 0), [], []


def one_recompute(knobs: Sequence[SegmentKnobs], rule: str) -> tuple[str, list[str]]:
    """The plan's one recompute setting over ``knobs``, or why there is none."""
    settings = {k.recompute for k in knobs}
    if len(settings) > 1:
        return "none", ["the plan mixes recompute settings (" + _mixed(knobs, lambda k: k.recompute, lambda r: f"recompute {r}")
                        + "): " + rule]
    return (next(iter(settings)) if settings else "none"), []


def not_expressible_text(target: str) -> str:
    """The snippet of an export that is not expressible."""
    return f"# (no {target} setting expresses this plan: see the reasons above)"
