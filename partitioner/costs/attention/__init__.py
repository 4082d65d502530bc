"""The attention core in the cost model: flash-attention time and multi-head latent attention.

Pure cost terms the layer entries (:mod:`~partitioner.costs.entry`) and the
memory and compute terms call; they import only :mod:`~partitioner.costs.options`
and :mod:`~partitioner.costs.comm` of the cost model.

Modules
-------
flash
    Flash attention timed as its kernels run: per GPU generation, head dim, key length, causal tiles, pass.
mla
    Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): its matmuls, kept tensors, HBM bytes, TP widths.
"""
from __future__ import annotations

__all__: list[str] = []
