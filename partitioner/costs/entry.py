"""One cost entry: the time and memory of a pipeline layer in one layout.

Contract: :func:`layer_cost` gives, for a :class:`~.layers.PipelineLayer`
on each GPU of a (dp, tp) stage with ``samples`` samples per replica and
microbatch, the forward and backward ms (FLOPs over the efficient rate plus
tensor-parallel collectives; backward 2x the weighted matmuls, the
attention core ``flash_backward_factor`` x, recompute on top, the exposed
part of the gradient sync spread over the microbatches) and the weight and
activation bytes (format v1's ``fwd_ms, bwd_ms, weight_bytes, act_bytes``,
and v2's ``bwd_input_ms, bwd_weight_ms``) under one memory-knob setting
(:class:`~.variants.Knobs`: ZeRO 0/1/3, recompute none/selective/full).

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.entry``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ..cluster.levels import network_GBps
from ..presets import ClusterSpec
from ..problem import Layout, ProblemError
from .attention.flash import flash_attention_ms
from .attention.mla import replicated_grad_sync_ms
from .comm import allreduce_ms, grad_sync_ms, overlapped_ms, shard_gather_ms
from .compute.flops import efficiency
from .compute.hardware import comm_sm_fraction
from .compute.precision import (
    amax_reduce_ms,
    block_quant_bytes,
    fp8_activation_delta,
    fp8_piece,
    fp8_weight_extra_bytes,
    fp8_weight_params,
    gemm_rate,
    recipe_of,
    tp_comm_element_bytes,
    weight_cast_ms,
)
from .layers import Piece, PipelineLayer
from .memory.activations import block_activation_bytes, block_activation_terms
from .memory.recompute import OP, ReplayRates, fp8_freed_delta, kept_terms, modules_of, op_kept_bytes, op_replay_ms, replay_ms
from .memory.tied import embedding_sync_ms, tied_copy_bytes
from .memory.traffic import block_traffic, embedding_traffic, head_traffic, projector_traffic, traffic_ms
from .options import CostOptions
from .variants import Knobs

__all__ = ["EntryCost", "layer_cost", "layer_terms", "finish_cost", "block_time_terms", "piece_time_terms", "block_kept_bytes",
           "optimizer_step_ms", "tied_sync_ms", "weight_bytes_per_param", "zero3_exposed_ms", "TIME_TERMS"]


@dataclass(frozen=True)
class EntryCost:
    """One cost entry (format v2 fields); ``bwd_ms = bwd_input_ms + bwd_weight_ms``."""

    fwd_ms: float
    bwd_ms: float
    bwd_input_ms: float
    bwd_weight_ms: float
    weight_bytes: int
    act_bytes: int
    tied_weight_bytes: int = 0  # format v3: the part of weight_bytes that is a tied layer's copy

    def to_dict(self) -> dict[str, float | int]:
        """The entry's fields; ``tied_weight_bytes`` only when the entry holds a tied copy (format v3)."""
        out: dict[str, float | int] = {
            "fwd_ms": self.fwd_ms, "bwd_ms": self.bwd_ms, "bwd_input_ms": self.bwd_input_ms,
            "bwd_weight_ms": self.bwd_weight_ms, "weight_bytes": self.weight_bytes, "act_bytes": self.act_bytes}
        if self.tied_weight_bytes:
            out["tied_weight_bytes"] = self.tied_weight_bytes
        return out


