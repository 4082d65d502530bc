"""The exact dynamic program (method ``dp``).

Modules
-------
method
    The registered method: options, time limit, fallbacks; calls :mod:`.solver`.
solver
    The dynamic program over (first layer, devices, placement state): tables and the walk back.
recursion
    The level-by-level fill of the tables, split among threads.
kernels
    The level kernels the recursion calls (Python that numba compiles).
engine, marks
    Which kernels run: the Python functions or their compiled twins; ``partitioner warmup``.
stage, stagecache, stage_kernels
    A stage's time and memory for every layer range and config (the stage tables).
tables, options, placement
    The table layout, per-stage option packs, placement states.
walks, walkback
    Reading the optimal plan back out of the tables.
"""
from __future__ import annotations

__all__: list[str] = []
