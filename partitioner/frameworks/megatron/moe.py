"""Megatron-Core's MoE router and performance settings for a model's experts (:func:`moe_router_settings`).

Performance, every MoE model: grouped GEMM, fused permutation (Transformer Engine >= 2.1), an fp32
router, shared-expert overlap with shared experts, as Megatron Bridge's providers set them. Routing as the
preset states it: the score function, ``--moe-router-pre-softmax`` when a softmax router's top-k weights are
not renormalised, load balancing (aux loss for softmax; expert bias with a sequence-wise loss for sigmoid,
the auxiliary-loss-free scheme of DeepSeek-V3), group-limited routing, the routed scaling factor
(``--moe-router-topk-scaling-factor``, the config's ``routed_scaling_factor``; a note when the hints
predate it).

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.megatron.moe``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..common import MoeHints

__all__ = ["MoeRouterSettings", "moe_router_settings", "SOFTMAX_AUX_LOSS_COEFF", "SIGMOID_SEQ_AUX_LOSS_COEFF",
           "ROUTER_DTYPE"]

SOFTMAX_AUX_LOSS_COEFF = 1e-3
"""Weight of the auxiliary load-balancing loss of a softmax router: Qwen3-MoE's and Qwen3-VL-MoE's
``router_aux_loss_coef`` (0.001, their config.json) as Megatron Bridge's Qwen3 providers set it
(Megatron Bridge commit 067f987d: ``src/megatron/bridge/models/qwen/qwen3_moe_bridge.py``, ``qwen_vl/qwen3_vl_bridge.py``)."""

SIGMOID_SEQ_AUX_LOSS_COEFF = 1e-4
"""Weight of the sequence-wise balance loss beside the expert bias of a sigmoid router: DeepSeek-V3's
alpha = 0.0001 (arXiv:2412.19437, Section 4.2), Megatron Bridge's DeepSeek-V3 default (Megatron Bridge commit 067f987d: ``models/deepseek/deepseek_v3_bridge.py``). A training
choice more than a model fact: Bridge's Kimi-K2 and GLM-4.5 providers use 1e-3."""

ROUTER_DTYPE = "fp32"
"""The router's logits and probabilities in fp32, as every Bridge MoE provider sets it (Megatron Bridge commit 067f987d:
``models/qwen/qwen3_moe_bridge.py``, ``deepseek/deepseek_v3_bridge.py``, ``glm/glm45_bridge.py``)."""


@dataclass(frozen=True)
class MoeRouterSettings:
    """TransformerConfig fields, those of them megatron-core accepts only with Transformer Engine installed
    (``te_core``), the Megatron-LM flags that set both, and notes."""

    core: dict[str, Any] = field(default_factory=dict)
    te_core: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def moe_router_settings(moe: MoeHints, dispatcher: str = "alltoall") -> MoeRouterSettings:
    """The router and performance settings of ``moe`` (module docstring), beside the expert counts and axes."""
    core: dict[str, Any] = {"moe_grouped_gemm": True, "moe_router_dtype": ROUTER_DTYPE}
    flags = ["--moe-grouped-gemm", "--moe-permute-fusion", f"--moe-router-dtype {ROUTER_DTYPE}"]
    notes = ["fused permutation (--moe-permute-fusion, moe_permute_fusion) needs Transformer Engine >= 2.1 "
             "(megatron-core refuses the config without its fused kernels)"]
    if moe.router_score:
        core["moe_router_score_function"] = moe.router_score
        flags.append(f"--moe-router-score-function {moe.router_score}")
    else:
        notes.append("the result's hints do not state the router (written before they did): no score function, "
                     "top-k normalisation or load-balancing flags written; plan again to get them")
    if moe.router_score == "softmax":
        if not moe.norm_topk:
            core["moe_router_pre_softmax"] = True
            flags.append("--moe-router-pre-softmax")
        core.update(moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=SOFTMAX_AUX_LOSS_COEFF)
        flags += ["--moe-router-load-balancing-type aux_loss", f"--moe-aux-loss-coeff {SOFTMAX_AUX_LOSS_COEFF}"]
    elif moe.router_score == "sigmoid":
        core.update(moe_router_enable_expert_bias=True, moe_router_load_balancing_type="seq_aux_loss",
                    moe_aux_loss_coeff=SIGMOID_SEQ_AUX_LOSS_COEFF)
        flags += ["--moe-router-enable-expert-bias", "--moe-router-load-balancing-type seq_aux_loss",
                  f"--moe-aux-loss-coeff {SIGMOID_SEQ_AUX_LOSS_COEFF}"]
        if not moe.topk_scale:
            notes.append("the result's hints do not state the routed scaling factor (written before they did): pass "
                         "the model config's routed_scaling_factor as --moe-router-topk-scaling-factor (DeepSeek-V3: 2.5)")
        if not moe.norm_topk and moe.top_k > 1:
            notes.append("the model does not renormalise its top-k sigmoid weights; Megatron-Core's sigmoid router "
                         "always does (k > 1)")
    if moe.topk_scale and moe.topk_scale != 1.0:  # Megatron-Core's default (None) scales by 1
        core["moe_router_topk_scaling_factor"] = moe.topk_scale
        flags.append(f"--moe-router-topk-scaling-factor {moe.topk_scale:g}")
    if moe.expert_groups > 1:
        core.update(moe_router_num_groups=moe.expert_groups, moe_router_group_topk=moe.group_top_k)
        flags += [f"--moe-router-num-groups {moe.expert_groups}", f"--moe-router-group-topk {moe.group_top_k}"]
    if moe.shared_ffn and dispatcher in ("alltoall", "allgather"):
        core["moe_shared_expert_overlap"] = True
        flags.append("--moe-shared-expert-overlap")
    return MoeRouterSettings(core, {"moe_permute_fusion": True}, tuple(flags), tuple(notes))
