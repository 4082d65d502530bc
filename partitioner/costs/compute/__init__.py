"""How fast the matmuls run: FLOPs, the fraction of peak a GEMM reaches, GPU generations, FP8.

Pure cost terms below the layer entries (:mod:`~partitioner.costs.entry`);
they read :mod:`~partitioner.costs.attention` (MLA's matmuls) and
:mod:`~partitioner.costs.memory` (the bytes FP8's casts move).

Modules
-------
flops: FLOPs from matmul shapes, and the fraction of peak a GEMM of a given width and row count reaches.
hardware: GPU-generation constants a datasheet does not give (A100, H100/H200, B200/GB200).
fp8: FP8 recipes as the frameworks offer them, and which GPU runs which: data and checks.
precision: FP8 training: which GEMMs run in FP8, at what rate, what the casts move, what is kept.
"""
from __future__ import annotations

__all__: list[str] = []
