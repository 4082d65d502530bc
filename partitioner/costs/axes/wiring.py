"""A layer's cost entry under a 5D config: the context- and expert-parallel terms put together.

Contract: the problem builder (:mod:`partitioner.costs.build`) asks
:func:`cp_allows` which ``(tp, cp)`` a layer can take and
:func:`cp_layer_terms` for its compute terms on one of the ``dp x tp x cp``
ranks (the ``(fwd, B, W, act)`` of :func:`~partitioner.costs.entry.layer_terms`,
with the context-parallel attention traffic added); it finishes the entry
with :func:`~partitioner.costs.entry.finish_cost` on :func:`sync_layout`
(the dense gradients and the distributed optimizer run over ``dp x cp``
ranks [20]). :func:`moe_ep_cost` is a MoE layer's whole entry under an
expert-parallel split ``(ep, etp)``.

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.axes.wiring``.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from ...cluster.levels import network_GBps
from ...presets import ClusterSpec
from ...problem import Layout
from ..attention.mla import cp_head_dim
from ..comm import allgather_ms, overlapped_ms, shard_gather_ms
from ..compute.flops import efficiency
from ..compute.hardware import comm_sm_fraction
from ..compute.precision import expert_activation_delta, expert_quant_ms, fp8_weight_extra_bytes, weight_cast_ms
from ..entry import EntryCost, finish_cost, layer_terms, piece_time_terms, weight_bytes_per_param, zero3_exposed_ms
from ..layers import Piece, PipelineLayer
from ..memory.recompute import ReplayRates, dense_part_view, expert_recompute, replays_attention
from ..memory.recompute_names import modules_of, replays_experts
from ..memory.traffic import traffic_ms
from ..options import CostOptions
from ..variants import Knobs
from .context import causal_load_factor, cp_algorithms, cp_attention_ms, cp_problem, kv_bytes, shard_piece, ulysses_bytes
from .experts import (
    DispatchTimes,
    allgather_dispatch_times,
    dispatch_times,
    expert_activation_bytes,
    expert_data_parallel,
    expert_grad_sync_ms,
    expert_weight_bytes,
    flex_dedup,
    moe_layer_flops,
    rank_dedup,
    routed_copies,
    tokens_per_rank,
)
from .groups import GroupSpan, group_span
from .moe_kernels import ExpertWork, default_imbalance, expert_gemm_ms, host_sync_ms, permutation_traffic, router_traffic

__all__ = ["LANGUAGE_ROLES", "cp_sharded", "cp_allows", "piece_algorithms", "cp_layer_terms", "cp_attention_choice",
           "sync_layout", "expert_split", "moe_imbalance", "dispatch_collectives", "overlapped_dispatch", "moe_ep_cost",
           "moe_dense_pieces", "network_rate"]

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
    ZeRO's sharding and the optimizer step run over the ``dp x cp`` ranks (stride tp in the rank order) [20]_.

    References
    ----------
    .. [20] NVIDIA Megatron-LM: ``megatron/core/parallel_state.py`` (the
       ``dp_cp`` gradient and distributed-optimizer group), ``megatron/core/
       utils.py`` (``get_batch_on_this_cp_rank``), LLaVA's and MIMO's context
       parallelism on the language model only.
    """
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
                                inter_GBps=network_rate(cluster, span), opts=opts, links=opts.axes.alltoall_links)
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
    """A MoE block piece without its routed experts: attention, router, shared MLP (under tp) [27]_.

    References
    ----------
    .. [27] NVIDIA Megatron-LM ``megatron/core/transformer/moe/``
       (``token_dispatcher.py``, shared experts under the dense tensor-
       parallel group, expert gradients over the expert-data-parallel group).
    """
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


def expert_split(layout: Layout) -> tuple[int, int]:
    """``(ep, etp)`` of a MoE layer's routed experts under ``layout``: the key's with ep > 1; an ep = 1 key
    holds every expert on each rank, each expert's columns split over tp (Megatron's default ETP = TP [27]_).

    References
    ----------
    .. [27] As cited in :func:`_dense_part`.
    """
    return (layout.ep, layout.etp) if layout.ep > 1 else (1, layout.tp)


def moe_imbalance(opts: CostOptions, ep: int, local_experts: int) -> float:
    """The option ``moe_imbalance`` when set, else :func:`~.moe_kernels.default_imbalance`."""
    ax = opts.axes
    return ax.moe_imbalance if ax.moe_imbalance is not None else default_imbalance(ep, local_experts, ax.moe_load_cv)


