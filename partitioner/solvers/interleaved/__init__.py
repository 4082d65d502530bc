"""The exact methods under ``training.schedule: interleaved``.

Modules
-------
space
    The plans the exact methods search under interleaving (one layout per device group).
formulation
    The integer model for one group count, for CP-SAT and PuLP.
solve
    ``cpsat`` and ``milp`` on that model, one group count at a time.
brute
    The exhaustive oracle over the same space.
"""
from __future__ import annotations

__all__: list[str] = []
