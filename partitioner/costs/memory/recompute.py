"""Activation recompute settings below "full": Megatron-Core's modules and torchtitan's per-op policy.

Contract: a recompute *setting* is the string a :class:`~partitioner.costs.variants.Knobs`
carries (``none``, ``full``, ``selective``, a module set such as
``layernorm+moe_act``, or ``op``). This module says, for one transformer
block, which of the activation terms :mod:`.activations` counts each setting
frees (:func:`kept_terms`, :func:`op_kept_bytes`) and how much forward work
the backward replays (:func:`replay_ms`, :func:`op_replay_ms`); pure
arithmetic over a :class:`~partitioner.costs.layers.Piece`, its :class:`~.activations.BlockShape`
and the rates the caller (:mod:`~partitioner.costs.entry`) already computed.
:func:`module_chain` picks the module sets worth emitting as variants.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.memory.recompute``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Sequence

from .activations import COMPOSITE_ACTIVATIONS, BlockShape
from .recompute_names import (
    ABSORBED,
    MODULES,
    OP,
    SETTINGS,
    canonical_setting,
    is_module_setting,
    modules_of,
    replays_attention,
    setting_of,
)
from .traffic import Traffic, block_traffic, traffic_ms

if TYPE_CHECKING:
    from ..layers import Piece

__all__ = ["MODULES", "OP", "SETTINGS", "MAX_MODULE_LEVELS", "modules_of", "setting_of", "canonical_setting",
           "is_module_setting", "applicable_modules", "kept_terms", "replay_ms", "op_kept_bytes", "op_replay_ms",
           "ReplayRates", "module_chain", "replays_attention", "describe_setting", "dense_part_view",
           "expert_recompute", "merge_settings", "acting_modules", "DENSE_MODULES", "fp8_freed_delta"]

MAX_MODULE_LEVELS = 3
"""At most this many module sets are emitted by default (:func:`module_chain`): each one adds a variant per
ZeRO stage to every layout, and the solvers' time grows with the keys."""

def describe_setting(setting: str) -> str:
    """A one-line description of a module set or ``op`` (for the problem's ``variants`` map)."""
    if setting == OP:
        return ("torchtitan per-op selective recompute: matmul (every second one), attention and reduce-scatter/"
                "all-to-all outputs kept, the rest replayed in backward")
    mods = [m for m in MODULES if m in modules_of(setting)]
    return "module recompute (Megatron --recompute-modules " + " ".join(mods) + ")"


def _moe_shares(piece: Piece) -> tuple[float, float]:
    """(routed, shared) shares of a MoE block piece's MLP width (its shape's ffn = k moe_ffn + shared_ffn)."""
    moe = piece.moe
    if moe is None:
        return 0.0, 0.0
    routed = moe.top_k * moe.moe_ffn
    total = routed + moe.shared_ffn
    if total <= 0:
        return 0.0, 0.0
    return routed / total, moe.shared_ffn / total


def _act_output_fraction(block: BlockShape) -> float:
    """The part of the ``mlp`` term an activation's output-discarding checkpoint frees: all but the fc1 output.

    Gated: gate and up (the fc1 output) stay, act(gate) (two tensors for a
    composite activation) and the product go; plain: the fc1 output stays,
    the activation's output(s) go (:mod:`.activations`'s ``mlp`` count).
    """
    keeps = COMPOSITE_ACTIVATIONS.get(block.activation, 1)
    total = keeps + 3 if block.gated else keeps + 1
    fc1 = 2 if block.gated else 1
    return (total - fc1) / total


def applicable_modules(piece: Piece) -> frozenset[str]:
    """The modules that change anything on ``piece`` (a block that runs a backward): core_attn and, by layer kind,
    the MLP's."""
    if piece.shape is None or not piece.backward:
        return frozenset()
    mla = {"mla_up_proj", "layernorm"} if piece.shape.mla is not None else set()  # MLA's input norm is standalone
    if piece.moe is None:
        return frozenset({"core_attn", "mlp", *mla})
    mods = {"core_attn", "layernorm", "moe_act", "moe", *mla}
    if piece.moe.shared_ffn:
        mods.add("shared_experts")
    return frozenset(mods)