def dispatch_collectives(piece: Piece, copies: float, tokens: float, ep: int, etp: int, devices: int, cluster: ClusterSpec,
                         opts: CostOptions) -> DispatchTimes:
    """The dispatch and combine transfers of ``piece``'s routed experts on one rank, by the configured dispatcher.

    ``alltoall``: :func:`~.experts.dispatch_times` over the ep group (stride etp in the expert grid) and the
    etp group; ``flex``: the same with the network part cut to one copy per destination node
    (:func:`~.experts.flex_dedup`) and the NVLink part to one per destination rank
    (:func:`~.experts.rank_dedup`); ``allgather``: :func:`~.experts.allgather_dispatch_times` over the
    ``etp x ep`` group. ``copies`` are the busiest rank's routed copies, ``tokens`` its input tokens.
    """
    moe = piece.moe
    assert moe is not None
    ax, gpn = opts.axes, cluster.gpus_per_node
    if ep * etp == 1:
        return DispatchTimes()
    intra = cluster.intra_node_GBps
    if ax.ep_dispatcher == "allgather":
        gather_span = group_span(ep * etp, 1, devices, gpn)
        return allgather_dispatch_times(tokens, piece.width, moe.experts, gather_span,
                                        intra_GBps=intra, inter_GBps=network_rate(cluster, gather_span), opts=opts)
    ep_span = group_span(ep, etp, devices, gpn)
    inter = network_rate(cluster, ep_span)
    flex = ax.ep_dispatcher == "flex"
    dedup = flex_dedup(moe.experts, moe.top_k, ep_span, ax.moe_routing) if flex else ax.ep_dedup
    intra_dedup = rank_dedup(moe.experts, moe.top_k, ep, ax.moe_routing) if flex else 1.0
    return dispatch_times(copies, piece.width, ep, etp, ep_span, group_span(etp, 1, devices, gpn), intra_GBps=intra,
                          inter_GBps=inter, opts=opts, links=ax.alltoall_links, dedup=dedup, probs_bytes=ax.probs_bytes,
                          intra_dedup=intra_dedup)


def overlapped_dispatch(times: DispatchTimes, dense: tuple[float, float], experts: tuple[float, float],
                        microbatches: int, sm_fraction: float) -> tuple[float, float]:
    """``(forward, backward)`` ms the dispatch and combine still cost under Megatron's EP all-to-all overlap.

    ``--overlap-moe-expert-parallel-comm`` merges the forward of one microbatch with the backward of
    another, layer by layer, pairing each transfer with the other pass's independent compute [27]_:
    the backward's combine gradient runs beside the forward's attention, the forward's dispatch beside the
    backward's experts, the backward's dispatch gradient beside the forward's experts, the forward's
    combine beside the backward's attention (``dense`` and ``experts``: the ``(forward, backward)``
    compute of the block's dense part and of its routed experts). Each costs
    :func:`~partitioner.costs.comm.overlapped_ms`. Only steady-state pairs overlap: of ``m``
    microbatches the first forward and the last backward have no partner, ``(m-1)/m`` of the transfers do.

    References
    ----------
    .. [27] As cited in :func:`_dense_part`.
    """
    over_f = overlapped_ms(times.dispatch, experts[1], sm_fraction) + overlapped_ms(times.combine, dense[1], sm_fraction)
    over_b = (overlapped_ms(times.combine_grad, dense[0], sm_fraction)
              + overlapped_ms(times.dispatch_grad, experts[0], sm_fraction))
    paired = (microbatches - 1) / microbatches if microbatches > 0 else 0.0
    return paired * over_f + (1 - paired) * times.fwd, paired * over_b + (1 - paired) * times.bwd


def moe_dense_pieces(layer: PipelineLayer) -> tuple[Piece, ...]:
    """The pieces of a MoE layer without their routed experts, as :func:`moe_ep_cost` costs its dense part."""
    return tuple(dense_part_view(_dense_part(p), p) for p in layer.pieces)


