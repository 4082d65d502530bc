"""Context parallelism (format v3's cp axis): what splitting every sequence over C ranks costs.

Contract: pure functions of a layer's shapes and a config's degrees.

* **what a layer allows** -- :func:`cp_algorithms` (a sliding-window or
chunked layer cannot run the ring [21]; a cross-attention layer none: its
keys come from another sequence), :func:`cp_problem` (why a cp degree does
not fit a layer: the sequence must split into 2 cp chunks with load
balancing [20]; Ulysses needs the heads per tensor-parallel rank
divisible by cp [21]).

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.axes.context``.
"""
from __future__ import annotations

from dataclasses import replace

from ..attention.mla import MLA_CP_ALGORITHMS
from ..layers import Piece
from ..options import CostOptions
from .groups import GroupSpan, alltoall_ms
from .options import CP_ALGORITHMS

__all__ = [
    "cp_algorithms",
    "cp_problem",
    "causal_load_factor",
    "kv_bytes",
    "ring_bytes",
    "ulysses_bytes",
    "allgather_bytes",
    "cp_attention_ms",
    "ring_exposed_ms",
    "shard_piece",
    "dense_sync_ranks",
]


def cp_algorithms(*, windowed: bool = False, cross: bool = False, mla: bool = False) -> tuple[str, ...]:
    """The context-parallel attention algorithms a layer can run.

    A cross-attention layer (mllama) runs none: its keys and values are
    another sequence's, and neither Megatron-LM nor torchtitan has a
    context-parallel path for it. A sliding-window or chunked layer
    (Gemma 2/3, Llama 4) cannot run the ring [21]_. Multi-head latent
    attention (key and value heads of different widths) runs only the ring
    (Transformer Engine asserts ``cp_comm_type in ["p2p", "a2a+p2p"]`` for
    it [21]_; :mod:`..attention.mla`).

    References
    ----------
    .. [21] NVIDIA Transformer Engine, ``context_parallel.py``:
       ``AttnFuncWithCPAndKVP2P`` (cp-1 KV sends forward; KV, KV+dKV and dKV
       backward), ``AttnFuncWithCPAndKVAllGather``, ``AttnFuncWithCPAndQKVOA2A``
       (asserts heads divisible by cp), and ``assert not sliding_window_attn or
       cp_comm_type in ["a2a", "all_gather"]``.
    """
    if cross:
        return ()
    if windowed:
        return () if mla else ("a2a", "all_gather")
    if mla:
        return tuple(a for a in CP_ALGORITHMS if a in MLA_CP_ALGORITHMS)
    return CP_ALGORITHMS


def _kv_local(kv_heads: int, tp: int) -> float:
    """Key/value heads on one tensor-parallel rank (Megatron replicates one when kv_heads < tp)."""
    return kv_heads / tp if kv_heads >= tp else 1.0


def cp_problem(cp: int, tokens: int, heads: int, kv_heads: int, tp: int, algorithm: str, *, balanced: bool = True) -> str | None:
    """Why ``cp`` cannot split a layer of ``tokens`` per sample with ``algorithm``; None when it can.

    The sequence splits into ``2 cp`` equal chunks with load balancing
    (``cp`` without) [20]_; Ulysses (``a2a``) moves whole heads, so the
    query and key/value heads on a tensor-parallel rank must divide by
    ``cp`` [21]_.

    References
    ----------
    .. [20] NVIDIA Megatron-LM: ``megatron/core/utils.py``
       (``get_batch_on_this_cp_rank``), ``megatron/training/arguments.py``
       (``seq_length % (2 * context_parallel_size) == 0``),
       ``megatron/core/parallel_state.py`` (the ``dp_cp`` gradient group), and
       ``docs/user-guide/features/context_parallel.md``.
    .. [21] NVIDIA Transformer Engine, ``context_parallel.py``:
       ``AttnFuncWithCPAndKVP2P`` (cp-1 KV sends forward; KV, KV+dKV and dKV
       backward), ``AttnFuncWithCPAndKVAllGather``, ``AttnFuncWithCPAndQKVOA2A``
       (asserts heads divisible by cp), and ``assert not sliding_window_attn or
       cp_comm_type in ["a2a", "all_gather"]``.
    """
    if cp == 1:
        return None
    chunks = 2 * cp if balanced else cp
    if tokens % chunks:
        return f"the sequence of {tokens} tokens does not split into {chunks} equal chunks (cp={cp})"
    if algorithm == "a2a":
        q_local, kv_local = heads / tp, _kv_local(kv_heads, tp)
        if q_local % cp or kv_local % cp:
            return (f"a2a needs the heads per tensor-parallel rank divisible by cp={cp} "
                    f"(query {q_local:g}, key/value {kv_local:g} with tp={tp})")
    return None