def layer_cost(layer: PipelineLayer, layout: Layout, samples: float, cluster: ClusterSpec, opts: CostOptions,
               microbatches: int = 1, knobs: Knobs | None = None, *, nodes: int = 1) -> EntryCost:
    """Time and memory of ``layer`` per microbatch on each GPU of a ``layout`` stage.

    ``samples`` is the per-replica microbatch ``(global_batch / m) / dp``;
    ``microbatches`` (m) spreads the per-iteration gradient sync; ``knobs``
    is the memory-knob setting (default: the options' ``zero1`` and
    ``recompute``); ``nodes`` the nodes of the job (where a tied
    embedding's two pipeline ends sit, :func:`tied_sync_ms`).

    The backward splits into B (input gradients: the input-gradient GEMMs,
    the attention core's backward, tensor-parallel collectives, recompute,
    ZeRO-3's re-gather) and W (weight-gradient GEMMs, the exposed gradient
    sync or ZeRO-3 reduce-scatter). It is :func:`layer_terms` (what depends
    on tp, the samples and recompute only) finished by :func:`finish_cost`.
    """
    if knobs is None:
        knobs = Knobs(1 if opts.zero1 else 0, opts.recompute)
    terms = layer_terms(layer.pieces, layout.tp, samples, knobs.recompute, cluster, opts)
    return finish_cost(layer, layout, terms, cluster, opts, microbatches, knobs, nodes=nodes)


def layer_terms(pieces: Sequence[Piece], tp: int, samples: float, recompute: str, cluster: ClusterSpec,
                opts: CostOptions) -> tuple[float, float, float, float]:
    """``(fwd, B, W, act)`` of the pieces' compute and tensor-parallel collectives on one of ``tp`` GPUs, before
    the data-parallel terms: the same for every dp and ZeRO stage with these samples per replica (callers share it).

    The sums of :func:`block_time_terms` (``fwd.*``, ``bwd.*`` and ``wgrad.*``) and the activation bytes.
    """
    terms = block_time_terms(pieces, tp, samples, recompute, cluster, opts)
    fwd = sum(v for k, v in terms.items() if k.startswith("fwd."))
    b_in = sum(v for k, v in terms.items() if k.startswith("bwd."))
    b_w = sum(v for k, v in terms.items() if k.startswith("wgrad."))
    act = 0.0
    t, b = tp, samples
    for p in pieces:
        if not p.backward:
            continue  # runs under no_grad: nothing kept for a backward pass
        if p.shape is not None:
            act += block_kept_bytes(p, b, t, recompute, opts)
            if opts.fp8:  # the FP8 linears keep fp8 copies of their inputs (.precision), of those a module set keeps
                delta = fp8_activation_delta(p, b, t, opts, recompute)
                if delta and modules_of(recompute) and fp8_piece(p, opts):
                    saved = 2.0 - recipe_of(opts).stored_bytes()
                    delta -= fp8_freed_delta(p, b, t, recompute, saved, opts.sequence_parallel)
                act += delta
        else:
            replicated, sharded = p.dense_act
            act += b * (replicated / (t if opts.sequence_parallel else 1) + sharded / t)
    return fwd, b_in, b_w, act


def block_kept_bytes(p: Piece, b: float, t: int, recompute: str, opts: CostOptions) -> float:
    """Activation bytes a block piece keeps for its backward under the recompute setting (:mod:`.memory.activations`,
    module sets and torchtitan's per-op policy: :mod:`.memory.recompute`)."""
    assert p.shape is not None
    kwargs = dict(flash_attention=opts.flash_attention, sequence_parallel=opts.sequence_parallel)
    if recompute == OP:
        return op_kept_bytes(p, b, t, **kwargs)
    if modules_of(recompute):  # a module set, selective (core_attn) included
        terms = block_activation_terms(p.shape, b, t, recompute="none", fused_norm=opts.fused_norm, **kwargs)
        return p.passes * sum(kept_terms(terms, p, recompute).values())
    return p.passes * block_activation_bytes(p.shape, b, t, recompute=recompute, fused_norm=opts.fused_norm, **kwargs)


TIME_TERMS = ("fwd.gemm", "fwd.attention", "fwd.memory", "fwd.tp_comm", "bwd.gemm", "bwd.attention", "bwd.memory",
              "bwd.tp_comm", "bwd.recompute", "wgrad.gemm")