def moe_ep_cost(layer: PipelineLayer, layout: Layout, samples: float, cluster: ClusterSpec, opts: CostOptions,
                microbatches: int, knobs: Knobs, *, nodes: int = 1, dense: Sequence[Piece] | None = None,
                terms: tuple[float, float, float, float] | None = None) -> EntryCost:
    """The entry of a MoE layer under ``layout``, every expert-parallel degree alike (ep = 1 too) [27]_.

    The dense part (attention, router GEMM, shared MLP under tp, norms) is costed as any layer at
    ``(dp, tp, cp)`` (:func:`cp_layer_terms`, :func:`~partitioner.costs.entry.finish_cost` on
    :func:`sync_layout`). The routed experts fold onto the ``dp tp cp`` ranks as ``etp x ep x edp``
    (:func:`expert_split`, :func:`~.experts.expert_data_parallel`); per rank and microbatch:

    * compute: the busiest rank's rows, ``imbalance x k T_r x etp`` dropless (:func:`moe_imbalance`; the
      padded copies with a ``capacity_factor``), over its ``E / ep`` local experts of ``f / etp``
      columns, as grouped GEMMs (:func:`~.moe_kernels.expert_gemm_ms`: forward, input and weight
      gradients, each a roofline of FLOPs and the local experts' weights); full recompute replays the
      forward;
    * memory-bound kernels: token permutation, routed activation function and router
      (:func:`~.moe_kernels.permutation_traffic`, :func:`~.moe_kernels.router_traffic`); the host
      synchronization of a dropless dispatcher (:func:`~.moe_kernels.host_sync_ms`);
    * traffic: the dispatcher's transfers (:func:`dispatch_collectives`) on the links the groups span,
      exposed, or under ``ep_overlap`` what :func:`overlapped_dispatch` leaves; full recompute replays the
      forward's;
    * memory: routed weights / (ep etp), their optimizer states over edp with ZeRO-1 (the distributed
      optimizer), everything over edp with ZeRO-3 (:func:`~.experts.expert_weight_bytes`); the experts'
      stored activations (:func:`~.experts.expert_activation_bytes`, none under full recompute);
    * gradients: the routed gradients all-reduced over edp (:func:`~.experts.expert_grad_sync_ms`, exposed
      as the dense sync, spread over the microbatches; ZeRO-3 gathers and reduce-scatters over edp instead,
      hidden behind the experts' compute as :func:`~partitioner.costs.entry.zero3_exposed_ms` derives, the
      backward's behind the experts' replayed forward too when recompute replays it);
      the optimizer step over the routed parameters the rank owns.

    ``dense`` and ``terms``, when the caller kept them (:class:`~partitioner.costs.ProblemBuilder`: every
    ZeRO knob, ep and etp of one ``(tp, cp, samples, recompute)`` shares them), are
    :func:`moe_dense_pieces` of ``layer`` and their :func:`cp_layer_terms` at this layout.

    References
    ----------
    .. [27] As cited in :func:`_dense_part`.
    """
    ax = opts.axes
    dense = tuple(dense) if dense is not None else moe_dense_pieces(layer)
    dense_layer = replace(layer, pieces=dense)
    if terms is None:
        terms = cp_layer_terms(layer, layout, samples, knobs.recompute, cluster, opts, pieces=dense)
    zero3 = knobs.zero == 3
    # under ZeRO-3 the dense part's gathers and scatters are charged below, together with the experts'
    dense_opts = replace(opts, zero3_overlap=1.0) if zero3 else opts
    base = finish_cost(dense_layer, sync_layout(layout), terms, cluster, dense_opts, microbatches, knobs, nodes=nodes)
    fwd, b_in, b_w = base.fwd_ms, base.bwd_input_ms, base.bwd_weight_ms
    work_f, work_b = terms[0], terms[1] + terms[2]  # the compute ZeRO-3's collectives hide behind (+ the experts')
    gathers = _zero3_dense(dense_layer, layout, cluster, opts) if zero3 else (0.0, 0.0, 0.0)
    weight, act = float(base.weight_bytes), float(base.act_bytes)
    d, t, c = layout.dp, layout.tp, layout.cp
    e, f = expert_split(layout)
    devices, gpn = layout.devices, cluster.gpus_per_node
    edp = expert_data_parallel(d, t, c, e, f)
    edp_span = group_span(edp, e * f, devices, gpn)
    phi = comm_sm_fraction(cluster)
    hbm = cluster.hbm_GBps if opts.memory_bound_ops else None
    for p in layer.pieces:
        moe = p.moe
        if moe is None:
            continue
        local = moe.experts // e
        tokens = tokens_per_rank(samples, p.tokens, t, c)
        copies = routed_copies(tokens, moe.top_k, moe.experts, ax.capacity_factor)
        padded = ax.capacity_factor is not None
        gamma = 1.0 if padded else moe_imbalance(opts, e, local)
        width = moe.moe_ffn / f
        work = ExpertWork(gamma * copies * f, local, p.width, width, moe.gated)
        g_f, g_d, g_w = expert_gemm_ms(work, cluster, opts)
        mem = permutation_traffic(tokens, copies, work.rows, p.width, width, local_experts=local,
                                  exchanged=e * f > 1, gated=moe.gated)
        route = router_traffic(tokens, moe.experts)
        m_f = m_b = 0.0
        if hbm is not None:
            m_f = traffic_ms(mem.fwd + route.fwd, hbm, opts.hbm_efficiency)
            m_b = traffic_ms(mem.bwd + route.bwd, hbm, opts.hbm_efficiency)
        sync = host_sync_ms(opts)
        times = dispatch_collectives(p, gamma * copies, tokens, e, f, devices, cluster, opts)
        comm_f, comm_b = times.fwd, times.bwd
        if ax.ep_overlap and e > 1 and ax.ep_dispatcher != "allgather" and knobs.recompute != "full":
            comm_f, comm_b = overlapped_dispatch(times, (terms[0], terms[1] + terms[2]), (g_f + m_f, g_d + g_w + m_b),
                                                 microbatches, phi)
        n = p.passes
        forward = g_f + m_f + sync
        fwd += n * (forward + comm_f)
        if opts.fp8:  # the FP8 casts of the experts' operands; their fp8 weights, cached once per iteration
            q_f, q_b = expert_quant_ms(work.rows, p.width, moe.moe_ffn, f, moe.gated, p.backward, not p.frozen,
                                       cluster, opts, weights=moe.params / (e * f))
            fwd += n * q_f + weight_cast_ms(moe.params / (e * f), cluster, opts) / microbatches
            if p.backward:
                b_in += n * (q_b + (q_f if replays_experts(knobs.recompute) else 0.0))
                if knobs.recompute != "full" and "moe" not in modules_of(knobs.recompute):
                    delta = expert_activation_delta(work.rows, p.width, moe.moe_ffn, f, opts)
                    if "moe_act" in modules_of(knobs.recompute):  # fc2's input is discarded: no fp8 copy of it
                        delta *= p.width / (p.width + moe.moe_ffn / f)
                    act += n * delta
            weight += moe.params / (e * f) * fp8_weight_extra_bytes(opts, cluster) / (edp if zero3 else 1)
        if p.backward:
            # the stash holds a rank's routed rows of every MoE layer of the stage and every microbatch in flight,
            # each routed afresh: their sum concentrates at the mean load (the busiest rank's excess falls as
            # 1/sqrt of their number), so the stash counts the mean, and the time the busiest rank (gamma)
            stored = n * expert_activation_bytes(copies, p.width, moe.moe_ffn, f, moe.gated, 1.0, padded=padded,
                                                 router_tokens=tokens, experts=moe.experts,
                                                 fused_glu=opts.expert_fused_glu)
            rate = cluster.peak_tflops * 1e9 * efficiency(width, work.rows, opts, cluster, grouped=True)
            rates = ReplayRates(rate, 0.0, 0.0, cluster.hbm_GBps, opts.hbm_efficiency, opts.memory_bound_ops)
            kept, replay = expert_recompute(
                knobs.recompute, stored=stored, copies=n * copies, moe_ffn=moe.moe_ffn, gated=moe.gated,
                activation=p.shape.activation if p.shape is not None else "silu", hidden=p.width, ep=e,
                compute_ms=n * forward, dispatch_ms=n * times.fwd, rates=rates, imbalance=gamma, padded=padded,
                fused_glu=opts.expert_fused_glu)
            b_in += n * (g_d + m_b + comm_b) + replay
            if not p.frozen:
                b_w += n * g_w
            act += kept
            if zero3:  # the replayed expert compute is backward work ZeRO-3's re-gather and reduce-scatter hide behind
                work_b += expert_recompute(
                    knobs.recompute, stored=stored, copies=n * copies, moe_ffn=moe.moe_ffn, gated=moe.gated,
                    activation=p.shape.activation if p.shape is not None else "silu", hidden=p.width, ep=e,
                    compute_ms=n * forward, dispatch_ms=0.0, rates=rates, imbalance=gamma, padded=padded,
                    fused_glu=opts.expert_fused_glu)[1]
        weight += _expert_weight(moe.params, e, f, edp, p.frozen, knobs, opts)
        b_w += _expert_sync_ms(moe.params, e, f, edp_span, p, knobs, cluster, opts) / microbatches
        work_f += n * (g_f + m_f)
        work_b += n * (g_d + g_w + m_b)
        if zero3:
            gather = _edp_gather_ms(moe.params / (e * f), edp_span, cluster, opts)
            scatter = 0.0 if p.frozen else _edp_gather_ms(moe.params / (e * f), edp_span, cluster, opts,
                                                          opts.grad_bytes_per_param)
            gathers = (gathers[0] + gather, gathers[1] + (gather if p.backward else 0.0), gathers[2] + scatter)
    host = opts.axes.moe_host_ms
    if host > 0:  # the host launches the layer's kernels no faster than this (the option moe_host_ms)
        n_all = max((p.passes for p in layer.pieces if p.moe is not None), default=1)
        fwd = max(fwd, n_all * host / 3.0)
        short = n_all * 2.0 * host / 3.0 - (b_in + b_w)
        if short > 0 and any(p.backward for p in layer.pieces):
            b_in += short
    if zero3:
        gather, regather, scatter = gathers
        if opts.zero3_keep_gathered:  # gathered once per iteration; gradients still reduce-scattered per microbatch
            fwd += zero3_exposed_ms(gather, work_f, opts, cluster) / microbatches
            b_w += zero3_exposed_ms(scatter, work_b, opts, cluster)
        else:
            fwd += zero3_exposed_ms(gather, work_f, opts, cluster)
            exposed = zero3_exposed_ms(regather + scatter, work_b, opts, cluster)
            share = regather / (regather + scatter) if regather + scatter > 0 else 0.0
            b_in += share * exposed
            b_w += (1.0 - share) * exposed
    return EntryCost(fwd, b_in + b_w, b_in, b_w, int(math.ceil(weight)), int(math.ceil(act)))


