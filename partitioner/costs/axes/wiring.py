"""A layer's cost entry under a 5D config: the context- and expert-parallel terms put together.

Contract: the problem builder (:mod:`partitioner.costs.build`) asks
:func:`cp_allows` which ``(tp, cp)`` a layer can take and
:func:`cp_layer_terms` for its compute terms on one of the ``dp x tp x cp``
ranks (the ``(fwd, B, W, act)`` of :func:`~partitioner.costs.entry.layer_terms`,
with the context-parallel attention traffic added); it finishes the entry
with :func:`~partitioner.costs.entry.finish_cost` on :func:`sync_layout`
(the dense gradients and the distributed optimizer run over ``dp x cp``
ranks [20]_). :func:`moe_ep_cost` is a MoE layer's whole entry under an
expert-parallel split ``(ep, etp)``.

Which layers cp splits (:func:`cp_sharded`): the language model's layers
(embedding, decoder blocks, LM head): their tokens, matmuls, activations
and logits / cp, the attention core x the causal load factor / cp
(:func:`~.context.shard_piece`), plus the chosen algorithm's exposed
traffic (:func:`~.context.cp_attention_ms`). Vision-encoder, projector and
action-head layers are not split unless ``cp_vision`` (Megatron-LM shards
only the language model's sequence [20]_): under a cp > 1 config each of
the cp ranks of a data-parallel replica runs the replica's whole vision
work -- the time and activations of the ``(dp, tp)`` entry with the same
samples per replica, the same weights -- and their gradients are synced
over ``dp x cp`` like every dense gradient. Such entries exist so that a
stage holding vision and language layers can run cp > 1.

References
----------
.. [20] NVIDIA Megatron-LM: ``megatron/core/parallel_state.py`` (the
   ``dp_cp`` gradient and distributed-optimizer group), ``megatron/core/
   utils.py`` (``get_batch_on_this_cp_rank``), LLaVA's and MIMO's context
   parallelism on the language model only.
.. [27] NVIDIA Megatron-LM ``megatron/core/transformer/moe/``
   (``token_dispatcher.py``, shared experts under the dense tensor-
   parallel group, expert gradients over the expert-data-parallel group).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from ...presets import ClusterSpec
from ...problem import Layout
from ..attention_mla import cp_head_dim
from ..comm import allgather_ms
from ..entry import EntryCost, finish_cost, layer_terms, piece_time_terms, weight_bytes_per_param
from ..flops import efficiency
from ..layers import Piece, PipelineLayer
from ..options import CostOptions
from ..precision import expert_activation_delta, expert_quant_ms, fp8_rate, fp8_weight_extra_bytes, weight_cast_ms
from ..recompute import ReplayRates, dense_part_view, expert_recompute, replays_attention
from ..recompute_names import modules_of, replays_experts
from ..traffic import traffic_ms
from ..variants import Knobs
from .context import causal_load_factor, cp_algorithms, cp_attention_ms, cp_problem, kv_bytes, shard_piece, ulysses_bytes
from .experts import (
    expert_activation_bytes,
    expert_data_parallel,
    expert_gemm_shape,
    expert_grad_sync_ms,
    expert_rank_flops,
    expert_weight_bytes,
    moe_comm_ms,
    moe_layer_flops,
    routed_copies,
    tokens_per_rank,
)
from .groups import GroupSpan, group_span

__all__ = ["LANGUAGE_ROLES", "cp_sharded", "cp_allows", "piece_algorithms", "cp_layer_terms", "cp_attention_choice",
           "sync_layout",
           "moe_ep_cost"]

LANGUAGE_ROLES = ("embedding", "decoder", "mtp", "loss")  # mtp: multi-token prediction modules (Megatron splits them too)


def cp_sharded(layer: PipelineLayer, opts: CostOptions) -> bool:
    """Whether cp splits ``layer``'s sequence: a language-model layer, or a vision/projector one with ``cp_vision``."""
    return layer.role in LANGUAGE_ROLES or (opts.axes.cp_vision and layer.role in ("vision", "projector"))


def _whole(x: float) -> int | None:
    return int(x) if float(x).is_integer() else None