def block_time_terms(pieces: Sequence[Piece], tp: int, samples: float, recompute: str, cluster: ClusterSpec,
                     opts: CostOptions) -> dict[str, float]:
    """Per named term, the ms of the pieces' work per microbatch on one of ``tp`` GPUs (``samples`` per replica).

    Terms (:data:`TIME_TERMS`): ``fwd.gemm`` the weighted matmuls, ``fwd.attention`` the attention core's
    matmuls (every score entry without flash attention: the masked ones are computed too; the causal pairs
    with it), ``fwd.memory`` the memory-bound kernels (:mod:`.memory.traffic`, when ``memory_bound_ops``),
    ``fwd.tp_comm`` the tensor-parallel collectives; ``bwd.*`` the same for the input-gradient pass
    (``bwd.tp_comm`` only the part not hidden behind the weight-gradient GEMMs, ``tp_comm_overlap``),
    ``bwd.recompute`` the replayed forward (full: all of it; selective without flash attention: the
    attention core and its score traffic); ``wgrad.gemm`` the weight-gradient matmuls.
    """
    out = dict.fromkeys(TIME_TERMS, 0.0)
    for p in pieces:
        for key, value in piece_time_terms(p, tp, samples, recompute, cluster, opts).items():
            out[key] += value
    return out


def piece_time_terms(p: Piece, tp: int, samples: float, recompute: str, cluster: ClusterSpec,
                     opts: CostOptions) -> dict[str, float]:
    """:func:`block_time_terms` of one piece."""
    t, b = tp, samples
    flop_per_ms = cluster.peak_tflops * 1e9
    rows = b * p.tokens * p.passes
    rate = flop_per_ms * efficiency(p.width / t, rows, opts, cluster)
    grate = gemm_rate(p, rate, cluster, opts)  # the weighted matmuls' rate: rate, or FP8's (.precision)
    # without flash attention the score matmuls compute every entry of the stored matrix, masked or not
    scale = 1.0 if opts.flash_attention or p.attn_pairs <= 0 else p.score_entries / p.attn_pairs
    f_gemm = b * p.gemm_flops / t / grate
    if p.replicated_gemm_flops and t > 1 and not opts.sequence_parallel:
        f_gemm += b * p.replicated_gemm_flops * (1.0 - 1.0 / t) / grate  # every rank runs them over all its tokens
    f_attn = b * p.attn_flops * scale / t / rate
    kernel = opts.flash_attention and opts.attention_kernels
    flash_fwd = flash_attention_ms(p, b, t, cluster, opts, "fwd") if kernel else None
    if flash_fwd is not None:  # the flash kernel's published rate for this GPU, head dim, key loop and mask
        f_attn = flash_fwd
    elem = tp_comm_element_bytes(p, opts)  # BF16, or an fp8 all-gather beside a BF16 reduce-scatter (.precision)
    comm = p.allreduces * allreduce_ms(rows * p.width * elem, t, cluster.intra_node_GBps, opts)
    if p.attn_comm_width:  # the attention's collectives carry another width (MLA: its latents, .attention_mla)
        comm += (allreduce_ms(rows * p.attn_comm_width * elem, t, cluster.intra_node_GBps, opts)
                 - allreduce_ms(rows * p.width * elem, t, cluster.intra_node_GBps, opts))
    amax = amax_reduce_ms(p, t, cluster, opts)  # current scaling's TP amax reductions, per direction (.precision)
    traffic, scores = _piece_traffic(p, t, b, cluster, opts)
    out = {"fwd.gemm": f_gemm, "fwd.attention": f_attn, "fwd.memory": traffic[0], "fwd.tp_comm": comm + amax}
    if not p.backward:
        return out
    attn_factor = opts.flash_backward_factor if opts.flash_attention else 2.0
    g = f_gemm if p.bwd_gemm_flops is None else b * p.bwd_gemm_flops / t / grate
    a = f_attn if p.bwd_attn_flops is None else b * p.bwd_attn_flops * scale / t / rate
    skip = 0.0 if p.needs_input_grad else b * p.input_gemm_flops / t / grate
    wgrad = 0.0 if p.frozen else g
    # the input-gradient collectives run beside the wgrad GEMMs, slowing them by the SMs they occupy
    hidden = min(opts.tp_comm_overlap * comm, wgrad)
    flash_bwd = flash_attention_ms(p, b, t, cluster, opts, "bwd") if flash_fwd is not None else None
    out.update({"bwd.gemm": g - skip, "bwd.attention": attn_factor * a if flash_bwd is None else flash_bwd,
                "bwd.memory": traffic[1], "bwd.tp_comm": comm - hidden + comm_sm_fraction(cluster) * hidden + amax,
                "wgrad.gemm": wgrad})
    if recompute == "full":
        out["bwd.recompute"] = f_gemm + f_attn + traffic[0] + comm + amax
    elif recompute == "selective" and not opts.flash_attention:
        out["bwd.recompute"] = f_attn + scores
    elif recompute == OP or modules_of(recompute):  # module sets; selective with flash attention
        rates = ReplayRates(grate, f_attn, comm / p.allreduces if p.allreduces else 0.0, cluster.hbm_GBps,
                            opts.hbm_efficiency, opts.memory_bound_ops)
        kwargs = dict(flash_attention=opts.flash_attention, sequence_parallel=opts.sequence_parallel)
        out["bwd.recompute"] = (op_replay_ms(p, t, b, rates, **kwargs) if recompute == OP
                                else replay_ms(p, recompute, t, b, rates, **kwargs))
    return out


