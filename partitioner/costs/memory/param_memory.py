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

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.memory.param_memory``.
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
