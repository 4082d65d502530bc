"""Flash attention timed as its kernels run: per GPU generation, head dim, key length, causal tiles, pass.

Contract: :func:`attention_rate` is the TFLOP/s a flash-attention kernel
reaches on a cluster's GPU for one pass (``fwd`` or ``bwd``), head dim and
key-loop length, from published kernel measurements (None for a GPU
generation none was published for: the caller keeps its dense-GEMM rate);
:func:`flash_attention_ms` is a pipeline-layer piece's attention core in
ms, forward or backward, at those rates, with the work a causal mask
really costs (:func:`computed_pairs`). Pure functions.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.attention.flash``.
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Mapping

from ...presets import ClusterSpec

if TYPE_CHECKING:
    from ..layers import Piece
    from ..options import CostOptions

__all__ = ["FLASH_TILE", "FLASH_KEYS", "HOPPER_FWD", "HOPPER_FWD_CAUSAL", "HOPPER_BWD_128", "AMPERE_FWD_BWD",
           "AMPERE_FWD_BWD_CAUSAL", "H100_PEAK", "A100_PEAK", "family", "attention_rate", "key_loop", "computed_pairs",
           "flash_attention_ms"]

FLASH_TILE = 128
"""Query and key rows per tile of the FlashAttention-2/3 kernels (``kBlockM``; ``kBlockN`` is 64-176 by head
dim), the granularity of a mask's edge [11]_ [12]_.

References
----------
.. [11] T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism
   and Work Partitioning", arXiv:2307.08691 (2023), Sec. 3.1.1 (causal
   masking: blocks above the diagonal skipped, the diagonal block masked)
   and Fig. 4 (A100 80GB SXM4, forward + backward, TFLOP/s).
.. [12] J. Shah et al., "FlashAttention-3: Fast and Accurate Attention with
   Asynchrony and Low-precision", arXiv:2407.08608 (2024), Fig. 5 (H100
   80GB SXM5 forward, FP16, head dims 64/128/256, with and without the
   causal mask) and Fig. 6 (backward, head dim 128): value labels as printed.
"""

FLASH_KEYS = (512, 1024, 2048, 4096, 8192, 16384)
"""The sequence lengths of the published curves (batch x sequence = 16k tokens)."""

Curves = Mapping[int, tuple[float | None, ...]]

HOPPER_FWD: Curves = {
    64: (333, 392, 460, 476, 496, 497),
    128: (467, 565, 625, 638, 646, 648),
    256: (482, None, 707, 736, 746, 756),  # the 1k label is hidden in the figure
}
"""FlashAttention-3 forward, non-causal, TFLOP/s on H100 SXM5 by head dim [12]_ (Fig. 5).

References
----------
.. [12] As cited in :data:`FLASH_TILE`.
"""

HOPPER_FWD_CAUSAL: Curves = {
    64: (197, 265, 371, 420, 460, 473),
    128: (292, 423, 521, 579, 602, 616),
    256: (286, 427, 537, 612, 628, 642),
}
"""FlashAttention-3 forward, causal (causal FLOPs counted), TFLOP/s on H100 SXM5 by head dim [12]_ (Fig. 5).

References
----------
.. [12] As cited in :data:`FLASH_TILE`.
"""

HOPPER_BWD_128: tuple[float, ...] = (316, 424, 501, 542, 559, 561)
"""FlashAttention-3 backward, non-causal, head dim 128, TFLOP/s on H100 SXM5 [12]_ (Fig. 6).

References
----------
.. [12] As cited in :data:`FLASH_TILE`.
"""

AMPERE_FWD_BWD: Curves = {
    64: (132, 153, 162, 171, 175, 176),
    128: (None, 173, 187, 196, 201, 203),  # the 512 label is hidden in the figure
}
"""FlashAttention-2 forward + backward, non-causal, TFLOP/s on A100 80GB SXM4 by head dim [11]_ (Fig. 4).

References
----------
.. [11] As cited in :data:`FLASH_TILE`.
"""

AMPERE_FWD_BWD_CAUSAL: Curves = {
    64: (88, 119, 140, 156, 165, 171),
    128: (99, 133, 155, 173, 182, 189),
}
"""FlashAttention-2 forward + backward, causal, TFLOP/s on A100 80GB SXM4 by head dim [11]_ (Fig. 4).

References
----------
.. [11] As cited in :data:`FLASH_TILE`.
"""

H100_PEAK = 989.4
"""H100 SXM5 dense BF16 peak (TFLOP/s), the denominator of Hopper's curves as fractions of peak."""
A100_PEAK = 312.0
"""A100 dense BF16 peak (TFLOP/s)."""

_MARKS = (("blackwell", ("GB200", "B200", "B100")), ("hopper", ("H100", "H200", "H800")), ("ampere", ("A100", "A800")))


def family(cluster: ClusterSpec) -> str | None:
    """The GPU family whose flash-attention curves apply (hopper, blackwell, ampere), None when unknown."""
    name = (cluster.gpu or "").upper()
    for fam, marks in _MARKS:
        if any(m in name for m in marks):
            return fam
    return None


def _points(curve: tuple[float | None, ...]) -> list[tuple[float, float]]:
    return [(math.log2(k), float(v)) for k, v in zip(FLASH_KEYS, curve) if v is not None]


def _short_keys(keys: float, pts: list[tuple[float, float]]) -> float:
    """Below the first point: a fixed cost per query tile of ``k0`` keys' work, from the first two points."""
    (x0, r0), (x1, r1) = pts[0], pts[1]
    k_0, k_1 = 2.0**x0, 2.0**x1
    # r1 / r0 = (k1 / (k1 + k0)) / (k_0 / (k_0 + k0))  =>  k0
    ratio = r1 / r0
    c = (ratio * k_0 * k_1 - k_0 * k_1) / (k_1 - ratio * k_0) if k_1 > ratio * k_0 else 0.0
    c = max(c, 0.0)
    return r0 * (keys / (keys + c)) / (k_0 / (k_0 + c))