def kept_terms(terms: Mapping[str, float], piece: Piece, setting: str) -> dict[str, float]:
    """The activation terms of ``piece`` (a block, :func:`~.activations.block_activation_terms` without recompute)
    that a module setting keeps; see the module table. ``none`` keeps all, unknown modules raise ValueError."""
    mods = modules_of(setting)
    out = dict(terms)
    if not mods:
        return out
    moe = piece.moe is not None
    if "core_attn" in mods:
        out.pop("scores", None)
        out.pop("softmax_stats", None)
    mla = piece.shape is not None and piece.shape.mla is not None
    if mla and "mla_up_proj" in mods:  # the up-projections' and RoPE's outputs: the core attention's Q, K, V
        for term in ("q", "k", "v"):
            out.pop(term, None)
    if mla and "layernorm" in mods:  # MLA's input norm is a standalone module (its output feeds the down-projections)
        out.pop("qkv_input", None)
    if moe:
        routed, shared = _moe_shares(piece)
        shape = piece.shape
        assert shape is not None
        if "layernorm" in mods:
            out.pop("mlp_input", None)
        if "moe" in mods:
            out.pop("mlp", None)
        elif "mlp" in out:
            freed = 0.0
            if "moe_act" in mods:
                freed += routed * _act_output_fraction(shape)
            if "shared_experts" in mods:
                freed += shared
            out["mlp"] *= 1.0 - freed
    elif "mlp" in mods:
        out.pop("mlp", None)
        out.pop("mlp_input", None)
    return out


@dataclass(frozen=True)
class ReplayRates:
    """What :mod:`~partitioner.costs.entry` computed for a piece, reused for its replay: the GEMM rate (FLOP per ms), the attention
    core's forward ms, one tensor-parallel collective's ms, the HBM bandwidth (GB/s) and its efficiency."""

    flop_per_ms: float
    attn_fwd_ms: float
    collective_ms: float
    hbm_GBps: float | None
    hbm_efficiency: float
    memory_bound: bool


def _mlp_flops(shape: BlockShape, ffn: float) -> float:
    """Forward FLOPs per sample of an MLP of width ``ffn`` on ``shape.tokens`` tokens (3 matrices gated, 2 plain)."""
    return 2.0 * shape.tokens * shape.hidden * ffn * (3 if shape.gated else 2)


def _ms(nbytes: float, rates: ReplayRates) -> float:
    if not rates.memory_bound or rates.hbm_GBps is None:
        return 0.0
    return traffic_ms(nbytes, rates.hbm_GBps, rates.hbm_efficiency)


