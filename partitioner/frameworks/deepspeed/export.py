"""Plans as DeepSpeed pipeline settings (``PipelineModule`` boundaries, topology, batch config).

DeepSpeed's ``PipelineModule(partition_method=...)`` takes only ``"parameters"``, ``"uniform"`` or
``"type:<regex>"`` [1], so the planned boundaries ``parts`` (stage s runs
``layers[parts[s]:parts[s+1]]``) are set by overriding ``_partition_layers``.
``PipeModelDataParallelTopology`` gives every stage the same model- and data-parallel degree, so a
plan whose stages (or segments) differ in layout is not expressible. The batch:
``train_micro_batch_size_per_gpu`` = global batch / (m dp) and ``gradient_accumulation_steps`` = m
(DeepSpeed's pipeline engine runs that many microbatches per step).

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.deepspeed.export``.
"""
from __future__ import annotations

from typing import Any

from ...problem import expert_tensor_parallel
from ..common import Export, ExportContext, MoeHints, PrecisionHints
from ..stages import ReplicaBatch, StageView, layout_reasons, one_zero, per_replica_microbatch, segment_knobs
from .rules import RULES

__all__ = ["export_deepspeed", "CHECKED_WITH"]

CHECKED_WITH = "deepspeed 0.19.8 (PipelineModule, PipeModelDataParallelTopology)"


def export_deepspeed(stages: list[StageView], ctx: ExportContext) -> Export:
    """``PipelineModule`` subclass with the planned boundaries, topology and batch config, or the reasons it cannot."""
    parts = [s.first for s in stages] + [stages[-1].last + 1]
    names = [n for s in stages for n in s.names]
    reasons = layout_reasons(stages, "DeepSpeed's PipeModelDataParallelTopology gives every stage, and every layer of a "
                                     "stage, the same model- and data-parallel degree")
    schedule = ctx.schedule
    if schedule not in RULES.schedules:
        reasons.insert(0, f"schedule {schedule} is not expressible: DeepSpeed's PipelineEngine runs TrainSchedule (1F1B) "
                          "only; plan with --schedule 1f1b")
    reasons += _fp8_reasons(ctx.precision)
    reasons += _mtp_reasons(stages)
    b: ReplicaBatch | None = None
    zero, intervals = 0, [0] * len(stages)
    knob_notes: list[str] = []
    moe: MoeHints | None = ctx.moe
    if not reasons:
        zero, intervals, knob_notes, knob_reasons = _knobs(stages, moe)
        reasons += knob_reasons
    if not reasons:
        b, why = per_replica_microbatch(ctx.global_batch, ctx.microbatches, stages[0].dp)
        if why:
            reasons.append(f"{why} (DeepSpeed: train_batch_size = micro batch x gradient_accumulation_steps x dp)")
    settings: dict[str, Any] = {"num_stages": len(stages), "parts": parts, "layers": names}
    if reasons:
        settings.update(stage_layouts=[{"stage": s.index, "layouts": s.describe_layouts()} for s in stages])
        return Export("deepspeed", settings, "# (no DeepSpeed setting expresses this plan: see the reasons above)", (), False,
                      tuple(reasons), CHECKED_WITH)
    dp, tp, _, ep, _ = stages[0].segments[0].shape
    expert_tp = stages[0].segments[0].expert_tp  # 1 or tp (else refused in _knobs)
    settings.update(model_parallel_size=tp, data_parallel_size=dp, activation_checkpoint_intervals=intervals,
                    microbatches=ctx.microbatches)
    if moe is not None:
        settings.update(moe={"num_experts": moe.num_experts, "ep_size": ep, "k": moe.top_k,
                             "enable_expert_tensor_parallelism": expert_tp > 1})
    notes = [*knob_notes,
        "PipelineModule(partition_method=...) accepts only 'parameters', 'uniform' or 'type:<regex>'; the override below "
        "sets the boundaries directly (a private method: checked with " + CHECKED_WITH + ")",
        f"the layer list must hold one LayerSpec per planned layer, in order ({len(names)}: {names[0]} .. {names[-1]})",
    ]
    if tp > 1:
        notes.append(f"num_mp={tp}: DeepSpeed only builds the groups; the layers must implement tensor parallelism themselves "
                     "(e.g. Megatron-DeepSpeed)")
    if moe is not None:
        notes.append(f"each MoE layer: deepspeed.moe.layer.MoE(hidden_size, expert, num_experts={moe.num_experts}, "
                     f"ep_size={ep}, k={moe.top_k}" + (", enable_expert_tensor_parallelism=True" if expert_tp > 1 else "") + ")")
        if expert_tp > 1:
            notes.append(f"the plan holds each expert split over the {tp} TP ranks: `expert` must be tensor-parallel over "
                         "the mpu's TP group (e.g. Megatron-DeepSpeed's ParallelMLP with enable_expert_tensor_parallelism); "
                         "DeepSpeed copies the module num_experts / ep_size times and builds the expert groups over TP")
    ds_config = None if b is None else {"train_batch_size": b.global_batch, "train_micro_batch_size_per_gpu": b.micro,
                                        "gradient_accumulation_steps": b.microbatches, "zero_optimization": {"stage": zero},
                                        "bf16": {"enabled": True}}  # the plan is priced in BF16 (FP8 is refused)
    if ds_config is not None:
        settings.update(ds_config=ds_config)
    else:
        notes.append("no global batch or microbatch count given: set train_micro_batch_size_per_gpu and "
                     "gradient_accumulation_steps (= m) in the DeepSpeed config")
    lines = [
        "from deepspeed.pipe import PipelineModule",
        "from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology",
        "",
        f"PARTS = {parts}  # stage s runs layers[PARTS[s]:PARTS[s + 1]]",
        f"CHECKPOINT_INTERVALS = {intervals}  # per stage: 1 recomputes every layer in backward, 0 none",
        "",
        "",
        "class PlannedPipelineModule(PipelineModule):",
        "    def __init__(self, *args, **kwargs):",
        "        super().__init__(*args, **kwargs)",
        "        self.activation_checkpoint_interval = CHECKPOINT_INTERVALS[self.stage_id]  # 1: full recompute",
        "",
        "    def _partition_layers(self, method='uniform'):",
        "        stage_id = self._topo.get_coord(self.global_rank).pipe",
        "        self.parts = list(PARTS)",
        "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])",
        "",
        "",
        f"topology = PipeModelDataParallelTopology(num_pp={len(stages)}, num_mp={tp}, num_dp={dp})",
        "model = PlannedPipelineModule(layers=layers, num_stages=None, topology=topology)",
    ]
    if ds_config is not None:
        lines.append(f"ds_config = {ds_config!r}  # merge into your DeepSpeed config")
    return Export("deepspeed", settings, "\n".join(lines), tuple(notes), True, (), CHECKED_WITH)