def _on_curve(curve: tuple[float | None, ...], keys: float) -> float:
    """The curve at ``keys`` (linear in log2 between points, flat above the last, :func:`_short_keys` below)."""
    pts = _points(curve)
    keys = max(keys, 1.0)
    x = math.log2(keys)
    if x <= pts[0][0]:
        return _short_keys(keys, pts)
    for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
        if x <= xb:
            return ya + (yb - ya) * (x - xa) / (xb - xa)
    return pts[-1][1]


def _by_head_dim(table: Curves, head_dim: float, keys: float) -> float:
    """The table's rate at ``head_dim`` (linear in log2 between the measured head dims, clamped outside)."""
    dims = sorted(table)
    if head_dim <= dims[0]:
        return _on_curve(table[dims[0]], keys)
    if head_dim >= dims[-1]:
        return _on_curve(table[dims[-1]], keys)
    for a, b in zip(dims, dims[1:]):
        if head_dim <= b:
            ra, rb = _on_curve(table[a], keys), _on_curve(table[b], keys)
            w = (math.log2(head_dim) - math.log2(a)) / (math.log2(b) - math.log2(a))
            return ra + (rb - ra) * w
    raise AssertionError("unreachable")


def attention_rate(cluster: ClusterSpec, head_dim: float, length: float, direction: str,
                   causal: bool = False) -> float | None:
    """TFLOP/s of a flash-attention pass (``fwd`` or ``bwd``) on ``cluster``'s GPU: non-causal with a key loop
    of ``length``, or causal over a block of ``length`` tokens (causal FLOPs counted); None when no curve applies
    (see the module docstring)."""
    fam = family(cluster)
    if fam is None:
        return None
    return _rate(fam, cluster.peak_tflops, head_dim, length, direction, causal)


@functools.lru_cache(maxsize=1 << 16)
def _rate(fam: str, peak_tflops: float, head_dim: float, length: float, direction: str, causal: bool) -> float:
    """:func:`attention_rate` of a GPU family with ``peak_tflops`` (cached: a model's layers ask the same few
    lengths again for every layout)."""
    if fam == "ampere":
        table = AMPERE_FWD_BWD_CAUSAL if causal else AMPERE_FWD_BWD
        return _by_head_dim(table, head_dim, length) / A100_PEAK * peak_tflops
    rate = _by_head_dim(HOPPER_FWD_CAUSAL if causal else HOPPER_FWD, head_dim, length)
    if direction == "bwd":
        bwd = _on_curve(HOPPER_BWD_128, length) * _by_head_dim(HOPPER_FWD, head_dim, length) / _by_head_dim(
            HOPPER_FWD, 128, length)
        rate = bwd * (rate / _by_head_dim(HOPPER_FWD, head_dim, length) if causal else 1.0)
    return rate / H100_PEAK * peak_tflops


def key_loop(piece: "Piece") -> float:
    """The keys each query of ``piece`` attends to (``attn_pairs / tokens``), a non-causal kernel's loop length."""
    if piece.tokens <= 0 or piece.attn_pairs <= 0:
        return 0.0
    return piece.attn_pairs / piece.tokens


def computed_pairs(piece: "Piece") -> float:
    """Query-key pairs a non-causal flash kernel computes per head and sample: each query's keys rounded up to
    whole key tiles of :data:`FLASH_TILE` [11]_ (a 64-patch window runs one 128-key tile, half of it masked).

    References
    ----------
    .. [11] As cited in :data:`FLASH_TILE`.
    """
    keys = key_loop(piece)
    if keys <= 0:
        return 0.0
    return piece.attn_pairs * math.ceil(keys / FLASH_TILE - 1e-9) * FLASH_TILE / keys


def flash_attention_ms(piece: "Piece", samples: float, tp: int, cluster: ClusterSpec, opts: "CostOptions",
                       direction: str) -> float | None:
    """ms of ``piece``'s flash-attention core on one of ``tp`` GPUs with ``samples`` per replica, forward or
    backward (``flash_backward_factor`` x the forward's FLOPs; a piece's ``bwd_attn_flops`` when set); None
    when no curve applies or the piece has no block shape.

    A causal piece runs one causal block over its ``tokens`` (the local
    chunk under context parallelism) and its remaining pairs -- the ring's
    off-diagonal steps -- as non-causal kernels over ``3/4`` of the chunk
    (see the module docstring).
    """
    shape = piece.shape
    if shape is None or piece.attn_pairs <= 0 or piece.tokens <= 0:
        return None
    per_pair = piece.attn_flops / piece.attn_pairs  # 4 heads d, every pass of the piece
    if direction == "bwd":
        per_pair = (piece.attn_flops if piece.bwd_attn_flops is None else piece.bwd_attn_flops) / piece.attn_pairs
        per_pair *= opts.flash_backward_factor
    d = shape.head_dim
    if piece.mask == "causal":
        c = piece.tokens
        diag = min(piece.attn_pairs, c * (c + 1) / 2.0)
        rest = piece.attn_pairs - diag
        r_diag = attention_rate(cluster, d, c, direction, causal=True)
        r_rest = attention_rate(cluster, d, 0.75 * c, direction)
        if r_diag is None or r_rest is None:
            return None
        seconds_per_flop = diag / r_diag + rest / r_rest
    else:
        rate = attention_rate(cluster, d, key_loop(piece), direction)
        if rate is None:
            return None
        seconds_per_flop = computed_pairs(piece) / rate
    return samples * per_pair * seconds_per_flop / tp / 1e9