def replay_ms(piece: Piece, setting: str, t: int, b: float, rates: ReplayRates, *, flash_attention: bool,
              sequence_parallel: bool) -> float:
    """Forward ms the backward of a module setting replays on ``piece`` (one of ``t`` GPUs, ``b`` samples); see
    the module table. 0 for ``none`` and for a piece without a block shape.

    ``rates`` hold the piece's own forward attention and collective times
    (all its passes); the GEMMs and memory-bound kernels are counted from
    its shape, times its passes.
    """
    mods = modules_of(setting)
    shape = piece.shape
    if not mods or shape is None:
        return 0.0
    ops: dict[str, Traffic] = block_traffic(shape, b, t, flash_attention=flash_attention,
                                            sequence_parallel=sequence_parallel)
    one_norm = ops["norms"].fwd / 2.0
    act = ops["activation"].fwd
    per_pass = 0.0  # GEMMs and memory-bound kernels of one pass
    timed = 0.0  # the caller's times (already over every pass)
    if "core_attn" in mods:
        per_pass += _ms(ops["flash_io"].fwd if flash_attention else ops["scores"].fwd, rates)
        timed += rates.attn_fwd_ms
    if shape.mla is not None:
        if "mla_up_proj" in mods:  # the query and key/value up-projections (split by tp) and the fused MLA RoPE
            m = shape.mla
            d_n = shape.head_dim - m.rope_head_dim
            up = (m.q_lora_rank or shape.hidden) * shape.heads * shape.head_dim + m.kv_lora_rank * shape.heads * (
                d_n + m.v_head_dim)
            rope = ops["mla_rope"].fwd if "mla_rope" in ops else 0.0
            per_pass += b * 2.0 * shape.tokens * up / t / rates.flop_per_ms + _ms(rope, rates)
        if "layernorm" in mods:
            per_pass += _ms(one_norm, rates)
    gemm = b * _mlp_flops(shape, shape.ffn) / t / rates.flop_per_ms
    if piece.moe is None:
        if "mlp" in mods:
            per_pass += gemm + _ms(act + one_norm, rates)
            timed += rates.collective_ms
    else:
        routed, shared = _moe_shares(piece)
        if "layernorm" in mods:
            per_pass += _ms(one_norm, rates)
        if "moe" in mods:
            router = b * 2.0 * shape.tokens * shape.hidden * piece.moe.experts / t / rates.flop_per_ms
            per_pass += gemm + router + _ms(act, rates)
            if piece.moe.top_k or piece.moe.shared_ffn:  # the MLP's tensor-parallel collective (ep > 1: all-to-alls)
                timed += rates.collective_ms
        else:
            if "moe_act" in mods:
                per_pass += _ms(routed * act, rates)
            if "shared_experts" in mods:
                per_pass += shared * gemm + _ms(shared * act, rates)
    return piece.passes * per_pass + timed


def op_kept_bytes(piece: Piece, b: float, t: int, *, flash_attention: bool, sequence_parallel: bool) -> float:
    """Bytes a block keeps under torchtitan's per-op policy (``op``) on one of ``t`` GPUs; see the module docstring.

    A MoE block keeps its attention's and shared MLP's saved outputs only:
    the routed experts' grouped GEMMs are not saved ops (with ep > 1 the
    all-to-all outputs are, :mod:`~partitioner.costs.axes.wiring` adds them).
    """
    shape = piece.shape
    if shape is None:
        return 0.0
    s, h, a, d = shape.tokens, shape.hidden, shape.heads, shape.head_dim
    kv = shape.kv_heads / t if shape.kv_heads >= t else 1.0
    sp = t if sequence_parallel else 1
    bf16 = 2.0
    kept = bf16 * s * b * h / sp  # the block input (the checkpoint's input)
    kept += bf16 * s * b * a * d / t + bf16 * s * b * kv * d  # wq (mm 1) and wv (mm 3) outputs
    kept += bf16 * s * b * a * d / t  # the attention output
    kept += 4.0 * a * s * b / t if flash_attention else (bf16 * a * b * (shape.score_entries or s * s) / t)
    reduce_scatters = 0
    if t > 1 and sequence_parallel:
        reduce_scatters += 1  # after wo
    ffn = shape.ffn
    if piece.moe is not None:
        ffn = piece.moe.shared_ffn  # the routed experts' grouped GEMMs keep nothing; the shared MLP is mm 5-7
    if ffn:
        kept += bf16 * s * b * ffn / t  # w1 (mm 5)
        if shape.gated:
            kept += bf16 * s * b * h  # w2 (mm 7): the row-parallel output before its reduce-scatter, whole sequence
        if t > 1 and sequence_parallel:
            reduce_scatters += 1
    kept += reduce_scatters * bf16 * s * b * h / t
    return piece.passes * kept


