"""FP8 training in the cost model: which GEMMs run in FP8, at what rate, what the casts move, what is kept.

Contract: pure functions the entry terms (:mod:`~partitioner.costs.entry`, :mod:`~partitioner.costs.axes.wiring`)
call where a GEMM's rate, a collective's bytes, a piece's memory-bound bytes,
its saved activations and its weight bytes are computed. Each returns the
BF16 value unchanged (or 0 for an addition) when ``precision`` is ``bf16``,
so a BF16 problem is the same, number for number, with or without this
module.

**What runs in FP8** (:func:`fp8_piece`). The linear layers inside the
transformer blocks: QKV, the output projection, the MLP (fc1, fc2) and the
routed and shared experts.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.compute.precision``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...presets import ClusterSpec, ModuleSpec, is_cross_layer, is_moe_layer
from ..comm import allreduce_ms
from ..memory.traffic import traffic_ms
from ..options import BF16_BYTES, CostOptions
from .flops import block_gemm_flops
from .fp8 import RECIPES, Fp8Recipe, fp8_gemm_efficiency, fp8_problem, operand_copies

if TYPE_CHECKING:
    from ..layers import Piece

__all__ = ["recipe_of", "param_gather", "fp8_piece", "check_precision", "precision_summary", "block_fp8_weights",
           "fp8_rate", "gemm_rate", "tp_comm_element_bytes", "amax_reduce_ms", "cast_bytes", "block_quant_bytes",
           "fp8_activation_delta", "fp8_weight_params", "fp8_weight_extra_bytes", "weight_cast_ms",
           "expert_quant_ms", "expert_activation_delta", "describe_precision", "AMAX_BYTES"]

AMAX_BYTES = 4.0  # one fp32 amax, max-reduced over the tensor-parallel group
# recipes whose published Megatron-Bridge mixed-precision config keeps the parameters in fp8 [4]_
_PARAM_GATHER_BY_DEFAULT = ("tensorwise", "delayed", "mxfp8")


def recipe_of(opts: CostOptions) -> Fp8Recipe:
    """The options' FP8 recipe (:data:`~.fp8.RECIPES`)."""
    return RECIPES[opts.fp8_recipe]


def param_gather(opts: CostOptions) -> bool:
    """Whether the parameters are kept in fp8: the option, else the recipe's published default [4]_.

    References
    ----------
    .. [4] NeMo Megatron-Bridge, ``src/megatron/bridge/training/mixed_precision.py``
       (``bf16_with_fp8_current_scaling_mixed``, ``bf16_with_mxfp8_mixed``,
       ``bf16_with_fp8_delayed_scaling_mixed``: ``fp8_param_gather=True``;
       ``bf16_with_fp8_subchannel_scaling_mixed`` (blockwise): False).
    """
    if opts.fp8_param_gather is not None:
        return opts.fp8_param_gather
    return opts.fp8_recipe in _PARAM_GATHER_BY_DEFAULT


def fp8_piece(p: Piece, opts: CostOptions) -> bool:
    """Whether ``p`` runs some GEMM in FP8: a transformer block with GEMMs besides its BF16 ones, under fp8."""
    return opts.fp8 and p.kind == "block" and p.gemm_flops > p.bf16_gemm_flops


def check_precision(cluster: ClusterSpec, opts: CostOptions) -> None:
    """Refuse a recipe the cluster's GPUs cannot run (:func:`~.fp8.fp8_problem`), naming ``options.fp8_recipe``."""
    if not opts.fp8:
        return
    why = fp8_problem(opts.fp8_recipe, cluster)
    if why is not None:
        from ...problem import ProblemError

        raise ProblemError(why, path="options.fp8_recipe" if cluster.peak_tflops_fp8 else "options.precision",
                           source=cluster.source)


def precision_summary(cluster: ClusterSpec, opts: CostOptions) -> dict[str, Any] | None:
    """What the problem's ``meta.precision`` says of FP8 (None under BF16)."""
    if not opts.fp8:
        return None
    rec = recipe_of(opts)
    return {
        "precision": "fp8",
        "fp8_recipe": rec.name,
        "fp8_param_gather": param_gather(opts),
        "fp8_bf16_layers": opts.fp8_bf16_layers,
        "peak_flops_fp8_per_gpu": (cluster.peak_tflops_fp8 or 0.0) * 1e12,
        "fp8_gemm_efficiency": _ratio(cluster, opts),
        "fp8_gemms": "QKV, output projection, MLP and expert linear layers of every transformer block",
        "bf16": "router, attention core, embedding, LM head, projector, patch embedding"
                + (f", the first and last {opts.fp8_bf16_layers} decoder layer(s)" if opts.fp8_bf16_layers else ""),
    }


