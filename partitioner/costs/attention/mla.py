"""Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2) in the cost model.

Contract: pure functions of a :class:`~partitioner.presets.ModuleSpec`
whose ``kv_lora_rank`` is positive (:attr:`~partitioner.presets.ModuleSpec.mla`)
or of its :class:`MlaShape`: the attention's matmuls per token
(:func:`mla_gemms`), its core (:func:`mla_attn_flops`), the tensors its
backward keeps beyond the standard ones (:func:`mla_activation_terms`), the
bytes its memory-bound kernels move (:func:`mla_traffic`), and what tensor
parallelism does to it (:func:`mla_tp_comm_width`, the down-projections
held and run whole on every rank). :mod:`~partitioner.costs.layers`, :mod:`~partitioner.costs.compute.flops`,
:mod:`~partitioner.costs.memory.activations` and :mod:`~partitioner.costs.memory.traffic` call these for MLA blocks only; every
other block is costed as before.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.attention.mla``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...presets import ClusterSpec, ModuleSpec, mla_down_params
from ..comm import allreduce_ms
from ..options import CostOptions

__all__ = ["MlaShape", "MlaGemms", "mla_shape", "mla_gemms", "mla_attn_flops", "mla_activation_terms", "mla_traffic",
           "mla_tp_comm_width", "mla_replicated", "replicated_grad_sync_ms", "cp_head_dim", "MLA_CP_ALGORITHMS"]

BF16 = 2.0  # bytes per bf16 element
# References of the comments below (the module docstring's detail is in docs/internals/costs.md):
# .. [21] NVIDIA Transformer Engine, ``pytorch/attention/dot_product_attention/
#    context_parallel.py`` (``attn_forward_func_with_cp``).

MLA_CP_ALGORITHMS = ("p2p",)  # Transformer Engine's context-parallel algorithms that take d_qk != d_v [21]_


@dataclass(frozen=True)
class MlaShape:
    """The latent-attention widths of a block (its heads and ``d_qk`` are the :class:`~partitioner.costs.memory.activations.BlockShape`'s).

    ``q_lora_rank`` 0: the query is projected from the hidden state directly.
    """

    q_lora_rank: int
    kv_lora_rank: int
    rope_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class MlaGemms:
    """Multiply-adds per token of one MLA block's attention matmuls (FLOPs: 2x)."""

    down: float  # hidden -> query latent and -> key/value latent + rotary key: whole on every tp rank
    up: float  # query up-projection (or the plain query projection) and key/value up-projection: split by tp
    out: float  # output projection heads x v_head_dim -> hidden: split by tp
    reads_input: float  # the matmuls that read the block's (normed) input: the down-projections, a plain query

    @property
    def total(self) -> float:
        return self.down + self.up + self.out


def mla_shape(spec: ModuleSpec) -> MlaShape | None:
    """The :class:`MlaShape` of ``spec``'s blocks, None without latent attention."""
    if not spec.mla:
        return None
    return MlaShape(spec.q_lora_rank, spec.kv_lora_rank, spec.rope_head_dim, spec.v_dim)


def mla_gemms(spec: ModuleSpec) -> MlaGemms:
    """The per-token multiply-adds of ``spec``'s MLA attention (module docstring table) [40]_.

    References
    ----------
    .. [40] DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient
       Mixture-of-Experts Language Model", arXiv:2405.04434 (2024), Section
       2.1 (Equations 9-19; Section 2.1.2: the absorbed form at inference).
    """
    h, a, r_q, r_kv = spec.hidden, spec.heads, spec.q_lora_rank, spec.kv_lora_rank
    d_qk, d_v = spec.qk_head_dim, spec.v_dim
    kv_down = float(h * (r_kv + spec.rope_head_dim))
    q_down = float(h * r_q)
    q_up = float((r_q or h) * a * d_qk)
    kv_up = float(r_kv * a * (spec.d_head + d_v))
    return MlaGemms(down=q_down + kv_down, up=q_up + kv_up, out=float(a * d_v * h),
                    reads_input=q_down + kv_down + (0.0 if r_q else q_up))


def mla_attn_flops(spec: ModuleSpec, pairs: float) -> float:
    """FLOPs of the attention core over ``pairs`` query-key pairs: ``Q K^T`` over ``d_qk``, ``P V`` over ``d_v``."""
    return 2.0 * spec.heads * (spec.qk_head_dim + spec.v_dim) * pairs


def mla_replicated(spec: ModuleSpec, tokens: float) -> tuple[int, float]:
    """(parameters, forward FLOPs over ``tokens``) of the down-projections every tensor-parallel rank holds whole [42]_.

    References
    ----------
    .. [42] NVIDIA Megatron-Core 0.16.1, ``megatron/core/transformer/
       multi_latent_attention.py`` (``MLASelfAttention``: ``linear_q_down_proj``
       and ``linear_kv_down_proj`` built with ``parallel_mode='duplicated'``,
       the latents gathered before the up-projections, ``fused_apply_mla_rope_
       for_q`` / ``_for_kv``), ``extensions/transformer_engine.py``
       (``TELinear``: duplicated weights marked ``sequence_parallel``) and
       ``distributed/finalize_model_grads.py`` (their gradients all-reduced over
       the tensor-parallel group); ``transformer/transformer_config.py``
       (``cache_mla_latents`` conflicts with training).
    """
    return mla_down_params(spec), 2.0 * tokens * mla_gemms(spec).down


def replicated_grad_sync_ms(params: float, tp: int, cluster: ClusterSpec, opts: CostOptions) -> float:
    """Once per iteration: the all-reduce of tp-replicated weights' gradients over the tensor-parallel group, in ms.

    With sequence parallelism each rank's copy of a replicated weight (the
    down-projections) saw only its share of the tokens, so Megatron-Core
    all-reduces those gradients over the tp group (``finalize_model_grads``,
    parameters marked ``sequence_parallel``) [42]_; without it every rank
    computed the whole gradient and nothing is sent.

    References
    ----------
    .. [42] As cited in :func:`mla_replicated`.
    """
    if not opts.sequence_parallel or tp <= 1 or params <= 0:
        return 0.0
    return allreduce_ms(params * opts.grad_bytes_per_param, tp, cluster.intra_node_GBps, opts)


def mla_tp_comm_width(spec: ModuleSpec) -> float:
    """Elements per token of the attention's tensor-parallel collectives, per direction on average [42]_.

    Forward: the latents ``L = (r_q or h) + r_kv + d_r`` all-gathered into
    the up-projections, the output's ``h`` reduced; backward the reverse.
    As a width comparable to a block's ``h`` per all-reduce: ``(L + h) / 2``.

    References
    ----------
    .. [42] As cited in :func:`mla_replicated`.
    """
    latent = (spec.q_lora_rank or spec.hidden) + spec.kv_lora_rank + spec.rope_head_dim
    return (latent + spec.hidden) / 2.0


def mla_activation_terms(mla: MlaShape, s: float, b: float, sp: int, norm_keep: float) -> dict[str, float]:
    """The latents' stored tensors per microbatch on one GPU (module docstring), beyond Q, K, V and the output.

    ``sp`` is the divisor of the sequence-parallel region (``t`` with
    sequence parallelism, else 1); ``norm_keep`` the bytes a norm keeps per
    input element (2: fused; 6: an unfused RMSNorm, which keeps the fp32
    upcast and its bf16 output too).
    """
    out: dict[str, float] = {}
    if mla.q_lora_rank:
        out["q_latent"] = (norm_keep + BF16) * s * b * mla.q_lora_rank / sp  # the norm's input, the up-projection's
    out["kv_latent"] = (norm_keep + BF16) * s * b * mla.kv_lora_rank / sp
    return out


def mla_traffic(mla: MlaShape, s: float, b: float, heads_local: float, qk_head_dim: int,
                sp: int) -> dict[str, tuple[float, float]]:
    """(forward, backward) bytes the MLA-only memory-bound kernels move per microbatch on one GPU
    (``heads_local`` = ``a / t``; :mod:`~partitioner.costs.memory.traffic` adds them to the block's).

    * ``latent_norms`` -- the two latent RMSNorms (read and write 4 B per
      element forward; read input and gradient, write 6 backward) over
      ``s b (r_q + r_kv) / p``;
    * ``mla_rope`` -- Megatron's fused MLA RoPE kernels in place of the
      plain rotary op: forward they read the up-projected query (``a/t
      d_qk``) and key-value (``a/t (d_n + d_v)``) and the shared rotary key
      (``d_r``), and write the query, key (``a/t d_qk`` each) and value
      (``a/t d_v``); backward moves the same gradients the other way.
    """
    d_qk, d_v, d_r = qk_head_dim, mla.v_head_dim, mla.rope_head_dim
    d_n = d_qk - d_r
    norms = s * b * (mla.q_lora_rank + mla.kv_lora_rank) / sp
    rope = BF16 * s * b * (heads_local * (d_qk + (d_n + d_v) + 2 * d_qk + d_v) + d_r)
    return {"latent_norms": (4.0 * norms, 6.0 * norms), "mla_rope": (rope, rope)}


def cp_head_dim(head_dim: int, mla: MlaShape | None) -> float:
    """The per-head width the context-parallel traffic formulas take for K and V (and Q, O): ``head_dim``,
    or with MLA the mean ``(d_qk + d_v) / 2`` (the ring sends every head's ``d_qk`` key and ``d_v`` value)."""
    if mla is None:
        return head_dim
    return (head_dim + mla.v_head_dim) / 2.0