def causal_load_factor(cp: int, balanced: bool, chunk_tokens: float | None = None) -> float:
    """The busiest rank's causal query-key pairs over the mean, sequence split over ``cp`` ranks.

    Contiguous chunks of ``c`` tokens: rank i computes ``c^2 i + c(c+1)/2``
    pairs, the last rank ``(c(2cp-1) + 1) / (cp c + 1)`` times the mean,
    ``2 - 1/cp`` for long chunks (``chunk_tokens=None``). With 2 cp chunks
    of ``u = c/2``, rank i holding chunks i and 2cp-1-i computes ``u^2
    (2cp-1) + u(u+1)`` pairs whatever i: factor 1 [20]_.

    References
    ----------
    .. [20] NVIDIA Megatron-LM: ``megatron/core/utils.py``
       (``get_batch_on_this_cp_rank``), ``megatron/training/arguments.py``
       (``seq_length % (2 * context_parallel_size) == 0``),
       ``megatron/core/parallel_state.py`` (the ``dp_cp`` gradient group), and
       ``docs/user-guide/features/context_parallel.md``.
    """
    if cp <= 1 or balanced:
        return 1.0
    if chunk_tokens is None:
        return 2.0 - 1.0 / cp
    c = float(chunk_tokens)
    return (c * (2 * cp - 1) + 1) / (cp * c + 1)


def kv_bytes(chunk_tokens: float, samples: float, kv_heads: int, head_dim: float, tp: int, elem_bytes: float = 2.0) -> float:
    """K and V of one rank's chunk: ``2 c b (G/t) d`` elements (one head when G < t)."""
    return 2.0 * chunk_tokens * samples * _kv_local(kv_heads, tp) * head_dim * elem_bytes


def ring_bytes(cp: int, kv: float) -> tuple[float, float]:
    """Bytes a rank sends in the ring (``p2p``) per layer: ``((cp-1) KV, 2 (cp-1) KV)`` forward, backward [21]_.

    Backward sends KV at the first step, KV and dKV at the middle steps and
    dKV at the last: ``1 + 2 (cp-2) + 1 = 2 (cp-1)`` KV-sized messages.

    References
    ----------
    .. [21] NVIDIA Transformer Engine, ``context_parallel.py``:
       ``AttnFuncWithCPAndKVP2P`` (cp-1 KV sends forward; KV, KV+dKV and dKV
       backward), ``AttnFuncWithCPAndKVAllGather``, ``AttnFuncWithCPAndQKVOA2A``
       (asserts heads divisible by cp), and ``assert not sliding_window_attn or
       cp_comm_type in ["a2a", "all_gather"]``.
    """
    if cp <= 1:
        return 0.0, 0.0
    return (cp - 1) * kv, 2.0 * (cp - 1) * kv


def ulysses_bytes(cp: int, chunk_tokens: float, samples: float, heads: int, kv_heads: int, head_dim: float, tp: int,
                  elem_bytes: float = 2.0) -> tuple[float, float]:
    """Bytes a rank sends in Ulysses' all-to-alls per layer, ``(forward, backward)`` [22]_.

    Forward: Q, K and V to head-sharded full-sequence tensors, O back;
    each all-to-all sends ``(cp-1)/cp`` of its local buffer. Backward moves
    dO, then dQ, dK, dV: the same volume. With ``kv_heads = heads`` and
    ``heads x head_dim = h`` this is ``(cp-1)/cp x 4 c b h / t`` elements,
    DeepSpeed's ``4 N h / P`` for ``N = c b cp`` tokens and ``P = cp``.

    References
    ----------
    .. [22] S. A. Jacobs et al., "DeepSpeed Ulysses", arXiv:2309.14509 (2023),
       Section 3: communication volume per link 4Nh/P.
    """
    if cp <= 1:
        return 0.0, 0.0
    per_head = chunk_tokens * samples * head_dim * elem_bytes
    local = per_head * (2 * heads / tp + 2 * _kv_local(kv_heads, tp))  # Q and O; K and V
    sent = (cp - 1) / cp * local
    return sent, sent