def op_replay_ms(piece: Piece, t: int, b: float, rates: ReplayRates, *, flash_attention: bool, sequence_parallel: bool,
                 routed: bool = True) -> float:
    """Forward ms torchtitan's per-op policy replays on a block: the memory-bound ops, ``wk``, ``wo`` and ``w3`` (or
    ``w2`` plain), the router and, with ``routed``, the routed experts' GEMMs, and the sequence-parallel all-gathers."""
    shape = piece.shape
    if shape is None:
        return 0.0
    s, h, a, d = shape.tokens, shape.hidden, shape.heads, shape.head_dim
    ops = block_traffic(shape, b, t, flash_attention=flash_attention, sequence_parallel=sequence_parallel)
    memory = sum(o.fwd for k, o in ops.items() if k not in ("flash_io", "scores"))
    flops = 2.0 * s * h * shape.kv_heads * d + 2.0 * s * a * d * h  # wk and wo, per sample (all ranks)
    if piece.moe is None:
        flops += 2.0 * s * h * shape.ffn  # w3 (gated) or w2 (plain): one h x ffn matrix
    else:
        moe = piece.moe
        flops += 2.0 * s * h * moe.experts  # the router gate (forced to recompute)
        if moe.shared_ffn:
            flops += 2.0 * s * h * moe.shared_ffn
        if routed:
            flops += _mlp_flops(shape, moe.top_k * moe.moe_ffn)
    gemm = b * flops / t / rates.flop_per_ms
    # the attention's and the dense (or shared) MLP's collectives: with sequence parallelism their all-gathers
    # (half an all-reduce each) run again, without it their all-reduces (outputs not saved either)
    collectives = 1 + (1 if piece.moe is None or piece.moe.shared_ffn else 0)
    comm = collectives * rates.collective_ms * (0.5 if sequence_parallel else 1.0) if t > 1 else 0.0
    return piece.passes * (gemm + _ms(memory, rates) + comm)


def module_chain(candidates: Sequence[tuple[Mapping[str, float], Mapping[str, float], float, float]],
                 limit: int = MAX_MODULE_LEVELS) -> list[str]:
    """The module sets worth a variant: nested, each freeing memory at a better rate than full recompute would.

    ``candidates`` holds, per block kind of the model (weighted by how many
    layers it has), ``(freed, replay, full_freed, full_replay)``: bytes freed
    and ms replayed per module (dicts keyed by module) and by full recompute.
    Greedily from no recompute, the next module is the one with the most
    bytes freed per ms replayed, taken while that rate beats the rate of
    going on to full recompute from the current point (the lower convex
    hull of (replay time, kept memory): a set above it frees memory at a
    worse rate than recomputing whole layers); at most ``limit`` sets.
    Modules that free nothing are never taken.
    """
    modules = sorted({m for c in candidates for m in c[0]}, key=MODULES.index)
    chosen: list[str] = []
    out: list[str] = []
    freed = replay = 0.0
    full_freed = sum(c[2] for c in candidates)
    full_replay = sum(c[3] for c in candidates)
    while len(out) < limit:
        best = None
        for m in modules:
            if m in chosen:
                continue
            trial = setting_of([*chosen, m])
            if trial in out or trial == "none":
                continue
            f = sum(_set_value(c[0], [*chosen, m]) for c in candidates)
            r = sum(_set_value(c[1], [*chosen, m]) for c in candidates)
            df, dr = f - freed, r - replay
            if df <= 0:
                continue
            rate = df / dr if dr > 0 else float("inf")
            if best is None or rate > best[0]:
                best = (rate, m, f, r)
        if best is None:
            break
        rate, m, f, r = best
        hull = (full_freed - freed) / (full_replay - replay) if full_replay > replay else 0.0
        if rate <= hull or f >= full_freed:
            break
        chosen.append(m)
        freed, replay = f, r
        out.append(setting_of(chosen))
    return out


def _set_value(per_module: Mapping[str, float], modules: Sequence[str]) -> float:
    """A set's bytes (or ms) from ``per_module`` values of single modules; ``moe`` replaces what it contains.

    The values add: each module frees distinct tensors and replays distinct
    work, except that ``moe`` contains ``moe_act`` and ``shared_experts``.
    """
    mods = set(modules)
    if "moe" in mods:
        mods -= set(ABSORBED["moe"])
    return sum(per_module.get(m, 0.0) for m in mods)


