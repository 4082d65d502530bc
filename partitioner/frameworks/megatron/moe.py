"""Megatron-Core's MoE router and performance settings for a model's experts (:func:`moe_router_settings`).

What a Megatron-Core MoE engineer passes for a model, from what its
:class:`~partitioner.frameworks.MoeHints` state (the preset's router):

* performance, every MoE model: grouped GEMM over the local experts
  (``--moe-grouped-gemm``), fused token permutation
  (``--moe-permute-fusion``; megatron-core refuses it at config time
  unless Transformer Engine >= 2.1 provides the fused kernels), the router
  in fp32 (``--moe-router-dtype fp32``), and with shared experts their
  computation overlapped with the all-to-all dispatch
  (``--moe-shared-expert-overlap``, alltoall dispatcher) -- as NVIDIA's
  Megatron Bridge providers set them for Qwen3-MoE, Qwen3-VL, DeepSeek-V3,
  Kimi-K2 and GLM-4.5 [1]_;
* routing semantics: ``--moe-router-score-function`` as the model scores
  (softmax or sigmoid). Megatron's softmax router without
  ``--moe-router-pre-softmax`` takes the top-k logits and softmaxes over
  those k, which equals softmax over all experts renormalised over the k
  chosen (``norm_topk``); with ``--moe-router-pre-softmax`` the softmax is
  over all experts and not renormalised (``norm_topk`` false). Its sigmoid
  router always renormalises the k weights (k > 1) [2]_;
* load balancing: a softmax router trains with the auxiliary loss
  (``aux_loss``, :data:`SOFTMAX_AUX_LOSS_COEFF`); a sigmoid router is the
  auxiliary-loss-free scheme of DeepSeek-V3 -- a per-expert bias added to
  the scores for the choice only (``--moe-router-enable-expert-bias``,
  megatron-core accepts it only with sigmoid), with a small sequence-wise
  balance loss (``seq_aux_loss``, :data:`SIGMOID_SEQ_AUX_LOSS_COEFF`) [3]_;
  every sigmoid router of transformers (DeepSeek-V3, Kimi-K2, GLM-4.5)
  carries that bias (``e_score_correction_bias``);
* group-limited routing (``--moe-router-num-groups`` /
  ``--moe-router-group-topk``) when the experts form more than one group.

Not recorded by the presets, so not written (a note says so): the routed
output's scaling (``routed_scaling_factor`` -> ``--moe-router-topk-scaling-factor``)
of sigmoid routers.

References
----------
.. [1] NVIDIA Megatron Bridge (commit 067f987df03b8355b03192d88d70f1709fedf51a),
   ``src/megatron/bridge/models/qwen/qwen3_moe_bridge.py``, ``qwen_vl/qwen3_vl_bridge.py``,
   ``deepseek/deepseek_v3_bridge.py``, ``kimi/kimi_bridge.py``, ``glm/glm45_bridge.py``
   (``provider.moe_grouped_gemm``, ``moe_permute_fusion``, ``moe_router_dtype = "fp32"``,
   ``moe_shared_expert_overlap``, ``moe_router_load_balancing_type``, ``moe_aux_loss_coeff``).
.. [2] Megatron-Core 0.16.1, ``megatron/core/transformer/moe/moe_utils.py``
   (``topk_routing_with_score_function``, ``group_limited_topk``) and
   ``transformer_config.py`` (``__post_init__``: expert bias needs sigmoid; fused permutation needs TE >= 2.1).
.. [3] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, Sections 2.1.2 and 4.2
   (auxiliary-loss-free balancing; bias update speed 0.001; sequence-wise balance factor 0.0001).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..common import MoeHints

__all__ = ["MoeRouterSettings", "moe_router_settings", "SOFTMAX_AUX_LOSS_COEFF", "SIGMOID_SEQ_AUX_LOSS_COEFF",
           "ROUTER_DTYPE"]

SOFTMAX_AUX_LOSS_COEFF = 1e-3
"""Weight of the auxiliary load-balancing loss of a softmax router: Qwen3-MoE's and Qwen3-VL-MoE's
``router_aux_loss_coef`` (0.001, their config.json) as Megatron Bridge's Qwen3 providers set it [1]_."""

SIGMOID_SEQ_AUX_LOSS_COEFF = 1e-4
"""Weight of the sequence-wise balance loss beside the expert bias of a sigmoid router: DeepSeek-V3's
alpha = 0.0001 (arXiv:2412.19437, Section 4.2), Megatron Bridge's DeepSeek-V3 default [1]_ [3]_. A training
choice more than a model fact: Bridge's Kimi-K2 and GLM-4.5 providers use 1e-3."""

ROUTER_DTYPE = "fp32"
"""The router's logits and probabilities in fp32, as every Bridge MoE provider sets it [1]_."""


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
        notes.append("the sigmoid router's routed_scaling_factor is not recorded in the preset: pass the model "
                     "config's value as --moe-router-topk-scaling-factor (DeepSeek-V3: 2.5)")
        if not moe.norm_topk and moe.top_k > 1:
            notes.append("the model does not renormalise its top-k sigmoid weights; Megatron-Core's sigmoid router "
                         "always does (k > 1)")
    if moe.expert_groups > 1:
        core.update(moe_router_num_groups=moe.expert_groups, moe_router_group_topk=moe.group_top_k)
        flags += [f"--moe-router-num-groups {moe.expert_groups}", f"--moe-router-group-topk {moe.group_top_k}"]
    if moe.shared_ffn and dispatcher in ("alltoall", "allgather"):
        core["moe_shared_expert_overlap"] = True
        flags.append("--moe-shared-expert-overlap")
    return MoeRouterSettings(core, {"moe_permute_fusion": True}, tuple(flags), tuple(notes))
