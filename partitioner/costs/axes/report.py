"""What context parallelism costs and holds in one layer: the terms a plan reports per stage.

Contract: :func:`cp_breakdown` gives, for a pipeline layer on one rank of a
``(dp, tp, cp)`` config with ``samples`` per replica, a
:class:`CpBreakdown`: the attention core's forward and backward ms on the
rank's share (:func:`~..attention.flash.flash_attention_ms` at the chunk's
kernel lengths, or the dense rate), the exposed context-parallel traffic
(the ring step by step, or the all-to-alls / all-gather:
:func:`~.wiring.cp_attention_choice`), the activation bytes the layer keeps
per microbatch at this cp, and the transient KV buffers of the algorithm
(the ring keeps two KV chunks in flight [21], the all-gather one layer's
whole-sequence KV, Ulysses its head-sharded Q, K, V).

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.axes.report``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...presets import ClusterSpec
from ...problem import Layout
from ..entry import piece_time_terms
from ..layers import PipelineLayer
from ..options import CostOptions
from .context import causal_load_factor, kv_bytes, shard_piece, ulysses_bytes
from .wiring import cp_attention_choice, cp_layer_terms, cp_sharded

__all__ = ["CpBreakdown", "cp_breakdown"]


@dataclass(frozen=True)
class CpBreakdown:
    """One layer's context-parallel terms on one rank, per microbatch (ms and bytes); ``algorithm`` is ``""``
    for a layer cp does not split or that has no attention."""

    algorithm: str = ""
    attention_fwd_ms: float = 0.0
    attention_bwd_ms: float = 0.0
    comm_fwd_ms: float = 0.0
    comm_bwd_ms: float = 0.0
    act_bytes: float = 0.0
    buffer_bytes: float = 0.0

    def __add__(self, other: "CpBreakdown") -> "CpBreakdown":
        algos = "+".join(dict.fromkeys(a for a in (self.algorithm, other.algorithm) if a))
        return CpBreakdown(algos, self.attention_fwd_ms + other.attention_fwd_ms,
                           self.attention_bwd_ms + other.attention_bwd_ms, self.comm_fwd_ms + other.comm_fwd_ms,
                           self.comm_bwd_ms + other.comm_bwd_ms, self.act_bytes + other.act_bytes,
                           max(self.buffer_bytes, other.buffer_bytes))


def cp_breakdown(layer: PipelineLayer, layout: Layout, samples: float, recompute: str, cluster: ClusterSpec,
                 opts: CostOptions) -> CpBreakdown:
    """The context-parallel terms of ``layer`` on one rank of ``layout`` (see the module docstring); the layer's
    activations alone (no attention terms) when cp is 1 or does not split it. ``buffer_bytes`` is the largest
    buffer of one attention (the layer's pieces run one after another)."""
    act = cp_layer_terms(layer, layout, samples, recompute, cluster, opts)[3]
    c, t = layout.cp, layout.tp
    if c == 1 or not cp_sharded(layer, opts):
        return CpBreakdown(act_bytes=act)
    out = CpBreakdown(act_bytes=act)
    for p in layer.pieces:
        if p.shape is None:
            continue
        factor = causal_load_factor(c, opts.axes.cp_load_balance, p.tokens / c) if p.mask == "causal" else 1.0
        sharded = shard_piece(p, c, factor)
        terms = piece_time_terms(sharded, t, samples, recompute, cluster, opts)
        algorithm, fwd, bwd = cp_attention_choice(p, sharded, layout, samples, cluster, opts, recompute)
        kv = kv_bytes(p.tokens / c, samples, p.shape.kv_heads, p.shape.head_dim, t)
        if algorithm == "p2p":
            buffer = 2.0 * kv
        elif algorithm == "all_gather":
            buffer = c * kv
        else:
            buffer = ulysses_bytes(c, p.tokens / c, samples, p.shape.heads, p.shape.kv_heads, p.shape.head_dim,
                                   t)[0] * c / (c - 1)
        out = out + CpBreakdown(algorithm, terms["fwd.attention"], terms.get("bwd.attention", 0.0), fwd, bwd, 0.0,
                                buffer)
    return out