def piece_algorithms(piece: Piece, cp: int, tp: int, opts: CostOptions) -> tuple[str, ...]:
    """The context-parallel algorithms ``piece`` can run at ``(tp, cp)`` (:func:`~.context.cp_algorithms`,
    :func:`~.context.cp_problem`); a dense piece (no attention) needs only its sequence split into chunks."""
    tokens = _whole(piece.tokens)
    if tokens is None:
        return ()
    balanced = opts.axes.cp_load_balance
    if piece.shape is None:
        return ("none",) if cp_problem(cp, tokens, 1, 1, 1, "p2p", balanced=balanced) is None else ()
    shape = piece.shape
    return tuple(a for a in cp_algorithms(windowed=piece.mask == "window", cross=piece.mask == "cross",
                                          mla=shape.mla is not None)
                 if cp_problem(cp, tokens, shape.heads, shape.kv_heads, tp, a, balanced=balanced) is None)


def cp_allows(layer: PipelineLayer, tp: int, cp: int, opts: CostOptions) -> bool:
    """Whether ``layer`` has an entry at ``(tp, cp)``: always at cp 1 and when cp does not split it (replicated);
    else every piece's sequence splits into ``2 cp`` chunks and every attention runs some algorithm."""
    if cp == 1 or not cp_sharded(layer, opts):
        return True
    return all(piece_algorithms(p, cp, tp, opts) for p in layer.pieces)


def sync_layout(layout: Layout) -> Layout:
    """The ``(dp x cp, tp)`` layout whose data-parallel terms a cp config pays: the dense gradient all-reduce,
    ZeRO's sharding and the optimizer step run over the ``dp x cp`` ranks (stride tp in the rank order) [20]_."""
    return Layout(layout.dp * layout.cp, layout.tp, layout.variant)


def _attention_ms(piece: Piece, sharded: Piece, layout: Layout, samples: float, cluster: ClusterSpec,
                  opts: CostOptions, recompute: str) -> tuple[float, float]:
    """Exposed ``(fwd, bwd)`` ms of one attention piece's context-parallel traffic, the configured algorithm
    when the piece can run it, else the fastest it can."""
    _, fwd, bwd = cp_attention_choice(piece, sharded, layout, samples, cluster, opts, recompute)
    return fwd, bwd


def cp_attention_choice(piece: Piece, sharded: Piece, layout: Layout, samples: float, cluster: ClusterSpec,
                        opts: CostOptions, recompute: str) -> tuple[str, float, float]:
    """``(algorithm, fwd, bwd)``: :func:`_attention_ms` and the algorithm it costs."""
    t, c = layout.tp, layout.cp
    shape = piece.shape
    assert shape is not None
    chunk = piece.tokens / c
    terms = piece_time_terms(sharded, t, samples, recompute, cluster, opts)
    d = cp_head_dim(shape.head_dim, shape.mla)  # MLA: keys of d_qk and values of v_head_dim per head
    kv = kv_bytes(chunk, samples, shape.kv_heads, d, t)
    uly = ulysses_bytes(c, chunk, samples, shape.heads, shape.kv_heads, d, t)
    span = group_span(c, t, layout.devices, cluster.gpus_per_node)
    times = {a: cp_attention_ms(a, c, span, kv=kv, ulysses=uly, attn_fwd_ms=terms["fwd.attention"],
                                attn_bwd_ms=terms.get("bwd.attention", 0.0), intra_GBps=cluster.intra_node_GBps,
                                inter_GBps=cluster.inter_node_GBps, opts=opts, links=opts.axes.alltoall_links)
             for a in piece_algorithms(piece, c, t, opts)}
    chosen = opts.axes.cp_algorithm
    if chosen not in times:
        chosen = min(times, key=lambda a: sum(times[a]))
    fwd, bwd = times[chosen]
    if not piece.backward:
        bwd = 0.0
    return chosen, piece.passes * fwd, piece.passes * bwd