def dense_part_view(dense: Piece, routed: Piece) -> Piece:
    """The dense part of a MoE block (attention, router, shared MLP; :mod:`~partitioner.costs.axes.wiring`) as the module settings
    see it: still a MoE layer's block, with no routed experts of its own (``top_k = 0``)."""
    if routed.moe is None:
        return dense
    return replace(dense, moe=replace(routed.moe, top_k=0, params=0))


def expert_recompute(setting: str, *, stored: float, copies: float, moe_ffn: float, gated: bool, activation: str,
                     hidden: int, ep: int, compute_ms: float, dispatch_ms: float, rates: ReplayRates,
                     imbalance: float = 1.0, padded: bool = False, fused_glu: bool = True) -> tuple[float, float]:
    """``(bytes kept, ms replayed)`` of the routed experts of one MoE layer on one rank (ep > 1) under ``setting``.

    ``stored``: what they keep without recompute; ``copies``: the token
    copies the rank routes; ``compute_ms`` and ``dispatch_ms``: their GEMMs'
    and their forward all-to-alls' time. ``full`` and ``moe`` keep nothing
    and replay both (Megatron's MoE checkpoint runs dispatch and combine
    again [30]_); ``moe_act`` frees the activation outputs (all but the fc1
    output of each copy) and replays the activation kernel; ``op`` keeps
    the all-to-all outputs (dispatched and combined tokens, saved ops) and
    replays the grouped GEMMs [31]_; other settings change nothing here.
    ``fused_glu``: a gated expert's activation is Megatron-Core's fused
    weighted SwiGLU, which keeps gate and up (its input) and the fc2 input
    only, so ``moe_act`` frees the fc2 input alone (the options'
    ``expert_fused_glu``).
    ``stored`` counts the mean load (the stash sums many routings), the
    replay's time the busiest rank's (``imbalance``).

    References
    ----------
    .. [30] NVIDIA Megatron-Core 0.16.1, ``transformer/transformer_config.py``
       (``recompute_modules``: core_attn, moe_act, layernorm, mla_up_proj,
       mlp, moe, shared_experts; "moe_act, layernorm and mla_up_proj use
       output-discarding checkpointing"), ``transformer/transformer_layer.py``
       (``recompute_input_layernorm`` only when the input norm is not an
       ``IdentityOp``; ``recompute_mlp`` only on non-MoE layers),
       ``transformer/moe/moe_layer.py`` (``moe_layer_recompute`` checkpoints
       route, dispatch, experts and combine; ``shared_experts_recompute``),
       ``transformer/moe/experts.py`` (``activation_recompute`` discards the
       activation's output), ``models/gpt/gpt_layer_specs.py`` (the TE spec).
    .. [31] torchtitan 0.3.0, ``torchtitan/distributed/activation_checkpoint.py``
       (``SelectiveAC``: save compute and communication ops, "recomputes every
       second matmul", ``force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]``;
       ``FullAC``), ``torchtitan/models/llama3`` (``wq``, ``wk``, ``wv``,
       ``wo``; ``w2(silu(w1(x)) * w3(x))``).
    """
    if setting == "full":
        return 0.0, compute_ms + dispatch_ms
    if setting == OP:
        return (2.0 * copies * hidden * 2.0 if ep > 1 else 0.0), compute_ms
    mods = modules_of(setting)
    if "moe" in mods:
        return 0.0, compute_ms + dispatch_ms
    if "moe_act" not in mods:
        return stored, 0.0
    r = copies if padded else imbalance * copies  # the busiest rank's rows: what the replay takes
    block = BlockShape(tokens=1.0, hidden=hidden, heads=1, kv_heads=1, head_dim=1, ffn=int(moe_ffn), gated=gated,
                       activation=activation)
    keeps = COMPOSITE_ACTIVATIONS.get(activation, 1)
    if gated and fused_glu:  # the fused kernel's output, fc2's input, is the one tensor of width f it frees
        freed = copies * moe_ffn * 2.0
    else:
        tensors = keeps + 3 if gated else keeps + 1
        freed = copies * moe_ffn * 2.0 * tensors * _act_output_fraction(block)  # of the stash, which counts the mean
    extra = keeps - 1
    act_bytes = ((6.0 + 4.0 * extra) if gated else (4.0 + 4.0 * extra)) * r * moe_ffn  # :mod:`.traffic`'s activation
    return max(0.0, stored - freed), _ms(act_bytes, rates)