def _piece_traffic(p: Piece, t: int, b: float, cluster: ClusterSpec, opts: CostOptions) -> tuple[tuple[float, float], float]:
    """((forward ms, backward ms), forward ms of the score-matrix traffic) of a piece's memory-bound kernels."""
    if not opts.memory_bound_ops:
        return (0.0, 0.0), 0.0
    if cluster.hbm_GBps is None:
        raise ProblemError(f"cluster {cluster.name} gives no hbm_GBps (needed by the memory-bound terms; or set "
                           f"the cost option memory_bound_ops=false)", path="hbm_GBps", source=cluster.source)
    sp = opts.sequence_parallel
    scores = 0.0
    if p.shape is not None:
        ops = block_traffic(p.shape, b, t, flash_attention=opts.flash_attention, sequence_parallel=sp)
        fwd = p.passes * sum(o.fwd for o in ops.values())
        bwd = p.passes * sum(o.bwd for o in ops.values())
        scores = p.passes * ops["scores"].fwd if "scores" in ops else 0.0
        if fp8_piece(p, opts):  # the FP8 casts of the linears' operands (.precision)
            q_fwd, q_bwd = block_quant_bytes(p, b, t, opts, cluster)
            fwd, bwd = fwd + q_fwd, bwd + q_bwd
    elif p.op == "embedding":
        tr = embedding_traffic(p.tokens, p.width, p.vocab, b, t, positions=p.positions, dropout=p.dropout,
                               sequence_parallel=sp, backward=not p.frozen)
        fwd, bwd = tr.fwd, tr.bwd
    elif p.op == "head":
        tr = head_traffic(p.tokens, p.width, p.vocab, b, t, (opts.loss_fwd_bytes_per_logit, opts.loss_bwd_bytes_per_logit),
                          sequence_parallel=sp)
        fwd, bwd = tr.fwd, tr.bwd
    elif p.op == "projector":
        tr = projector_traffic(p.tokens, p.dims, b, t)
        fwd, bwd = tr.fwd, tr.bwd
    else:
        fwd = bwd = 0.0
    ms = (traffic_ms(fwd, cluster.hbm_GBps, opts.hbm_efficiency), traffic_ms(bwd, cluster.hbm_GBps, opts.hbm_efficiency))
    return ms, traffic_ms(scores, cluster.hbm_GBps, opts.hbm_efficiency)


