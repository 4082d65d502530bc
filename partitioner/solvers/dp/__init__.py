"""The exact dynamic program (method ``dp``).

Modules
-------
method: The registered method: options, time limit, fallbacks; calls :mod:`.solver`.
solver: The dynamic program over (first layer, devices, placement state): tables and the walk back.
recursion: The level-by-level fill of the tables, split among threads.
compiled/: The kernels (level and stage loops, plain Python that numba compiles) and the engine that runs them as Python or compiled; ``partitioner warmup``.
stage, stagecache: A stage's time and memory for every layer range and config (the stage tables).
tables, options, placement: The table layout, per-stage option packs, placement states.
walks, walkback: Reading the optimal plan back out of the tables.
"""
from __future__ import annotations

__all__: list[str] = []
