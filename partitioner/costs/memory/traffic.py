"""Memory-bound work: the bytes a layer's non-matmul kernels move through HBM.

Contract: :func:`block_traffic` gives, for a transformer block described by
a :class:`~.activations.BlockShape`, the bytes its memory-bound kernels read
and write per microbatch of ``b`` samples on one of ``t`` GPUs, one
:class:`Traffic` (forward bytes, backward bytes) per named op;
:func:`embedding_traffic`, :func:`head_traffic` and
:func:`projector_traffic` the same for the embedding, the output layer with
its loss and a projector; :func:`traffic_ms` turns bytes into time at the
GPU's HBM bandwidth times ``hbm_efficiency``. Pure arithmetic.

Time of such a kernel = bytes / (HBM bandwidth x efficiency): softmax,
dropout, norms, activations, residual adds do a few FLOPs per byte, far
below the ridge point of an A100 (312 TFLOP/s / 2.0 TB/s = 153 FLOP/B)
or an H100 (989 / 3.35 = 295 FLOP/B), so their FLOPs never bind [12]_.

Bytes per element (2-byte bf16/fp16 activations, 1-byte dropout masks;
``E = s b h`` elements of the block's width, ``F = s b f / t`` of the MLP's,
``Q = s b (a/t + k_t) d`` of the rotated queries and keys, ``S = (a/t) b s'``
score entries; ``/ p`` where sequence parallelism shards, ``p = t`` with
it and 1 without -- norms, dropouts and residuals are then *replicated* on
every tensor-parallel rank [2]_):

==============  =========================================  ====================================  ============
op              forward (reads + writes)                   backward                              elements
==============  =========================================  ====================================  ============
``norms``       2 norms x (read x 2 + write y 2) = 8       2 x (x, dy, write dx) = 12            E / p
``residuals``   2 x bias-dropout-add: read x, residual,    2 x (sum of grads 6, dropout: read    E / p
                write 6 (+ mask 1 with dropout)            dy 2, mask 1, write 2)
``activation``  plain: read, write 4; gated: read gate     plain: x, dy, write dx 6; gated:      F
                and up, write 6; +4 per extra op           10; +6 per extra op
                (quick_gelu)
``rotary``      read, write 4                              4                                     Q
``qk_norm``     4                                          6                                     Q
``scores``      no flash: QK^T write 2, scale-mask-        dP write 2, dropout 5, softmax        S
                softmax read+write 4, dropout 5, AV        read y, dy, write 6, dQ/dK/dV
                read 2 = 13 (8 without dropout)            reads 6 = 19 (14 without)
``flash_io``    flash: read Q, K, V, write O:              read Q, K, V, O, dO, write dQ, dK,    s b d
                2 (2a/t + 2k_t)                            dV: 2 (4a/t + 4k_t)
==============  =========================================  ====================================  ============

Multi-head latent attention (:mod:`~partitioner.costs.attention.mla`) replaces ``rotary``
by the fused MLA RoPE kernels (``mla_rope``) and adds its two latent norms
(``latent_norms``); its ``flash_io`` counts Q and K of ``d_qk`` and V and
O of ``v_head_dim`` per head.

``k_t`` is the key/value heads per GPU (``k/t``, at least 1). The score
entries ``s'`` are the whole ``s x s`` matrix per head without flash
attention (the masked half of a causal mask is written and read too);
with flash attention the matrix never reaches HBM [5]_.

Dense layers (:func:`embedding_traffic`, :func:`head_traffic`,
:func:`projector_traffic`): the embedding lookup (read and write
4 B per element of ``E``), the learned position add (6) and the embedding
dropout (5) forward; its backward writes a dense ``V x h / t`` gradient
(4 B per element: zeroed, then accumulated) and reads ``E`` (2); the
output layer's final norm as above, and the cross-entropy over ``s b V / t``
fp32 logits at ``loss_bytes_per_logit`` (:class:`~partitioner.costs.options.CostOptions`).

References
----------
.. [2] V. Korthikanti et al., "Reducing Activation Recomputation in Large
   Transformer Models", MLSys 2023, arXiv:2205.05198, Section 4.2.2 (which
   tensors sequence parallelism shards) and Table 4 (per-layer times of
   a 22B GPT layer on A100: 7.7 ms forward, selective recompute 1.3 ms).
.. [5] T. Dao, "FlashAttention-2", arXiv:2307.08691 (2023): O(N d) HBM
   accesses instead of O(N^2).
.. [12] S. Williams, A. Waterman, D. Patterson, "Roofline: An Insightful
   Visual Performance Model for Multicore Architectures", CACM 52(4), 2009.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..attention.mla import mla_traffic
from .activations import COMPOSITE_ACTIVATIONS, BlockShape

__all__ = ["Traffic", "block_traffic", "embedding_traffic", "head_traffic", "projector_traffic", "traffic_ms",
           "SCORE_BYTES_FWD", "SCORE_BYTES_BWD"]

# bytes per score entry moved by the non-flash attention core (see the module table)
SCORE_BYTES_FWD = 8.0  # QK^T output write 2, fused scale-mask-softmax read + write 4, AV read 2
SCORE_BYTES_BWD = 14.0  # dP write 2, softmax backward read y, dy + write dx 6, dQ, dK, dV GEMMs read 6
DROPOUT_BYTES_FWD = 5.0  # read 2, write 2, mask 1
DROPOUT_BYTES_BWD = 5.0  # read dy 2, mask 1, write dx 2


@dataclass(frozen=True)
class Traffic:
    """Bytes one op moves through HBM per microbatch on one GPU: forward and backward."""

    fwd: float
    bwd: float


def block_traffic(block: BlockShape, b: float, t: int = 1, *, flash_attention: bool = False,
                  sequence_parallel: bool = False) -> dict[str, Traffic]:
    """Bytes each memory-bound op of a block moves, per microbatch of ``b`` samples on one of ``t`` GPUs.

    See the module docstring for the per-element counts; zero ops are left out.
    """
    s, h, a, k, d, f = block.tokens, block.hidden, block.heads, block.kv_heads, block.head_dim, block.ffn
    p = t if sequence_parallel else 1
    E = s * b * h / p
    F = s * b * f / t
    kv = k / t if k >= t else 1.0
    Q = s * b * (a / t + kv) * d
    drop = DROPOUT_BYTES_FWD - 4.0 if block.dropout else 0.0  # the fused bias-dropout-add adds the mask write
    out: dict[str, Traffic] = {
        "norms": Traffic(8.0 * E, 12.0 * E),
        "residuals": Traffic(2 * (6.0 + drop) * E, 2 * (6.0 + (DROPOUT_BYTES_BWD if block.dropout else 0.0)) * E),
    }
    extra = COMPOSITE_ACTIVATIONS.get(block.activation, 1) - 1
    if block.gated:
        out["activation"] = Traffic((6.0 + 4.0 * extra) * F, (10.0 + 6.0 * extra) * F)
    else:
        out["activation"] = Traffic((4.0 + 4.0 * extra) * F, (6.0 + 6.0 * extra) * F)
    if block.mla is not None:  # the latent norms and the fused MLA RoPE kernels instead of the rotary op
        for name, (fwd, bwd) in mla_traffic(block.mla, s, b, a / t, d, p).items():
            out[name] = Traffic(fwd, bwd)
    elif block.rotary:
        out["rotary"] = Traffic(4.0 * Q, 4.0 * Q)
    if block.qk_norm:
        out["qk_norm"] = Traffic(4.0 * Q, 6.0 * Q)
    if flash_attention and block.mla is not None:  # Q, K of d_qk and V, O of v_head_dim per head
        dqv = d + block.mla.v_head_dim
        out["flash_io"] = Traffic(2.0 * s * b * dqv * (a / t + kv), 2.0 * s * b * dqv * (2 * a / t + 2 * kv))
    elif flash_attention:
        out["flash_io"] = Traffic(2.0 * s * b * d * (2 * a / t + 2 * kv), 2.0 * s * b * d * (4 * a / t + 4 * kv))
    else:
        entries = s * s if block.score_entries is None else block.score_entries
        S = a / t * b * entries
        fwd = SCORE_BYTES_FWD + (DROPOUT_BYTES_FWD if block.dropout else 0.0)
        bwd = SCORE_BYTES_BWD + (DROPOUT_BYTES_BWD if block.dropout else 0.0)
        out["scores"] = Traffic(fwd * S, bwd * S)
    return out


def embedding_traffic(tokens: float, hidden: int, vocab: int, b: float, t: int, *, positions: bool, dropout: bool,
                      sequence_parallel: bool = False, backward: bool = True) -> Traffic:
    """The token embedding: lookup (4 B per element), a learned position add (6), dropout (5); backward reads
    the gradient (2) and writes the dense ``vocab x hidden / t`` weight gradient (4 B per element)."""
    E = tokens * b * hidden / (t if sequence_parallel else 1)
    fwd = (4.0 + (6.0 if positions else 0.0) + (DROPOUT_BYTES_FWD if dropout else 0.0)) * E
    bwd = (2.0 + (DROPOUT_BYTES_BWD if dropout else 0.0)) * E + 4.0 * vocab * hidden / t if backward else 0.0
    return Traffic(fwd, bwd)


def head_traffic(tokens: float, hidden: int, vocab: int, b: float, t: int, loss_bytes: tuple[float, float], *,
                 sequence_parallel: bool = False) -> Traffic:
    """The output layer: its final norm (8 and 12 B per element) and the cross-entropy over ``b s V / t`` logits
    at ``loss_bytes`` (forward, backward) per logit."""
    E = tokens * b * hidden / (t if sequence_parallel else 1)
    logits = tokens * b * vocab / t
    return Traffic(4.0 * E + loss_bytes[0] * logits, 6.0 * E + loss_bytes[1] * logits)


def projector_traffic(tokens: float, dims: tuple[int, ...], b: float, t: int) -> Traffic:
    """A projector MLP: one activation (read, write 4; backward 6) per hidden width."""
    F = sum(tokens * b * w / t for w in dims[:-1])
    return Traffic(4.0 * F, 6.0 * F)


def traffic_ms(nbytes: float, hbm_GBps: float, efficiency: float) -> float:
    """Milliseconds to move ``nbytes`` at ``hbm_GBps`` GB/s x ``efficiency``."""
    if nbytes <= 0:
        return 0.0
    return nbytes / (efficiency * hbm_GBps * 1e6)