def cp_layer_terms(layer: PipelineLayer, layout: Layout, samples: float, recompute: str, cluster: ClusterSpec,
                   opts: CostOptions, pieces: Sequence[Piece] | None = None) -> tuple[float, float, float, float]:
    """``(fwd, B, W, act)`` of ``layer`` on one rank of a ``(dp, tp, cp)`` config with ``samples`` per replica.

    cp 1, or a layer cp does not split: :func:`~partitioner.costs.entry.layer_terms` (each cp rank repeats
    its replica's work). Otherwise each piece on its sequence share (:func:`~.context.shard_piece`, causal
    attention x :func:`~.context.causal_load_factor`) plus each attention's exposed context-parallel
    traffic, forward and backward (full recompute replays the forward's). ``pieces`` replaces the layer's
    (the dense part of a MoE layer).
    """
    own = tuple(layer.pieces if pieces is None else pieces)
    c, t = layout.cp, layout.tp
    if c == 1 or not cp_sharded(layer, opts):
        return layer_terms(own, t, samples, recompute, cluster, opts)
    sharded = []
    for p in own:
        factor = causal_load_factor(c, opts.axes.cp_load_balance, p.tokens / c) if p.mask == "causal" else 1.0
        sharded.append(shard_piece(p, c, factor))
    fwd, b_in, b_w, act = layer_terms(sharded, t, samples, recompute, cluster, opts)
    for p, s in zip(own, sharded):
        if p.shape is None:
            continue
        f, b = _attention_ms(p, s, layout, samples, cluster, opts, recompute)
        fwd += f
        b_in += b + (f if replays_attention(recompute) and p.backward else 0.0)
    return fwd, b_in, b_w, act


def _dense_part(piece: Piece) -> Piece:
    """A MoE block piece without its routed experts: attention, router, shared MLP (under tp) [27]_."""
    moe = piece.moe
    if moe is None:
        return piece
    routed = piece.passes * moe_layer_flops(piece.tokens, piece.width, moe.moe_ffn, moe.top_k, 0, moe.gated)
    shape = piece.shape
    return replace(
        piece, gemm_flops=piece.gemm_flops - routed, params=piece.params - moe.params,
        allreduces=2 if moe.shared_ffn else 1,  # the MLP's collective only with a shared MLP under tp
        shape=replace(shape, ffn=moe.shared_ffn) if shape is not None else None, moe=None,
        bwd_gemm_flops=None if piece.bwd_gemm_flops is None else piece.bwd_gemm_flops - routed,
    )