def describe_precision(opts: CostOptions) -> str:
    """One clause for a variant's description (empty under BF16)."""
    if not opts.fp8:
        return ""
    return f"; block GEMMs in FP8 ({opts.fp8_recipe} scaling{', fp8 parameters' if param_gather(opts) else ''})"


# --------------------------------------------------------------------------- what a block runs in FP8


def block_fp8_weights(spec: ModuleSpec, i: int | None) -> float:
    """Parameters of the FP8 linear layers of block ``i`` of ``spec``: every weighted matmul but the router.

    From :func:`~.flops.block_gemm_flops` at one token (2 FLOPs per weight
    per token), less the router's ``hidden x experts``, plus the routed
    experts a token does not visit (all are held); a cross-attention
    layer's key and value projections counted once.
    """
    from dataclasses import replace

    cross = i is not None and is_cross_layer(spec, i)
    per_token = block_gemm_flops(replace(spec, cross_tokens=1) if cross else spec, 1.0, i) / 2.0
    if i is not None and is_moe_layer(spec, i):
        n_mlp = 3 if spec.gated else 2
        per_token += -spec.hidden * spec.experts + (spec.experts - spec.top_k) * n_mlp * spec.hidden * spec.moe_ffn
    return per_token


# --------------------------------------------------------------------------- time


def _ratio(cluster: ClusterSpec, opts: CostOptions) -> float:
    return opts.fp8_gemm_efficiency if opts.fp8_gemm_efficiency is not None else fp8_gemm_efficiency(cluster)


def fp8_rate(rate: float, cluster: ClusterSpec, opts: CostOptions) -> float:
    """The FP8 rate of a GEMM whose BF16 rate is ``rate``: x the FP8/BF16 peak ratio x ``fp8_gemm_efficiency``."""
    peak8 = cluster.peak_tflops_fp8
    if peak8 is None:  # check_precision refuses such a cluster before any cost is asked
        return rate
    return rate * (peak8 / cluster.peak_tflops) * _ratio(cluster, opts)


def gemm_rate(p: Piece, rate: float, cluster: ClusterSpec, opts: CostOptions) -> float:
    """The rate of ``p``'s weighted matmuls: ``rate`` (BF16) unless some run in FP8, then the FLOP-weighted blend."""
    if not fp8_piece(p, opts):
        return rate
    share = (p.gemm_flops - p.bf16_gemm_flops) / p.gemm_flops
    return 1.0 / (share / fp8_rate(rate, cluster, opts) + (1.0 - share) / rate)


def tp_comm_element_bytes(p: Piece, opts: CostOptions) -> float:
    """Bytes per element of ``p``'s tensor-parallel collectives: BF16, or the average of an fp8 all-gather and a
    BF16 reduce-scatter under FP8 with sequence parallelism (TE casts before the all-gather) [2]_.

    References
    ----------
    .. [2] NVIDIA Transformer Engine, ``transformer_engine/pytorch/module/linear.py``
       (``_Linear.forward``: the input cast before the sequence-parallel
       all-gather, the amax reduction group for column-parallel inputs and
       row-parallel output gradients; the saved input keeps only its
       columnwise copy; the fp8 weight cached when ``is_first_microbatch`` is
       given).
    """
    if not (fp8_piece(p, opts) and opts.sequence_parallel and recipe_of(opts).fp8_all_gather):
        return BF16_BYTES
    return (recipe_of(opts).stored_bytes() + BF16_BYTES) / 2.0


def amax_reduce_ms(p: Piece, t: int, cluster: ClusterSpec, opts: CostOptions) -> float:
    """One direction's amax all-reduces of a block under current scaling with sequence parallelism, in ms.

    Two per pass and direction (forward: the QKV and fc1 inputs; backward:
    the projection's and fc2's output gradients), each one fp32 over the
    tensor-parallel group, latency-bound [2]_. 0 otherwise.

    References
    ----------
    .. [2] As cited in :func:`tp_comm_element_bytes`.
    """
    if not (fp8_piece(p, opts) and opts.sequence_parallel and t > 1 and recipe_of(opts).tp_amax_reduce):
        return 0.0
    return p.passes * 2.0 * allreduce_ms(AMAX_BYTES, t, cluster.intra_node_GBps, opts)


