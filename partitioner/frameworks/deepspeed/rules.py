"""What DeepSpeed's pipeline engine runs: :data:`RULES`, read by ``plan --target deepspeed`` and by the exporter.

* Schedule: ``TrainSchedule`` (1F1B) only (``PipelineEngine._train_schedule``).
* One model- and data-parallel degree for every stage and layer
(``PipeModelDataParallelTopology``); no context parallelism in the pipeline
engine (DeepSpeed-Ulysses runs outside it). The planner searches no expert
split of etp > 1; the exporter writes the split the plan charged: experts
whole, or over the TP group (``enable_expert_tensor_parallelism``, as a plan
without an expert split on tp > 1 charges them). * Knobs: ZeRO 0 or 1 (the
pipeline engine refuses ZeRO-2 and ZeRO-3) and
``activation_checkpoint_interval`` (full recompute, per stage); anything finer
(selective, Megatron's modules, torchtitan's per-op policy) has no
``PipelineModule`` setting.

More (the detail of this module): ``docs/internals/frameworks.md``, section ``partitioner.frameworks.deepspeed.rules``.
"""
from __future__ import annotations

from types import MappingProxyType

from ..common import FrameworkRules, one_group_per_layer

__all__ = ["RULES"]

RULES = FrameworkRules(
    name="deepspeed",
    schedules=("1f1b",),
    zero=(0, 1),
    recompute=("none", "full"),
    recompute_decoder_only=False,
    cut_groups=one_group_per_layer,
    memory=MappingProxyType({0: "deepspeed-bf16", 1: "deepspeed-zero1", 2: "deepspeed-zero2", 3: "deepspeed-zero3"}),
    cp=False,
    etp=False,
    recompute_per_stage=True,
    # deepspeed.moe.layer.MoE wraps the user's expert MLP; Megatron-DeepSpeed's swiglu is F.silu(a) * b, unfused
    expert_fused_glu=False,
    mtp_stages=0,  # PipelineModule passes one activation tuple between stages and one loss_fn (export._mtp_reasons)
    fp8_note="DeepSpeed 0.19.8's engine trains in fp32, fp16 or bf16 (config sections fp16, bf16, torch_autocast); its "
             "fp8 code quantizes frozen weights for inference and LoRA (deepspeed.linear, ops.fp_quantizer)",
)