def allgather_bytes(cp: int, kv: float) -> tuple[float, float]:
    """Bytes a rank receives with all-gathered KV per layer: ``((cp-1) KV, 2 (cp-1) KV)``.

    Forward all-gathers KV. The backward keeps only the local chunk (the
    memory the all-gather saves [20]_), so it gathers KV again and
    reduce-scatters dKV.

    References
    ----------
    .. [20] NVIDIA Megatron-LM: ``megatron/core/utils.py``
       (``get_batch_on_this_cp_rank``), ``megatron/training/arguments.py``
       (``seq_length % (2 * context_parallel_size) == 0``),
       ``megatron/core/parallel_state.py`` (the ``dp_cp`` gradient group), and
       ``docs/user-guide/features/context_parallel.md``.
    """
    if cp <= 1:
        return 0.0, 0.0
    return (cp - 1) * kv, 2.0 * (cp - 1) * kv


def cp_attention_ms(algorithm: str, cp: int, span: GroupSpan, *, kv: float, ulysses: tuple[float, float],
                    attn_fwd_ms: float, attn_bwd_ms: float, intra_GBps: float, inter_GBps: float, opts: CostOptions,
                    links: str = "max") -> tuple[float, float]:
    """Exposed ``(forward, backward)`` ms of one layer's context-parallel attention traffic on one rank.

    ``p2p``: ``cp`` steps, each computing ``1/cp`` of the rank's attention
    (``attn_fwd_ms``, ``attn_bwd_ms``, already with the load factor) while
    the next KV chunk (backward: KV and dKV) travels; a step whose send
    takes longer exposes the difference, and the backward's last dKV send
    is exposed (:func:`ring_exposed_ms`) [26]_. The ring's slowest hop is
    the network when the group spans nodes. ``all_gather``: one all-gather
    forward, an all-gather and a reduce-scatter backward, exposed.
    ``a2a``: Q, K, V and O all-to-alls (``ulysses``: the bytes each rank
    sends, forward and backward) over the group, exposed.

    References
    ----------
    .. [26] H. Liu, M. Zaharia, P. Abbeel, "Ring Attention with Blockwise
       Transformers for Near-Infinite Context", arXiv:2310.01889 (2023).
    """
    if cp <= 1:
        return 0.0, 0.0
    GBps, eff = (intra_GBps, opts.nvlink_efficiency) if span.inside_node else (inter_GBps, 1.0)
    alpha = opts.collective_latency_us * 1e-3
    if algorithm == "p2p":
        return ring_exposed_ms(cp, alpha + kv / (eff * GBps * 1e6), alpha + 2.0 * kv / (eff * GBps * 1e6),
                               attn_fwd_ms / cp, attn_bwd_ms / cp)
    if algorithm == "all_gather":
        gather = alpha + (cp - 1) * kv / (eff * GBps * 1e6)
        return gather, 2.0 * gather
    if algorithm == "a2a":
        # four launches each way; the volume of the four together (ulysses) as one buffer
        fwd_bytes, bwd_bytes = ulysses
        out = []
        for sent in (fwd_bytes, bwd_bytes):
            buffer = sent * cp / (cp - 1)  # alltoall_ms takes the local buffer, sends (r-1)/r of it
            once = alltoall_ms(buffer, span, intra_GBps, inter_GBps, latency_us=opts.collective_latency_us,
                               nvlink_efficiency=opts.nvlink_efficiency, links=links,
                               network_efficiency=opts.axes.alltoall_network_efficiency)
            out.append(once + 3 * alpha)
        return out[0], out[1]
    raise ValueError(f"unknown context-parallel algorithm {algorithm!r} (known: {', '.join(CP_ALGORITHMS)})")