def cast_bytes(rec: Fp8Recipe, copies: int, weight: bool = False) -> float:
    """Bytes a cast from BF16 moves per element: read 2, write each fp8 copy (with its scales), plus the amax pass."""
    return BF16_BYTES + copies * rec.stored_bytes(weight) + (BF16_BYTES if rec.amax_pass else 0.0)


def _kv_per_gpu(k: int, t: int) -> float:
    return k / t if k >= t else 1.0  # as memory.block_activation_terms: fewer key/value heads than tp are replicated


def block_quant_bytes(p: Piece, b: float, t: int, opts: CostOptions, cluster: ClusterSpec) -> tuple[float, float]:
    """``(forward, backward)`` bytes of the FP8 casts of ``p``'s operands per microbatch on one of ``t`` GPUs.

    Forward: the inputs of QKV (``s h``, / t with sequence parallelism),
    the projection (``s a d / t``), fc1 (``s h``) and fc2 (``s f / t``);
    backward: the output gradients of QKV (``s (a + 2k) d / t``), the
    projection and fc2 (``s h``) and fc1 (``s f / t``, 2f gated); each
    written as :func:`~.fp8.operand_copies` fp8 copies (one when no weight
    gradient is computed). With torchao's ``rowwise`` (no weight cache)
    also the weights, forward and backward, one copy each. ``(0, 0)``
    unless ``p`` runs in FP8.
    """
    shape = p.shape
    if not fp8_piece(p, opts) or shape is None:
        return 0.0, 0.0
    rec = recipe_of(opts)
    both = operand_copies(rec.name, cluster)
    s, h, d = shape.tokens * b, shape.hidden, shape.head_dim
    sp = t if opts.sequence_parallel else 1
    a, kv, f = shape.heads / t, _kv_per_gpu(shape.kv_heads, t), shape.ffn / t
    inputs = 2.0 * s * h / sp + s * a * d + s * f
    grads = s * (a + 2.0 * kv) * d + 2.0 * s * h / sp + s * f * (2.0 if shape.gated else 1.0)
    copies = both if p.backward and not p.frozen else 1
    fwd = inputs * cast_bytes(rec, copies)
    bwd = grads * cast_bytes(rec, copies) if p.backward else 0.0
    if not rec.weight_cache:
        w = fp8_weight_params(p) / t
        fwd += w * cast_bytes(rec, 1, weight=True)
        bwd += w * cast_bytes(rec, 1, weight=True) if p.backward else 0.0
    return p.passes * fwd, p.passes * bwd


# --------------------------------------------------------------------------- memory


def fp8_activation_delta(p: Piece, b: float, t: int, opts: CostOptions, recompute: str) -> float:
    """The change of ``p``'s saved activations (bytes per microbatch on one GPU) when its linears run in FP8.

    The QKV input, the MLP input (``s h``, / t with sequence parallelism)
    and fc2's input (``s f / t``) are kept as one fp8 copy instead of BF16;
    the projection's input gains an fp8 copy beside the BF16 attention
    output flash attention keeps (without flash attention that output is
    only the projection's input and is replaced). 0 under full recompute
    (each block keeps its BF16 input only), without a backward, or under BF16.
    """
    shape = p.shape
    if not fp8_piece(p, opts) or shape is None or recompute == "full" or not p.backward:
        return 0.0
    q = recipe_of(opts).stored_bytes()
    saved = BF16_BYTES - q
    s, h = shape.tokens * b, shape.hidden
    sp = t if opts.sequence_parallel else 1
    attn_out = s * shape.heads * shape.head_dim / t
    delta = -saved * (2.0 * s * h / sp + s * shape.ffn / t)
    delta += q * attn_out if opts.flash_attention else -saved * attn_out
    return p.passes * delta


def fp8_weight_params(p: Piece) -> float:
    """The parameters of ``p``'s FP8 linears (the piece's parameters less its BF16 ones)."""
    return max(0.0, float(p.params - p.bf16_params))


