"""FLOPs from matmul shapes, and the fraction of peak a GEMM reaches.

Contract: per-sample forward FLOPs of a transformer block's weighted
matmuls (:func:`block_gemm_flops`) and of its attention core
(:func:`attn_flops`), 2 FLOPs per multiply-add [1]; the summaries
:func:`forward_flops` and :func:`model_flops_per_sample` (model FLOPs
[8]) over pipeline layers; :func:`efficiency`, the fraction of the dense
peak a GEMM of a given per-GPU width and row count reaches [6].

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.compute.flops``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ...presets import ClusterSpec, ModuleSpec, is_cross_layer, is_moe_layer
from ..attention.mla import mla_attn_flops, mla_gemms
from ..options import CostOptions
from .hardware import balance_scale, efficiency_max

if TYPE_CHECKING:
    from ..layers import PipelineLayer

__all__ = ["block_gemm_flops", "attn_flops", "efficiency", "forward_flops", "model_flops_per_sample"]


def block_gemm_flops(spec: ModuleSpec, tokens: float, i: int | None = None) -> float:
    """Forward FLOPs of block ``i``'s weighted matmuls over ``tokens`` tokens per sample (``None``: a dense block).

    A MoE layer (its active computation, whatever the expert-parallel
    split: :mod:`~partitioner.costs.axes.experts` divides it among ranks) runs the router (``hidden x experts``), ``top_k`` routed
    experts of width ``moe_ffn`` and the shared MLP per token, as Megatron's
    ``moe_layer_flops`` counts them plus the router (group-limited routing
    adds only per-token selection work over the ``experts`` scores, no
    matmul). A multi-head latent attention block runs its down-, up- and
    output projections (:func:`~partitioner.costs.attention.mla.mla_gemms`). A cross-attention layer
    (mllama) projects queries and outputs over the text tokens and keys and
    values over the ``cross_tokens`` vision states.
    """
    h = spec.hidden
    n_mlp = 3 if spec.gated else 2
    if i is not None and is_moe_layer(spec, i):
        mlp = h * spec.experts + spec.top_k * n_mlp * h * spec.moe_ffn + n_mlp * h * spec.shared_ffn
    else:
        mlp = n_mlp * h * spec.ffn
    if i is not None and is_cross_layer(spec, i):
        return 2.0 * tokens * (2 * h * spec.attn_dim + mlp) + 2.0 * spec.cross_tokens * h * 2 * spec.kv_dim
    if spec.mla:  # multi-head latent attention: down-, up- and output projections (.attention_mla)
        return 2.0 * tokens * (mla_gemms(spec).total + mlp)
    per_token = h * (spec.attn_dim + 2 * spec.kv_dim) + spec.attn_dim * h + mlp
    return 2.0 * tokens * per_token


def attn_flops(spec: ModuleSpec, pairs: float) -> float:
    """FLOPs of the attention core over ``pairs`` query-key pairs (MLA: :func:`~partitioner.costs.attention.mla.mla_attn_flops`)."""
    if spec.mla:
        return mla_attn_flops(spec, pairs)
    # QK^T and AV: 2 matmuls, each 2 * head_dim FLOPs per query-key pair per head
    return 4.0 * spec.heads * spec.d_head * pairs



def efficiency(width: float, tokens: float, opts: CostOptions, cluster: ClusterSpec | None = None,
               grouped: bool = False) -> float:
    """Fraction of peak a GEMM of per-GPU ``width`` over ``tokens`` rows reaches on ``cluster``'s GPUs.

    ``efficiency_max`` (the option, else the cluster's GPU generation's
    dense ceiling, or with ``grouped`` its ceiling for the routed experts'
    grouped GEMMs: :func:`~.hardware.efficiency_max`) times two Hill factors that fall for
    narrow and short GEMMs [6]_ at ``gemm_half_width`` and
    ``gemm_half_tokens`` (set on the A100 80GB); for the routed experts'
    grouped GEMMs (``grouped``) those half points scale by the GPU's ops:byte
    ratio over the A100's (:func:`~.hardware.balance_scale`): an expert's
    GEMM is short in rows and columns at once, and a GPU with more FLOP/s per
    byte of HBM needs longer sides to leave the memory-bound regime.

    References
    ----------
    .. [6] NVIDIA, "Matrix Multiplication Background User's Guide", Deep
       Learning Performance documentation (tile and wave quantization).
    """
    k = opts.efficiency_exponent
    scale = balance_scale(cluster) if grouped else 1.0

    def hill(x: float, half: float) -> float:
        return 1.0 if half <= 0 else x**k / (x**k + half**k)

    return efficiency_max(opts, cluster, grouped) * hill(width, scale * opts.gemm_half_width) * hill(tokens, scale * opts.gemm_half_tokens)



def forward_flops(layers: Iterable[PipelineLayer]) -> float:
    """Forward FLOPs per sample of the given layers (weighted matmuls plus attention core)."""
    return sum(p.gemm_flops + p.attn_flops for layer in layers for p in layer.pieces)


def model_flops_per_sample(layers: Iterable[PipelineLayer]) -> float:
    """FLOPs one sample needs for forward and backward, without recomputation (model FLOPs [8]_).

    Forward, plus for pieces that run a backward: the input gradients of
    the matmuls the backward runs through (less the first trainable
    piece's input matmul, whose input needs no gradient), their weight
    gradients when trainable, and twice the attention core. A trainable
    piece is 3 x its forward, a frozen one passing gradients through 2 x
    (+ its attention core), a frozen prefix 1 x.

    References
    ----------
    .. [8] A. Chowdhery et al., "PaLM", arXiv:2204.02311 (2022), Appendix B:
       model FLOPs utilization.
    """
    total = 0.0
    for layer in layers:
        for p in layer.pieces:
            total += p.gemm_flops + p.attn_flops
            if not p.backward:
                continue
            g = p.gemm_flops if p.bwd_gemm_flops is None else p.bwd_gemm_flops
            a = p.attn_flops if p.bwd_attn_flops is None else p.bwd_attn_flops
            total += g - (0.0 if p.needs_input_grad else p.input_gemm_flops) + 2.0 * a
            if not p.frozen:
                total += g
    return total
