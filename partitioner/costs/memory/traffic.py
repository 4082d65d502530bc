"""Memory-bound work: the bytes a layer's non-matmul kernels move through HBM.

Contract: :func:`block_traffic` gives, for a transformer block described by
a :class:`~.activations.BlockShape`, the bytes its memory-bound kernels read
and write per microbatch of ``b`` samples on one of ``t`` GPUs, one
:class:`Traffic` (forward bytes, backward bytes) per named op;
:func:`embedding_traffic`, :func:`head_traffic` and
:func:`projector_traffic` the same for the embedding, the output layer with
its loss and a projector; :func:`traffic_ms` turns bytes into time at the
GPU's HBM bandwidth times ``hbm_efficiency``. Pure arithmetic.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.memory.traffic``.
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