def fp8_weight_extra_bytes(opts: CostOptions, cluster: ClusterSpec) -> float:
    """Bytes per FP8-linear parameter on top of the BF16 count: the cached fp8 weight and its transpose (one
    copy where :func:`~.fp8.operand_copies` says so; with their scales), less the BF16 weight when
    ``fp8_param_gather`` keeps the parameter in fp8 [1]_ [2]_.

    0 for a recipe without a weight cache (torchao's rowwise: cast anew in every pass).

    References
    ----------
    .. [1] megatron-core 0.16.1: ``megatron/core/fp8_utils.py`` (``get_fp8_context``
       per layer; ``get_amax_reduction_group``), ``megatron/core/transformer/
       transformer_block.py`` (the fp8 context per layer, one outer context for
       delayed scaling), ``megatron/core/transformer/moe/router.py`` (the
       gating matmul), ``megatron/core/extensions/transformer_engine.py``
       (``is_first_microbatch`` passed to TE's linear layers);
       ``distributed_data_parallel_config.py`` (``fp8_param_gather``: "keep
       the compute param in fp8").
    .. [2] As cited in :func:`tp_comm_element_bytes`.
    """
    rec = recipe_of(opts)
    if not rec.weight_cache:
        return 0.0
    copies = operand_copies(rec.name, cluster)
    return copies * rec.stored_bytes(weight=True) - (BF16_BYTES if param_gather(opts) else 0.0)


def weight_cast_ms(params: float, cluster: ClusterSpec, opts: CostOptions) -> float:
    """Once per iteration: casting ``params`` FP8-linear parameters (one GPU's share) to their cached fp8 copies.

    Its copies (:func:`~.fp8.operand_copies`) from BF16 (:func:`cast_bytes`);
    with ``fp8_param_gather`` only the copies beyond the fp8 parameter,
    from it (read 1 B, write 1 B each; none where one copy serves both
    GEMMs). 0 without a weight cache (the casts are per pass,
    :func:`block_quant_bytes`), or without ``memory_bound_ops``.
    """
    rec = recipe_of(opts)
    if params <= 0 or not rec.weight_cache or not opts.memory_bound_ops or cluster.hbm_GBps is None:
        return 0.0
    copies = operand_copies(rec.name, cluster)
    if param_gather(opts):
        per = (copies - 1) * 2.0 * rec.stored_bytes(weight=True)
    else:
        per = cast_bytes(rec, copies, weight=True)
    return traffic_ms(params * per, cluster.hbm_GBps, opts.hbm_efficiency)


# --------------------------------------------------------------------------- routed experts (ep > 1)


def expert_quant_ms(rows: float, hidden: int, moe_ffn: int, etp: int, gated: bool, backward: bool, wgrad: bool,
                    cluster: ClusterSpec, opts: CostOptions, weights: float = 0.0) -> tuple[float, float]:
    """``(forward, backward)`` ms of the FP8 casts of one rank's routed experts under an expert-parallel split.

    ``rows`` token copies (after the expert-tensor all-gather: ``etp`` x
    the dispatched ones); forward the inputs of fc1 (``rows h``) and fc2
    (``rows f / etp``), backward their output gradients (``rows f / etp``,
    2x gated, and ``rows h``); two copies each when weight gradients are
    computed. A recipe without a weight cache (torchao's rowwise) also
    casts the rank's ``weights`` expert parameters in each pass (TE's
    cached casts are :func:`weight_cast_ms`).
    """
    if not opts.fp8 or not opts.memory_bound_ops or cluster.hbm_GBps is None:
        return 0.0, 0.0
    rec = recipe_of(opts)
    copies = operand_copies(rec.name, cluster) if wgrad else 1
    f = moe_ffn / etp
    fwd = rows * (hidden + f) * cast_bytes(rec, copies)
    bwd = rows * (hidden + f * (2.0 if gated else 1.0)) * cast_bytes(rec, copies) if backward else 0.0
    if not rec.weight_cache:
        fwd += weights * cast_bytes(rec, 1, weight=True)
        bwd += weights * cast_bytes(rec, 1, weight=True) if backward else 0.0
    return traffic_ms(fwd, cluster.hbm_GBps, opts.hbm_efficiency), traffic_ms(bwd, cluster.hbm_GBps, opts.hbm_efficiency)


def expert_activation_delta(rows: float, hidden: int, moe_ffn: int, etp: int, opts: CostOptions) -> float:
    """The change of the routed experts' saved activations under FP8: fc1's and fc2's inputs as fp8 copies.

    ``rows`` as :func:`~partitioner.costs.axes.experts.expert_activation_bytes` keeps them
    (after the expert-tensor all-gather, the imbalance factor applied).
    """
    if not opts.fp8:
        return 0.0
    saved = BF16_BYTES - recipe_of(opts).stored_bytes()
    return -saved * rows * (hidden + moe_ffn / etp)
