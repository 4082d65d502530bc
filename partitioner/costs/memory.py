"""Activation memory of a transformer block.

Contract: :func:`block_activation_bytes` returns the bytes one block keeps
for its backward pass per microbatch on one GPU, from the block's token
count, width, heads and tensor-parallel degree (Korthikanti et al. [2]_).
Pure arithmetic; no options object.

References
----------
.. [2] V. Korthikanti et al., "Reducing Activation Recomputation in Large
   Transformer Models", MLSys 2023, arXiv:2205.05198, Sections 4-5.
"""
from __future__ import annotations

__all__ = ["block_activation_bytes"]


def block_activation_bytes(s: float, b: float, h: float, a: float, t: int, *, pairs: float | None = None,
                           flash_attention: bool = False, sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Activation bytes one transformer block stores per microbatch (Korthikanti et al. [2]_).

    ``s`` tokens, ``b`` samples, width ``h``, ``a`` heads, tensor-parallel
    degree ``t``; ``pairs`` score-matrix entries per head and sample
    (``s**2`` for self-attention, causal or not: the masked half is stored
    too), so the ``5 a s / h`` term is ``5 a b pairs / (s b h)``.
    """
    pairs = s * s if pairs is None else pairs
    if recompute == "full":
        stored = 2.0 * s * b * h
        return stored / t if sequence_parallel else stored
    score = 0.0 if (flash_attention or recompute == "selective") else 5.0 * a * b * pairs / t
    if sequence_parallel:
        return 34.0 * s * b * h / t + score
    return s * b * h * (10.0 + 24.0 / t) + score

