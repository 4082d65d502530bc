"""What a GPU holds and moves: activation and parameter bytes, recompute, tied copies, HBM traffic.

Pure cost terms below the layer entries (:mod:`~partitioner.costs.entry`);
they read :mod:`~partitioner.costs.attention` for MLA's tensors and never
:mod:`~partitioner.costs.compute`.

Modules
-------
activations: The bytes a transformer block keeps for its backward, one named term per tensor (:class:`~.activations.BlockShape`).
param_memory: Bytes per parameter as each framework's mixed-precision Adam keeps them.
recompute_names: The names of the recompute settings and their spelling (no cost terms).
recompute: What each recompute setting frees and replays: Megatron-Core's modules, torchtitan's per-op policy.
tied: Tied embeddings: the head's copy on another stage and its gradient all-reduce.
traffic: Memory-bound work: the bytes non-matmul kernels move through HBM, and their time.
"""
from __future__ import annotations

__all__: list[str] = []
