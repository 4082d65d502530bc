"""Plans as DeepSpeed pipeline settings (``PipelineModule`` boundaries, topology, batch config).

DeepSpeed's ``PipelineModule(partition_method=...)`` takes only
``"parameters"``, ``"uniform"`` or ``"type:<regex>"`` [1]_, so the planned
boundaries ``parts`` (stage s runs ``layers[parts[s]:parts[s+1]]``) are set
by overriding ``_partition_layers``. ``PipeModelDataParallelTopology`` gives
every stage the same model- and data-parallel degree, so a plan whose
stages (or segments) differ in layout is not expressible. The batch:
``train_micro_batch_size_per_gpu`` = global batch / (m dp) and
``gradient_accumulation_steps`` = m (DeepSpeed's pipeline engine runs
that many microbatches per step). The engine runs one training schedule,
``TrainSchedule`` (1F1B): a plan made for another schedule is declared not
expressible rather than run under 1F1B.

References
----------
.. [1] DeepSpeed 0.19.8, ``deepspeed/runtime/pipe/module.py``
   (``PipelineModule._partition_layers``, ``_set_bounds``) and
   ``deepspeed/runtime/pipe/topology.py`` (``PipeModelDataParallelTopology``) and
   ``deepspeed/runtime/pipe/engine.py`` (``PipelineEngine._train_schedule``: ``TrainSchedule``).
"""
from __future__ import annotations

from typing import Any, Mapping

from .common import Export, StageView, layout_reasons, per_replica_microbatch, schedule_of

__all__ = ["export_deepspeed", "CHECKED_WITH"]

CHECKED_WITH = "deepspeed 0.19.8 (PipelineModule, PipeModelDataParallelTopology)"


def export_deepspeed(stages: list[StageView], ctx: Mapping[str, Any]) -> Export:
    """``PipelineModule`` subclass with the planned boundaries, topology and batch config, or the reasons it cannot."""
    parts = [s.first for s in stages] + [stages[-1].last + 1]
    names = [n for s in stages for n in s.names]
    reasons = layout_reasons(stages, "DeepSpeed's PipeModelDataParallelTopology gives every stage, and every layer of a "
                                     "stage, the same model- and data-parallel degree")
    schedule, _ = schedule_of(ctx)
    if schedule != "1f1b":
        reasons.insert(0, f"schedule {schedule} is not expressible: DeepSpeed's PipelineEngine runs TrainSchedule (1F1B) "
                          "only; plan with --schedule 1f1b")
    b = None
    if not reasons:
        b, why = per_replica_microbatch(ctx.get("global_batch"), ctx.get("microbatches"), stages[0].dp)
        if why:
            reasons.append(f"{why} (DeepSpeed: train_batch_size = micro batch x gradient_accumulation_steps x dp)")
    settings: dict[str, Any] = {"num_stages": len(stages), "parts": parts, "layers": names}
    if reasons:
        settings["stage_layouts"] = [{"stage": s.index, "layouts": s.describe_layouts()} for s in stages]
        return Export("deepspeed", settings, "# (no DeepSpeed setting expresses this plan: see the reasons above)", (), False,
                      tuple(reasons), CHECKED_WITH)
    dp, tp = stages[0].dp, stages[0].tp
    settings.update(model_parallel_size=tp, data_parallel_size=dp)
    notes = [
        "PipelineModule(partition_method=...) accepts only 'parameters', 'uniform' or 'type:<regex>'; the override below "
        "sets the boundaries directly (a private method: checked with " + CHECKED_WITH + ")",
        f"the layer list must hold one LayerSpec per planned layer, in order ({len(names)}: {names[0]} .. {names[-1]})",
    ]
    if tp > 1:
        notes.append(f"num_mp={tp}: DeepSpeed only builds the groups; the layers must implement tensor parallelism themselves "
                     "(e.g. Megatron-DeepSpeed)")
    if b is not None:
        settings["ds_config"] = {"train_batch_size": ctx["global_batch"], "train_micro_batch_size_per_gpu": b,
                                 "gradient_accumulation_steps": ctx["microbatches"]}
    else:
        notes.append("no global batch or microbatch count given: set train_micro_batch_size_per_gpu and "
                     "gradient_accumulation_steps (= m) in the DeepSpeed config")
    lines = [
        "from deepspeed.pipe import PipelineModule",
        "from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology",
        "",
        f"PARTS = {parts}  # stage s runs layers[PARTS[s]:PARTS[s + 1]]",
        "",
        "",
        "class PlannedPipelineModule(PipelineModule):",
        "    def _partition_layers(self, method='uniform'):",
        "        stage_id = self._topo.get_coord(self.global_rank).pipe",
        "        self.parts = list(PARTS)",
        "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])",
        "",
        "",
        f"topology = PipeModelDataParallelTopology(num_pp={len(stages)}, num_mp={tp}, num_dp={dp})",
        "model = PlannedPipelineModule(layers=layers, num_stages=None, topology=topology)",
    ]
    if "ds_config" in settings:
        lines.append(f"ds_config = {settings['ds_config']!r}  # merge into your DeepSpeed config")
    return Export("deepspeed", settings, "\n".join(lines), tuple(notes), True, (), CHECKED_WITH)