def moe_ep_cost(layer: PipelineLayer, layout: Layout, samples: float, cluster: ClusterSpec, opts: CostOptions,
                microbatches: int, knobs: Knobs, *, nodes: int = 1) -> EntryCost:
    """The entry of a MoE layer under ``layout`` with ``ep > 1`` (``etp`` >= 1) [27]_.

    The dense part (attention, router, shared MLP under tp, norms) is costed as any layer at ``(dp, tp, cp)``
    (:func:`cp_layer_terms`, :func:`~partitioner.costs.entry.finish_cost` on :func:`sync_layout`). The
    routed experts fold onto the ``dp tp cp`` ranks as ``etp x ep x edp``
    (:func:`~.experts.expert_data_parallel`), per rank and microbatch:

    * compute: the busiest rank's routed FLOPs (:func:`~.experts.expert_rank_flops`, x ``moe_imbalance``;
      with a ``capacity_factor`` the padded copies instead), at the efficiency of one local expert's GEMM
      (:func:`~.experts.expert_gemm_shape`); backward 2x (input and weight gradients), full recompute once more;
    * traffic: dispatch and combine all-to-alls over the ep group (stride etp in the expert grid), and
      with etp > 1 the all-gather / reduce-scatter over the etp group (:func:`~.experts.moe_comm_ms`),
      on the links the groups span (:func:`~.groups.group_span`); full recompute replays the forward's;
    * memory: routed weights / (ep etp), their optimizer states over edp with ZeRO-1 (the distributed
      optimizer), everything over edp with ZeRO-3 (:func:`~.experts.expert_weight_bytes`); the experts'
      stored activations (:func:`~.experts.expert_activation_bytes`, none under full recompute);
    * gradients: the routed gradients all-reduced over edp (:func:`~.experts.expert_grad_sync_ms`, exposed
      as the dense sync, spread over the microbatches; ZeRO-3 gathers and reduce-scatters over edp instead);
      the optimizer step over the routed parameters the rank owns.
    """
    ax = opts.axes
    dense = tuple(dense_part_view(_dense_part(p), p) for p in layer.pieces)
    dense_layer = replace(layer, pieces=dense)
    terms = cp_layer_terms(layer, layout, samples, knobs.recompute, cluster, opts, pieces=dense)
    base = finish_cost(dense_layer, sync_layout(layout), terms, cluster, opts, microbatches, knobs, nodes=nodes)
    fwd, b_in, b_w = base.fwd_ms, base.bwd_input_ms, base.bwd_weight_ms
    weight, act = float(base.weight_bytes), float(base.act_bytes)
    d, t, c, e, f = layout.dp, layout.tp, layout.cp, layout.ep, layout.etp
    devices, gpn = layout.devices, cluster.gpus_per_node
    edp = expert_data_parallel(d, t, c, e, f)
    ep_span = group_span(e, f, devices, gpn)
    etp_span = group_span(f, 1, devices, gpn)
    edp_span = group_span(edp, e * f, devices, gpn)
    intra, inter = cluster.intra_node_GBps, cluster.inter_node_GBps
    for p in layer.pieces:
        moe = p.moe
        if moe is None:
            continue
        tokens = tokens_per_rank(samples, p.tokens, t, c)
        copies = routed_copies(tokens, moe.top_k, moe.experts, ax.capacity_factor)
        if ax.capacity_factor is None:
            flops = expert_rank_flops(tokens, p.width, moe.moe_ffn, moe.top_k, moe.gated, ax.moe_imbalance)
        else:  # every expert's buffer padded to its capacity: the padded copies run, whatever the routing
            flops = moe_layer_flops(copies / moe.top_k, p.width, moe.moe_ffn, moe.top_k, 0, moe.gated)
        rows, width = expert_gemm_shape(tokens, moe.top_k, moe.experts, e, f, moe.moe_ffn)
        rate = cluster.peak_tflops * 1e9 * efficiency(width, rows, opts)
        if opts.fp8:  # the experts' grouped GEMMs in FP8 (.precision)
            rate = fp8_rate(rate, cluster, opts)
        compute = p.passes * flops / rate
        comm_f, comm_b = moe_comm_ms(copies, p.width, e, f, ep_span, etp_span, intra_GBps=intra, inter_GBps=inter,
                                     opts=opts, links=ax.alltoall_links, dedup=ax.ep_dedup,
                                     probs_bytes=ax.probs_bytes, overlap=ax.ep_overlap)
        comm_f, comm_b = p.passes * comm_f, p.passes * comm_b
        fwd += compute + comm_f
        if opts.fp8:  # the FP8 casts of the experts' operands; their fp8 weights, cached once per iteration
            # the busiest rank's token copies after the expert-tensor all-gather (as expert_activation_bytes)
            gathered = f * (copies if ax.capacity_factor is not None else ax.moe_imbalance * copies)
            q_f, q_b = expert_quant_ms(gathered, p.width, moe.moe_ffn, f, moe.gated, p.backward, not p.frozen,
                                       cluster, opts, weights=moe.params / (e * f))
            fwd += p.passes * q_f + weight_cast_ms(moe.params / (e * f), cluster, opts) / microbatches
            if p.backward:
                b_in += p.passes * (q_b + (q_f if replays_experts(knobs.recompute) else 0.0))
                if knobs.recompute != "full" and "moe" not in modules_of(knobs.recompute):
                    delta = expert_activation_delta(gathered, p.width, moe.moe_ffn, f, opts)
                    if "moe_act" in modules_of(knobs.recompute):  # fc2's input is discarded: no fp8 copy of it
                        delta *= p.width / (p.width + moe.moe_ffn / f)
                    act += p.passes * delta
            weight += moe.params / (e * f) * fp8_weight_extra_bytes(opts, cluster) / (edp if knobs.zero == 3 else 1)
        if p.backward:
            stored = p.passes * expert_activation_bytes(copies, p.width, moe.moe_ffn, f, moe.gated, ax.moe_imbalance,
                                                        padded=ax.capacity_factor is not None,
                                                        router_tokens=tokens, experts=moe.experts)
            rates = ReplayRates(rate, 0.0, 0.0, cluster.hbm_GBps, opts.hbm_efficiency, opts.memory_bound_ops)
            kept, replay = expert_recompute(
                knobs.recompute, stored=stored, copies=p.passes * copies, moe_ffn=moe.moe_ffn, gated=moe.gated,
                activation=p.shape.activation if p.shape is not None else "silu", hidden=p.width, ep=e,
                compute_ms=compute, dispatch_ms=comm_f, rates=rates, imbalance=ax.moe_imbalance,
                padded=ax.capacity_factor is not None)
            b_in += compute + comm_b + replay
            if not p.frozen:
                b_w += compute
            act += kept
        weight += _expert_weight(moe.params, e, f, edp, p.frozen, knobs, opts)
        b_w += _expert_sync_ms(moe.params, layout, edp_span, p, knobs, cluster, opts) / microbatches
        if knobs.zero == 3:
            gather = (1.0 - opts.zero3_overlap) * _edp_gather_ms(moe.params / (e * f), edp_span, cluster, opts)
            fwd += gather / microbatches if opts.zero3_keep_gathered else gather
            if not opts.zero3_keep_gathered and p.backward:
                b_in += gather
    return EntryCost(fwd, b_in + b_w, b_in, b_w, int(math.ceil(weight)), int(math.ceil(act)))