def _mtp_reasons(stages: list[StageView]) -> list[str]:
    """Why DeepSpeed's pipeline cannot run the plan's multi-token prediction modules (empty: the plan has none).

    ``PipelineModule`` passes one activation tuple from stage to stage and computes one loss, ``loss_fn``
    on the last stage's output; an MTP module needs the embedding of the shifted tokens and adds a loss of
    its own through the shared output head, which that contract does not carry.
    """
    held = [s.index for s in stages if s.count("mtp")]
    if not held:
        return []
    return [f"stage(s) {held} hold multi-token prediction modules: DeepSpeed's PipelineModule has no MTP (one "
            "activation tuple between stages, one loss_fn on the last stage); plan without them (--mtp-layers 0)"]


def _fp8_reasons(hints: PrecisionHints | None) -> list[str]:
    """Why DeepSpeed cannot train the plan's FP8 (empty under BF16): its engine has no FP8 training path."""
    if hints is None or hints.fp8_recipe in RULES.fp8_recipes:
        return []
    return [f"the plan trains in FP8 ({hints.fp8_recipe} scaling): {RULES.fp8_note}. Plan without --precision fp8 "
            "for DeepSpeed"]


def _knobs(stages: list[StageView], moe: MoeHints | None) -> tuple[int, list[int], list[str], list[str]]:
    """(ZeRO stage, activation-checkpoint interval per stage, notes, reasons) for DeepSpeed's pipeline engine."""
    knobs, reasons = segment_knobs(stages)
    zero, notes, zr = one_zero(knobs, "DeepSpeed has one zero_optimization.stage for the engine")
    reasons += zr
    if zero not in RULES.zero:
        reasons.append(f"ZeRO-{zero}: DeepSpeed's PipelineEngine refuses ZeRO-2 and ZeRO-3 (\"ZeRO-2 and ZeRO-3 are "
                       "incompatible with pipeline parallelism\"); stages 0 and 1 only")
    intervals = []
    for s in stages:
        mine = {k.recompute for k in knobs if k.stage == s.index}
        partial = sorted(mine - set(RULES.recompute))  # anything but none and full
        if partial:
            reasons.append(f"stage {s.index}: recompute {', '.join(partial)} (the attention core, Megatron modules or "
                           "torchtitan's per-op policy) has no PipelineModule setting (activation_checkpoint_interval "
                           "recomputes whole layers)")
        if len(mine) > 1:
            reasons.append(f"stage {s.index} mixes recompute settings {sorted(mine)}: activation_checkpoint_interval is "
                           "one setting per stage's module")
        intervals.append(1 if mine == {"full"} else 0)
    dp, tp, cp, ep, etp = stages[0].segments[0].shape
    if cp > 1 and not RULES.cp:
        reasons.append(f"cp {cp}: DeepSpeed's pipeline engine has no context parallelism (DeepSpeed-Ulysses sequence "
                       "parallelism runs outside PipelineEngine)")
    expert_tp = expert_tensor_parallel(tp, ep, etp)
    if expert_tp not in (1, tp):
        reasons.append(f"the plan splits each expert over {expert_tp} ranks (etp {etp}): DeepSpeed's MoE splits experts "
                       f"over the whole TP group ({tp}, enable_expert_tensor_parallelism) or not at all, so its ranks "
                       "would hold other expert weights than the plan charged")
    if ep > 1 and moe is None:
        reasons.append(f"the plan splits experts over ep {ep}, but its hints do not describe the model's experts")
    elif moe is not None and moe.num_experts % ep:
        reasons.append(f"ep {ep} does not divide the model's {moe.num_experts} experts (DeepSpeed MoE)")
    if ep > 1 and dp % ep:
        reasons.append(f"ep {ep} does not divide dp {dp}: DeepSpeed's expert-parallel groups split the data-parallel ranks")
    return zero, intervals, notes, reasons
