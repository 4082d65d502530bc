"""Bytes per parameter as each training framework's mixed-precision Adam keeps them.

Contract: pure data and arithmetic. :data:`PARAM_MEMORY` names one
:class:`ParamBytes` per framework setting -- the buffers its optimizer
wrapper allocates per trainable parameter, each replicated over the
data-parallel group or sharded over it -- and :func:`param_memory` looks
one up (a :class:`~partitioner.problem.ProblemError` naming
``options.memory_count`` for an unknown name). Which count a framework
keeps at each ZeRO stage is its own rule (``RULES.memory`` in its home,
:mod:`partitioner.frameworks`), so that ``plan --target`` can cost memory
the way the target counts it. :meth:`ParamBytes.option_overrides` gives
the :class:`~partitioner.costs.options.CostOptions` fields that make the cost model's
weight memory equal the count (with the ZeRO knob :attr:`ParamBytes.knob`).

Per parameter, the steady state between iterations plus the gradients of
a full backward (transient buffers of the step itself are left out):

=========================  =========================================  ============
count                      buffers (replicated | sharded over d)       bytes on one GPU
=========================  =========================================  ============
``megatron``               bf16 weight 2, fp32 ``main_grad`` 4,        18
                           fp32 master 4, Adam m 4, v 4 |
``megatron-distopt``       weight 2, ``main_grad`` 4 | master, m, v    6 + 12/d [13]_
``fsdp2``                  | fp32 sharded parameter (the master) 4,    16/d [31]_ [32]_
                           fp32 gradient 4, m 4, v 4
``fsdp2-keep-gathered``    the gathered bf16 weight 2 | as ``fsdp2``   2 + 16/d [32]_
                           (``reshard_after_forward`` off: held from
                           forward to backward)
``torchtitan-ddp``         fp32 weight 4, fp32 grad 4, m 4, v 4, the   18 [32]_ [35]_
                           bf16 copy autocast casts and the matmuls
                           save for backward 2 |
``deepspeed-zero0``        16-bit weight 2, 16-bit grad 2, fp32        16 [4]_ [33]_
                           master 4, m 4, v 4 |
``deepspeed-bf16``         bf16 weight 2, bf16 accumulation buffer     4 + 12/d [33]_
                           2 | fp32 master 4, m 4, v 4
``deepspeed-bf16-fp32acc`` bf16 weight 2, fp32 accumulation buffer     6 + 12/d [33]_
                           4 | fp32 master, m, v
``deepspeed-zero1``        16-bit weight 2, 16-bit grad 2 | fp32 grad  4 + 16/d [33]_
                           partition 4, master 4, m 4, v 4
``deepspeed-zero2``        16-bit weight 2 | 16-bit grad 2, fp32 grad  2 + 18/d [34]_
                           4, master 4, m 4, v 4
``deepspeed-zero3``        | 16-bit weight 2, 16-bit grad 2, master    18/d + 4 per
                           4, m 4, v 4, 2 more (DeepSpeed's            parameter of the
                           estimator's; see below); the largest        largest layer [34]_
                           layer's gathered 16-bit weight and grad
=========================  =========================================  ============

Which DeepSpeed optimizer wrapper runs (DeepSpeed 0.19,
``runtime/engine.py``, ``_do_optimizer_sanity_check``): with ZeRO,
``DeepSpeedZeroOptimizer`` (stage 1, 2) or ``DeepSpeedZeroOptimizer_Stage3``,
except bf16 + stage 1 + ``data_types.grad_accum_dtype: fp32``, which is
``BF16_Optimizer`` with an fp32 buffer; without ZeRO, ``BF16_Optimizer``
with a bf16 buffer when bf16 meets pipeline parallelism (it always shards
the fp32 master over the data-parallel group), else ``FP16_Optimizer``
(fp16, or bf16 without a pipeline). Stage 1 keeps every parameter's 16-bit
gradient until the accumulation boundary reduces it
(``partition_gradients`` is false); stage 2 reduces gradients bucket by
bucket in backward and keeps its partition. Stage 3 keeps 16-bit weight
and gradient partitions and the fp32 master, m and v (16/d) and makes the
fp32 gradient of one sub-group (``sub_group_size``) only during the step
(``_prepare_fp32_grad_for_sub_group``); DeepSpeed's own estimator charges
18/d, which this count adopts as the framework's count (2 B/d more than
the steady buffers). FSDP2 keeps each parameter
sharded in its original dtype (fp32 in torchtitan, whose model is built
in fp32) and casts the all-gathered copy to ``param_dtype`` (bf16); the
reduce-scattered gradient is kept in the sharded parameter's dtype; the
gathered bf16 layers in flight are transient unless
``reshard_after_forward`` is off (torchtitan's ``fsdp_reshard_after_forward
never``, the export's ZeRO-1). Without sharding torchtitan replicates
with DDP and runs the forward under ``torch.autocast`` (bf16), whose cast
weights the matmuls keep for backward.

References
----------
.. [4] S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
   Trillion Parameter Models", SC 2020 (2 + 2 + K = 12 bytes per
   parameter for mixed-precision Adam, Section 3.1).
.. [13] NVIDIA Megatron-LM, ``README.md``, "Distributed Optimizer" (bf16
   parameters with fp32 gradients: 18 bytes per parameter, 6 + 12/d with
   the distributed optimizer).
.. [31] PyTorch, ``torch.distributed.fsdp.fully_shard`` and
   ``MixedPrecisionPolicy`` documentation (``param_dtype``: the unsharded
   parameter's dtype for forward and backward; ``reduce_dtype``: the
   gradient reduction's; the sharded parameter keeps its dtype).
.. [32] torchtitan 0.3, ``torchtitan/config/configs.py``
   (``mixed_precision_param = "bfloat16"``, applied "via fully_shard when
   data_parallel_shard_degree > 1 ..., via torch.autocast when
   data_replicate_degree >= 1"; ``mixed_precision_reduce = "float32"``)
   and ``torchtitan/models/llama3/parallelize.py``.
.. [33] DeepSpeed 0.19, ``deepspeed/runtime/engine.py``
   (``_do_optimizer_sanity_check``, ``get_data_types``),
   ``runtime/bf16_optimizer.py`` (``_setup_for_real_optimizer``: flat bf16
   weights, a full gradient buffer in ``grad_acc_dtype``, an fp32 master
   partition per rank), ``runtime/fp16/fused_optimizer.py``,
   ``runtime/zero/stage_1_and_2.py`` (``partition_gradients``).
.. [34] DeepSpeed 0.19, ``runtime/zero/stage_1_and_2.py``
   ``estimate_zero2_model_states_mem_needs`` ("2 = params_16bit, 18 =
   2_grads_16bit + 4_grads_32bit + 4_params_32bit +
   8_optimizer_states_32bit") and ``runtime/zero/stage3.py``
   ``estimate_zero3_model_states_mem_needs`` (``4 * largest_layer_params
   + 18 * total_params / total_gpus``).
.. [35] PyTorch, "Automatic Mixed Precision package - torch.amp"
   (``torch.autocast``: ops such as ``linear`` run in the lower precision,
   their fp32 inputs cast, the casts of leaf parameters cached while
   autocast is on).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...problem import ProblemError

__all__ = ["ParamBytes", "PARAM_MEMORY", "param_memory"]


@dataclass(frozen=True)
class ParamBytes:
    """One framework's bytes per trainable parameter, by where they live.

    Parameters
    ----------
    name : str
        The count's name (a key of :data:`PARAM_MEMORY`).
    replicated : dict of str to float
        Buffers every data-parallel rank keeps whole (name -> bytes/param).
    sharded : dict of str to float
        Buffers divided over the data-parallel group.
    gathered_layer : float
        Bytes per parameter of the largest layer, held gathered (ZeRO-3).
    grad_reduce_bytes : float
        Bytes per parameter of the data-parallel gradient reduction.
    frozen : float
        Bytes per frozen parameter (weights only, replicated).
    source : str
        Where the count comes from (the module's references).
    """

    name: str
    replicated: dict[str, float]
    sharded: dict[str, float]
    gathered_layer: float = 0.0
    grad_reduce_bytes: float = 2.0
    frozen: float = 2.0
    source: str = ""

    def per_gpu(self, dp: int, largest_layer_params: float = 0.0, params: float = 1.0) -> float:
        """Bytes on one of ``dp`` data-parallel ranks for ``params`` parameters (one by default)."""
        if dp < 1:
            raise ValueError(f"dp must be at least 1, got {dp}")
        rep, sh = sum(self.replicated.values()), sum(self.sharded.values())
        return params * (rep + sh / dp) + self.gathered_layer * largest_layer_params

    @property
    def knob(self) -> int:
        """The cost model's ZeRO knob that reproduces the count: 0 nothing sharded, 3 everything, else 1."""
        if not self.sharded:
            return 0
        return 3 if not self.replicated else 1

    def option_overrides(self) -> dict[str, float]:
        """The :class:`~partitioner.costs.options.CostOptions` fields that make the cost model's weight bytes equal the count.

        With :attr:`knob` the builder keeps ``bytes_per_param -
        optimizer_bytes_per_param (1 - 1/d)`` per parameter (ZeRO-1) or
        ``bytes_per_param / d`` (ZeRO-3), which is ``replicated + sharded/d``.
        """
        rep, sh = sum(self.replicated.values()), sum(self.sharded.values())
        return {"bytes_per_param": rep + sh, "optimizer_bytes_per_param": sh,
                "grad_bytes_per_param": self.grad_reduce_bytes, "frozen_bytes_per_param": self.frozen}


_ADAM = {"master_fp32": 4.0, "adam_m": 4.0, "adam_v": 4.0}

PARAM_MEMORY: dict[str, ParamBytes] = {
    c.name: c for c in (
        ParamBytes("megatron", {"weight_bf16": 2.0, "main_grad_fp32": 4.0, **_ADAM}, {}, grad_reduce_bytes=4.0,
                   source="[13] Megatron-LM, no distributed optimizer"),
        ParamBytes("megatron-distopt", {"weight_bf16": 2.0, "main_grad_fp32": 4.0}, dict(_ADAM), grad_reduce_bytes=4.0,
                   source="[13] Megatron-LM --use-distributed-optimizer"),
        ParamBytes("fsdp2", {}, {"param_fp32": 4.0, "grad_fp32": 4.0, "adam_m": 4.0, "adam_v": 4.0},
                   grad_reduce_bytes=4.0, frozen=4.0,
                   source="[31] [32] FSDP2 MixedPrecisionPolicy(bf16, fp32), torchtitan"),
        ParamBytes("fsdp2-keep-gathered", {"weight_bf16_gathered": 2.0},
                   {"param_fp32": 4.0, "grad_fp32": 4.0, "adam_m": 4.0, "adam_v": 4.0}, grad_reduce_bytes=4.0,
                   frozen=4.0, source="[32] torchtitan fsdp_reshard_after_forward never"),
        ParamBytes("torchtitan-ddp", {"param_fp32": 4.0, "grad_fp32": 4.0, "adam_m": 4.0, "adam_v": 4.0,
                                      "weight_bf16_autocast": 2.0}, {}, grad_reduce_bytes=4.0, frozen=4.0,
                   source="[32] [35] torchtitan DDP under torch.autocast"),
        ParamBytes("deepspeed-zero0", {"weight_16bit": 2.0, "grad_16bit": 2.0, **_ADAM}, {},
                   source="[4] [33] DeepSpeed FP16_Optimizer"),
        ParamBytes("deepspeed-bf16", {"weight_bf16": 2.0, "grad_accum_bf16": 2.0}, dict(_ADAM),
                   source="[33] DeepSpeed BF16_Optimizer, bf16 accumulation (pipeline, stage 0)"),
        ParamBytes("deepspeed-bf16-fp32acc", {"weight_bf16": 2.0, "grad_accum_fp32": 4.0}, dict(_ADAM),
                   grad_reduce_bytes=4.0,
                   source="[33] DeepSpeed BF16_Optimizer, fp32 accumulation (stage 1, grad_accum_dtype fp32)"),
        ParamBytes("deepspeed-zero1", {"weight_16bit": 2.0, "grad_16bit": 2.0}, {"grad_fp32": 4.0, **_ADAM},
                   source="[33] DeepSpeedZeroOptimizer, stage 1"),
        ParamBytes("deepspeed-zero2", {"weight_16bit": 2.0}, {"grad_16bit": 2.0, "grad_fp32": 4.0, **_ADAM},
                   source="[34] DeepSpeedZeroOptimizer, stage 2"),
        ParamBytes("deepspeed-zero3", {}, {"weight_16bit": 2.0, "grad_16bit": 2.0, "estimator_allowance": 2.0, **_ADAM},
                   gathered_layer=4.0, source="[34] DeepSpeedZeroOptimizer_Stage3"),
    )
}

def param_memory(name: str) -> ParamBytes:
    """The :class:`ParamBytes` named ``name``; :class:`ProblemError` at ``options.memory_count`` if unknown."""
    try:
        return PARAM_MEMORY[name]
    except (KeyError, TypeError):
        raise ProblemError(f"unknown memory count {name!r} (counts: {', '.join(PARAM_MEMORY)})",
                           path="options.memory_count") from None