def _zero3_dense(layer: PipelineLayer, layout: Layout, cluster: ClusterSpec, opts: CostOptions) -> tuple[float, float, float]:
    """``(gather, regather, scatter)`` ms of a layer's dense part under ZeRO-3 over the ``dp x cp`` ranks,
    per microbatch (:func:`~partitioner.costs.comm.shard_gather_ms`): the forward's parameter all-gather,
    the backward's re-gather of the pieces that run a backward, the gradients' reduce-scatter."""
    sl = sync_layout(layout)
    trainable = sum(p.params + p.tied_params for p in layer.pieces if not p.frozen)
    return (shard_gather_ms(layer.params, sl, cluster, opts),
            shard_gather_ms(sum(p.params for p in layer.pieces if p.backward), sl, cluster, opts),
            shard_gather_ms(trainable, sl, cluster, opts, opts.grad_bytes_per_param))


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
    GBps, eff = (cluster.intra_node_GBps, opts.nvlink_efficiency) if span.inside_node else (network_rate(cluster, span), 1.0)
    nbytes = params * (opts.param_gather_bytes_per_param if per is None else per)
    return allgather_ms(nbytes, span.ranks, GBps, opts, link_efficiency=eff)  # nbytes: the gathered shard


def _expert_sync_ms(routed: float, e: int, f: int, edp_span: GroupSpan, piece: Piece, knobs: Knobs,
                    cluster: ClusterSpec, opts: CostOptions) -> float:
    """Once per iteration: the routed gradients' sync over edp (exposed part) and the optimizer step over them.

    Under ZeRO-3 the gradients are reduce-scattered every microbatch instead (charged by the caller with
    the layer's other ZeRO-3 collectives): only the optimizer step here.
    """
    if piece.frozen or routed <= 0:
        return 0.0
    if knobs.zero == 3:
        sync = 0.0
    else:
        sync = (1.0 - opts.grad_sync_overlap) * expert_grad_sync_ms(
            routed, e, f, edp_span, intra_GBps=cluster.intra_node_GBps, inter_GBps=network_rate(cluster, edp_span),
            opts=opts)
    step = 0.0
    if opts.memory_bound_ops and cluster.hbm_GBps is not None:
        owned = routed / (e * f) / (edp_span.ranks if knobs.zero else 1)
        step = traffic_ms(owned * opts.optimizer_step_bytes_per_param, cluster.hbm_GBps, opts.hbm_efficiency)
    return sync + step


def network_rate(cluster: ClusterSpec, span: GroupSpan) -> float:
    """The per-GPU network GB/s of a group across the nodes ``span`` holds members in: the NIC, capped on a
    cluster with network levels by every level a run of that many nodes spans (DESIGN.md "Network levels")."""
    return network_GBps(cluster.levels, cluster.inter_node_GBps, cluster.gpus_per_node,
                        span.nodes * cluster.gpus_per_node)
