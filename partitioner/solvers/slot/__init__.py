"""The slot model shared by the ``cpsat`` and ``milp`` methods.

Modules
-------
data
    The model's precomputed tables and the conversion between plans and decisions.
schedule
    Per-schedule parts of the objective (1F1B, ZB-H1, GPipe estimates).
times
    Integer times for CP-SAT.
run
    What both methods share around their models: options, starting plan, time limit.
"""
from __future__ import annotations

__all__: list[str] = []
