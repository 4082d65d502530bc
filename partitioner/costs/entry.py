"""One cost entry: the time and memory of a pipeline layer in one layout.

Contract: :func:`layer_cost` gives, for a :class:`~.layers.PipelineLayer`
on each GPU of a (dp, tp) stage with ``samples`` samples per replica and
microbatch, the forward and backward ms (FLOPs over the efficient rate plus
tensor-parallel collectives; backward 2x the weighted matmuls, the
attention core ``flash_backward_factor`` x, recompute on top, the exposed
part of the gradient sync spread over the microbatches) and the weight and
activation bytes (format v1's ``fwd_ms, bwd_ms, weight_bytes, act_bytes``).

References
----------
.. [2] V. Korthikanti et al., "Reducing Activation Recomputation in Large
   Transformer Models", MLSys 2023, arXiv:2205.05198, Sections 4-5.
.. [4] S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
   Trillion Parameter Models", SC 2020 (2 + 2 + 12 bytes per parameter).
.. [5] T. Dao, "FlashAttention-2", arXiv:2307.08691 (2023).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..presets import ClusterSpec
from ..problem import Layout
from .comm import allreduce_ms, grad_sync_ms
from .flops import efficiency
from .layers import PipelineLayer
from .memory import block_activation_bytes
from .options import BF16_BYTES, CostOptions

__all__ = ["layer_cost"]


@dataclass(frozen=True)
class _Cost:
    fwd_ms: float
    bwd_ms: float
    weight_bytes: int
    act_bytes: int


def layer_cost(layer: PipelineLayer, layout: Layout, samples: float, cluster: ClusterSpec, opts: CostOptions,
               microbatches: int = 1) -> _Cost:
    """Time and memory of ``layer`` per microbatch on each GPU of a ``layout`` stage.

    ``samples`` is the per-replica microbatch ``(global_batch / m) / dp``;
    ``microbatches`` (m) spreads the per-iteration gradient sync.
    """
    t, dp, b = layout.tp, layout.dp, samples
    flop_per_ms = cluster.peak_tflops * 1e9
    fwd = bwd = 0.0
    weight = act = 0.0
    for p in layer.pieces:
        rows = b * p.tokens * p.passes
        rate = flop_per_ms * efficiency(p.width / t, rows, opts)
        f_gemm = b * p.gemm_flops / t / rate
        f_attn = b * p.attn_flops / t / rate
        comm = p.allreduces * allreduce_ms(rows * p.width * BF16_BYTES, t, cluster.intra_node_GBps, opts)
        fwd += f_gemm + f_attn + comm
        if p.backward:
            attn_factor = opts.flash_backward_factor if opts.flash_attention else 2.0
            bwd += (1.0 if p.frozen else 2.0) * f_gemm + attn_factor * f_attn + comm
            if opts.recompute == "full":
                bwd += f_gemm + f_attn + comm
            elif opts.recompute == "selective" and not opts.flash_attention:
                bwd += f_attn
        if p.frozen:
            weight += p.params * opts.frozen_bytes_per_param / t
        else:
            per_param = opts.bytes_per_param
            if opts.zero1:
                per_param -= opts.optimizer_bytes_per_param * (1.0 - 1.0 / dp)
            weight += p.params * per_param / t
        if not p.backward:
            continue  # runs under no_grad: nothing kept for a backward pass
        if p.kind == "block":
            act += p.passes * block_activation_bytes(
                p.tokens, b, p.width, p.heads, t, pairs=p.score_entries, flash_attention=opts.flash_attention,
                sequence_parallel=opts.sequence_parallel, recompute=opts.recompute,
            )
        else:
            replicated, sharded = p.dense_act
            act += b * (replicated / (t if opts.sequence_parallel else 1) + sharded / t)
    trainable = sum(p.params for p in layer.pieces if not p.frozen)
    bwd += (1.0 - opts.grad_sync_overlap) * grad_sync_ms(trainable, layout, cluster, opts) / microbatches
    return _Cost(fwd, bwd, int(math.ceil(weight)), int(math.ceil(act)))

