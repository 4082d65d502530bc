"""FLOPs from matmul shapes, and the fraction of peak a GEMM reaches.

Contract: per-sample forward FLOPs of a transformer block's weighted
matmuls (:func:`block_gemm_flops`) and of its attention core
(:func:`attn_flops`), 2 FLOPs per multiply-add [1]_; the summaries
:func:`forward_flops` and :func:`model_flops_per_sample` (model FLOPs
[8]_) over pipeline layers; :func:`efficiency`, the fraction of the dense
peak a GEMM of a given per-GPU width and row count reaches [6]_.

References
----------
.. [1] J. Kaplan et al., "Scaling Laws for Neural Language Models",
   arXiv:2001.08361 (2020), Table 1: C_forward = 2N + 2 n_layer n_ctx d_attn.
.. [6] NVIDIA, "Matrix Multiplication Background User's Guide", Deep
   Learning Performance documentation (tile and wave quantization).
.. [8] A. Chowdhery et al., "PaLM", arXiv:2204.02311 (2022), Appendix B:
   model FLOPs utilization.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..presets import ModuleSpec
from .options import CostOptions

if TYPE_CHECKING:
    from .layers import PipelineLayer

__all__ = ["block_gemm_flops", "attn_flops", "efficiency", "forward_flops", "model_flops_per_sample"]


def block_gemm_flops(spec: ModuleSpec, tokens: int) -> float:
    h = spec.hidden
    per_token = h * (spec.attn_dim + 2 * spec.kv_dim) + spec.attn_dim * h + (3 if spec.gated else 2) * h * spec.ffn
    return 2.0 * tokens * per_token


def attn_flops(spec: ModuleSpec, pairs: float) -> float:
    # QK^T and AV: 2 matmuls, each 2 * head_dim FLOPs per query-key pair per head
    return 4.0 * spec.heads * spec.d_head * pairs



def efficiency(width: float, tokens: float, opts: CostOptions) -> float:
    """Fraction of peak a GEMM of per-GPU ``width`` over ``tokens`` rows reaches."""
    k = opts.efficiency_exponent

    def hill(x: float, half: float) -> float:
        return 1.0 if half <= 0 else x**k / (x**k + half**k)

    return opts.efficiency_max * hill(width, opts.gemm_half_width) * hill(tokens, opts.gemm_half_tokens)



def forward_flops(layers: Iterable[PipelineLayer]) -> float:
    """Forward FLOPs per sample of the given layers (weighted matmuls plus attention core)."""
    return sum(p.gemm_flops + p.attn_flops for layer in layers for p in layer.pieces)


def model_flops_per_sample(layers: Iterable[PipelineLayer]) -> float:
    """FLOPs one sample needs for forward and backward, without recomputation (model FLOPs [8]_).

    3 x forward for trainable pieces, 2 x for frozen pieces that pass
    gradients through (input gradients only), 1 x for a frozen prefix.
    """
    total = 0.0
    for layer in layers:
        for p in layer.pieces:
            f = p.gemm_flops + p.attn_flops
            if not p.backward:
                total += f
            elif p.frozen:
                total += 2.0 * f + p.attn_flops  # attention core still needs both its matmuls' gradients
            else:
                total += 3.0 * f
    return total