DENSE_MODULES = frozenset({"core_attn", "mlp"})
"""The modules that act on a dense (not MoE) layer of Megatron-Core's TE spec (its norms are fused: ``layernorm``
frees nothing there) [30]_.

References
----------
.. [30] As cited in :func:`expert_recompute`.
"""


def acting_modules(role: str, hint: Sequence[str] | None = None) -> frozenset[str]:
    """The modules that act on a layer: its cost-model hint (``meta.layers[i].recompute_modules``,
    :func:`applicable_modules` of its pieces) when given, else by role (a decoder layer: every module, as a MoE
    layer may be; any other: :data:`DENSE_MODULES`)."""
    if hint is not None:
        return frozenset(hint)
    return frozenset(MODULES) if role == "decoder" else DENSE_MODULES


def merge_settings(segments: Sequence[tuple[str, frozenset[str]]]) -> str | None:
    """The one Megatron setting that runs every segment as planned, or None: ``segments`` are ``(setting, acting)``,
    ``acting`` the modules that act on the segment's layers (:func:`acting_modules`, united over them).

    Megatron-Core applies one ``--recompute-modules`` list to every layer,
    and a module acts only where the layer has it [30]_ (``mlp`` on dense
    layers, ``moe_act`` on MoE layers, ``layernorm`` on standalone norms).
    So segments with module sets (or none, or selective) merge into the
    union ``U`` of their modules when each segment's own modules equal ``U``
    restricted to what acts on it. ``full`` and ``op`` merge only with
    themselves.

    References
    ----------
    .. [30] As cited in :func:`expert_recompute`.
    """
    settings = {s for s, _ in segments}
    if not settings:
        return "none"
    if settings & {"full", OP}:
        return next(iter(settings)) if len(settings) == 1 else None
    union = frozenset().union(*(modules_of(s) for s in settings))
    for setting, acts in segments:
        if union & acts != modules_of(setting) & acts:
            return None
    return setting_of(union)


def fp8_freed_delta(piece: "Piece", b: float, t: int, setting: str, saved: float, sequence_parallel: bool) -> float:
    """The part of FP8's activation change (:func:`~partitioner.costs.compute.precision.fp8_activation_delta`: the QKV and MLP inputs and
    fc2's input kept as fp8 copies, ``-saved`` bytes per element each) that falls on tensors ``setting`` frees:
    a freed tensor keeps no fp8 copy either, so this part is taken back (a negative number, like the delta)."""
    shape = piece.shape
    mods = modules_of(setting)
    if shape is None or not mods:
        return 0.0
    s, h = shape.tokens * b, shape.hidden
    sp = t if sequence_parallel else 1
    norm_out = -saved * s * h / sp  # the QKV input or the MLP input
    fc2 = -saved * s * shape.ffn / t
    out = 0.0
    mla = shape.mla is not None
    if piece.moe is None:
        if "mlp" in mods:
            out += norm_out + fc2
        if mla and "layernorm" in mods:
            out += norm_out
    else:
        routed, shared = _moe_shares(piece)
        if "layernorm" in mods:
            out += norm_out * (2 if mla else 1)
        if "moe" in mods:
            out += fc2
        else:
            out += fc2 * ((routed if "moe_act" in mods else 0.0) + (shared if "shared_experts" in mods else 0.0))
    return piece.passes * out