def finish_cost(layer: PipelineLayer, layout: Layout, terms: tuple[float, float, float, float], cluster: ClusterSpec,
                opts: CostOptions, microbatches: int, knobs: Knobs, *, nodes: int = 1) -> EntryCost:
    """The entry from :func:`layer_terms`: weight bytes, then ZeRO-3's gathers or the exposed gradient sync.

    A tied LM head's entry also carries the all-reduce of the embedding's
    gradient between the two pipeline ends (:func:`tied_sync_ms`), once per
    iteration, spread over the microbatches, and the bytes of its copy of
    the embedding (``tied_weight_bytes``, :func:`~.memory.tied.tied_copy_bytes`:
    the copy's parameters / tp at the entry's bytes per parameter, rounded
    down so that it stays within ``weight_bytes``), which a stage that also
    holds the embedding does not count twice (format v3's ``tied_to``).
    """
    fwd, b_in, b_w, act = terms
    t, dp = layout.tp, layout.dp
    weight = tied = 0.0
    for p in layer.pieces:
        per = weight_bytes_per_param(p.frozen, dp, knobs, opts)
        weight += (p.params + p.tied_params) * per / t
        if p.replicated_params and t > 1:  # held whole on every tp rank (MLA's down-projections)
            weight += p.replicated_params * per * (1.0 - 1.0 / t)
        tied += tied_copy_bytes(p.tied_params, t, per)
        if fp8_piece(p, opts):  # the cached fp8 weights and their cast, once per iteration (.precision)
            fp8_params = fp8_weight_params(p) / t + (p.replicated_params * (1.0 - 1.0 / t) if t > 1 else 0.0)
            weight += fp8_params * fp8_weight_extra_bytes(opts, cluster) / (dp if knobs.zero == 3 else 1)
            fwd += weight_cast_ms(fp8_params, cluster, opts) / microbatches
    trainable = sum(p.params + p.tied_params for p in layer.pieces if not p.frozen)
    replicated = sum(p.replicated_params for p in layer.pieces if not p.frozen) if t > 1 else 0
    if replicated:  # the syncs and the step below divide by tp: count the whole copies each rank owns
        trainable += replicated * (t - 1)
        b_w += replicated_grad_sync_ms(replicated, t, cluster, opts) / microbatches
    b_w += optimizer_step_ms(trainable, layout, cluster, opts, knobs) / microbatches
    b_w += tied_sync_ms(layer, layout, cluster, opts, nodes=nodes) / microbatches
    if knobs.zero == 3:
        gather = shard_gather_ms(layer.params, layout, cluster, opts)
        scatter = shard_gather_ms(trainable, layout, cluster, opts, opts.grad_bytes_per_param)  # grad reduce-scatter
        if opts.zero3_keep_gathered:
            fwd += zero3_exposed_ms(gather, terms[0], opts, cluster) / microbatches  # gathered once per iteration
            b_w += zero3_exposed_ms(scatter, terms[1] + terms[2], opts, cluster)
        else:
            fwd += zero3_exposed_ms(gather, terms[0], opts, cluster)
            regather = shard_gather_ms(sum(p.params for p in layer.pieces if p.backward), layout, cluster, opts)
            exposed = zero3_exposed_ms(regather + scatter, terms[1] + terms[2], opts, cluster)
            share = regather / (regather + scatter) if regather + scatter > 0 else 0.0
            b_in += share * exposed
            b_w += (1.0 - share) * exposed
    else:
        b_w += (1.0 - opts.grad_sync_overlap) * grad_sync_ms(trainable, layout, cluster, opts) / microbatches
    return EntryCost(fwd, b_in + b_w, b_in, b_w, int(math.ceil(weight)), int(math.ceil(act)), int(math.floor(tied)))


def zero3_exposed_ms(comm: float, partner: float, opts: CostOptions, cluster: ClusterSpec) -> float:
    """What a ZeRO-3 (FSDP) all-gather or reduce-scatter of ``comm`` ms still costs beside ``partner`` ms of compute.

    FSDP and Megatron's distributed optimizer with parameter sharding
    prefetch the next layer's parameters during this layer's forward and
    backward and reduce-scatter its gradients during the next layer's
    backward [10]_, so the collectives of a layer run beside about one
    layer's compute: :func:`~.comm.overlapped_ms` with the SMs the
    collective occupies (:func:`~.compute.hardware.comm_sm_fraction`). A fixed
    ``zero3_overlap`` fraction, when the option is set, instead.

    References
    ----------
    .. [10] Y. Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded
       Data Parallel", VLDB 2023 (forward and backward prefetching).
    """
    if opts.zero3_overlap is not None:
        return (1.0 - opts.zero3_overlap) * comm
    return overlapped_ms(comm, partner, comm_sm_fraction(cluster))