def _expert_weight(routed: float, ep: int, etp: int, edp: int, frozen: bool, knobs: Knobs, opts: CostOptions) -> float:
    """Bytes of the routed experts on one rank under the entry's ZeRO knob."""
    if knobs.zero == 3:
        return routed / (ep * etp) * weight_bytes_per_param(frozen, edp, knobs, opts)
    return expert_weight_bytes(routed, ep, etp, edp, bytes_per_param=opts.bytes_per_param,
                               optimizer_bytes_per_param=opts.optimizer_bytes_per_param,
                               distributed_optimizer=knobs.zero == 1, frozen_bytes_per_param=opts.frozen_bytes_per_param,
                               frozen=frozen)


def _edp_gather_ms(params: float, span: GroupSpan, cluster: ClusterSpec, opts: CostOptions, per: float | None = None) -> float:
    """One all-gather of ``params`` (a rank's expert shard) over the edp group (ZeRO-3), in ms."""
    if span.ranks <= 1 or params <= 0:
        return 0.0
    GBps, eff = (cluster.intra_node_GBps, opts.nvlink_efficiency) if span.inside_node else (cluster.inter_node_GBps, 1.0)
    nbytes = params * (opts.param_gather_bytes_per_param if per is None else per)
    return allgather_ms(nbytes, span.ranks, GBps, opts, link_efficiency=eff)  # nbytes: the gathered shard


def _expert_sync_ms(routed: float, layout: Layout, edp_span: GroupSpan, piece: Piece, knobs: Knobs, cluster: ClusterSpec,
                    opts: CostOptions) -> float:
    """Once per iteration: the routed gradients' sync over edp (exposed part) and the optimizer step over them."""
    if piece.frozen or routed <= 0:
        return 0.0
    e, f = layout.ep, layout.etp
    if knobs.zero == 3:
        sync = (1.0 - opts.zero3_overlap) * _edp_gather_ms(routed / (e * f), edp_span, cluster, opts,
                                                           opts.grad_bytes_per_param)
    else:
        sync = (1.0 - opts.grad_sync_overlap) * expert_grad_sync_ms(
            routed, e, f, edp_span, intra_GBps=cluster.intra_node_GBps, inter_GBps=cluster.inter_node_GBps, opts=opts)
    step = 0.0
    if opts.memory_bound_ops and cluster.hbm_GBps is not None:
        owned = routed / (e * f) / (edp_span.ranks if knobs.zero else 1)
        step = traffic_ms(owned * opts.optimizer_step_bytes_per_param, cluster.hbm_GBps, opts.hbm_efficiency)
    return sync + step