def ring_exposed_ms(cp: int, send_ms: float, send_pair_ms: float, step_fwd_ms: float,
                    step_bwd_ms: float) -> tuple[float, float]:
    """Exposed ``(forward, backward)`` ms of the ring's transfers, step by step [21]_ [26]_.

    Each of the ``cp`` steps computes attention over one KV chunk
    (``step_*_ms``, the load-balanced steps being equal) while the next
    chunk travels. Forward: steps 0 .. cp-2 each overlap one KV send
    (``send_ms``); a step exposes ``max(0, send - step)``; the last step
    sends nothing. Backward: step 0 sends KV, steps 1 .. cp-2 send KV and
    the dKV accumulated so far (``send_pair_ms``), each beside its step's
    attention; the last dKV reaches its owner only after the last step's
    attention, so that send is exposed whole.

    References
    ----------
    .. [21] NVIDIA Transformer Engine, ``context_parallel.py``:
       ``AttnFuncWithCPAndKVP2P`` (cp-1 KV sends forward; KV, KV+dKV and dKV
       backward), ``AttnFuncWithCPAndKVAllGather``, ``AttnFuncWithCPAndQKVOA2A``
       (asserts heads divisible by cp), and ``assert not sliding_window_attn or
       cp_comm_type in ["a2a", "all_gather"]``.
    .. [26] H. Liu, M. Zaharia, P. Abbeel, "Ring Attention with Blockwise
       Transformers for Near-Infinite Context", arXiv:2310.01889 (2023).
    """
    if cp <= 1:
        return 0.0, 0.0
    fwd = (cp - 1) * max(0.0, send_ms - step_fwd_ms)
    bwd = max(0.0, send_ms - step_bwd_ms) + (cp - 2) * max(0.0, send_pair_ms - step_bwd_ms) + send_ms
    return fwd, bwd


def shard_piece(piece: Piece, cp: int, load_factor: float = 1.0) -> Piece:
    """``piece`` on one of ``cp`` context-parallel ranks: its sequence share, the busiest rank's attention.

    Tokens, weighted-matmul FLOPs, stored activations and score entries /
    cp; the attention core's FLOPs and pairs x ``load_factor`` / cp. The
    weights (parameters) are whole on every rank.
    """
    if cp == 1:
        return piece
    lf = load_factor

    def div(x: float | None, k: float = 1.0) -> float | None:
        return None if x is None else x * k / cp

    shape = piece.shape
    if shape is not None:
        entries = shape.tokens**2 if shape.score_entries is None else shape.score_entries
        shape = replace(shape, tokens=shape.tokens / cp, score_entries=entries / cp)
    return replace(
        piece,
        tokens=piece.tokens / cp,
        gemm_flops=piece.gemm_flops / cp,
        bf16_gemm_flops=piece.bf16_gemm_flops / cp,
        attn_flops=piece.attn_flops * lf / cp,
        attn_pairs=piece.attn_pairs * lf / cp,
        score_entries=piece.score_entries / cp,
        dense_act=(piece.dense_act[0] / cp, piece.dense_act[1] / cp),
        input_gemm_flops=piece.input_gemm_flops / cp,
        replicated_gemm_flops=piece.replicated_gemm_flops / cp,
        bwd_gemm_flops=div(piece.bwd_gemm_flops),
        bwd_attn_flops=div(piece.bwd_attn_flops, lf),
        shape=shape,
    )


def dense_sync_ranks(dp: int, cp: int) -> int:
    """Ranks of the dense-gradient all-reduce: ``dp x cp`` (CP ranks ride on the data-parallel group [20]_).

    References
    ----------
    .. [20] NVIDIA Megatron-LM: ``megatron/core/utils.py``
       (``get_batch_on_this_cp_rank``), ``megatron/training/arguments.py``
       (``seq_length % (2 * context_parallel_size) == 0``),
       ``megatron/core/parallel_state.py`` (the ``dp_cp`` gradient group), and
       ``docs/user-guide/features/context_parallel.md``.
    """
    return dp * cp