def tied_sync_ms(layer: PipelineLayer, layout: Layout, cluster: ClusterSpec, opts: CostOptions, *,
                 nodes: int = 1) -> float:
    """The tied-embedding gradient all-reduce a layer's head pays, once per iteration, in ms (:mod:`.memory.tied`).

    Megatron-LM all-reduces the trainable tied embedding's gradient (``V h
    / tp`` per rank, ``grad_bytes_per_param`` each) between the first and
    last pipeline stage after the backward, outside the data-parallel
    overlap [28]_. Pipeline stages are the outermost ranks in Megatron's
    order, so the two ends share a node only when the job fits in one
    (``nodes == 1``: NVLink); otherwise the pair talks over each GPU's NIC.
    The entry cannot know whether its stage also holds the embedding (then
    Megatron skips the all-reduce): the charge is then an overestimate by
    this one all-reduce, as the problem contract has it (format v3,
    ``tied_to``). Frozen heads and untied ones cost nothing.

    References
    ----------
    .. [28] NVIDIA Megatron-Core, ``megatron/core/distributed/
       finalize_model_grads.py`` (``_allreduce_word_embedding_grads``).
    """
    tied = sum(p.tied_params for p in layer.pieces if not p.frozen)
    # first and last stage: across the whole job, so on a levels cluster at the outermost level's rate
    inter = network_GBps(cluster.levels, cluster.inter_node_GBps, cluster.gpus_per_node, nodes * cluster.gpus_per_node)
    return embedding_sync_ms(tied, layout.tp, inside_node=nodes <= 1, intra_GBps=cluster.intra_node_GBps,
                             inter_GBps=inter, opts=opts)


def optimizer_step_ms(trainable_params: float, layout: Layout, cluster: ClusterSpec, opts: CostOptions,
                      knobs: Knobs) -> float:
    """The optimizer step over the parameters one GPU owns, once per iteration, in ms.

    ``optimizer_step_bytes_per_param`` x the trainable parameters / tp, / dp
    when ZeRO (1 or 3; Megatron's distributed optimizer) shards the
    optimizer states, at HBM bandwidth x ``hbm_efficiency``. 0 without
    ``memory_bound_ops``.
    """
    if not opts.memory_bound_ops or trainable_params <= 0:
        return 0.0
    if cluster.hbm_GBps is None:
        raise ProblemError(f"cluster {cluster.name} gives no hbm_GBps (needed by the memory-bound terms; or set "
                           f"the cost option memory_bound_ops=false)", path="hbm_GBps", source=cluster.source)
    owned = trainable_params / layout.tp / (layout.dp if knobs.zero else 1)
    return traffic_ms(owned * opts.optimizer_step_bytes_per_param, cluster.hbm_GBps, opts.hbm_efficiency)


def weight_bytes_per_param(frozen: bool, dp: int, knobs: Knobs, opts: CostOptions) -> float:
    """Weight memory per parameter on one GPU of a dp group (before / tp) [4]_.

    Trainable: ``bytes_per_param``, its optimizer part / dp with ZeRO-1,
    all of it / dp with ZeRO-3; frozen: ``frozen_bytes_per_param`` (/ dp
    with ZeRO-3). ZeRO-3 with ``zero3_keep_gathered`` adds the gathered
    bf16 copy.

    References
    ----------
    .. [4] S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
       Trillion Parameter Models", SC 2020 (2 + 2 + 12 bytes per parameter).
    """
    if knobs.zero == 3:
        per = (opts.frozen_bytes_per_param if frozen else opts.bytes_per_param) / dp
        if opts.zero3_keep_gathered and dp > 1:
            per += opts.param_gather_bytes_per_param
        return per
    if frozen:
        return opts.frozen_bytes_per_param
    if knobs.zero == 1:
        return opts.bytes_per_param - opts.optimizer_bytes_per_param * (1.0 - 1.0 / dp)
    return opts.bytes_per_param
