"""The CP-SAT method (``cpsat``, OR-Tools).

Modules
-------
solver
    The registered method: the slot model or the arc-flow model, solved and read back.
formulation, parts
    The slot model's CP-SAT variables, constraints and multi-part objectives.
arcflow, arcflow_run
    The arc-flow formulation (layer ranges as arcs) and its run.
"""
from __future__ import annotations

__all__: list[str] = []
