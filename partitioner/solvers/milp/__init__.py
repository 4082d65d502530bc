"""The MILP method (``milp``, PuLP with HiGHS or CBC).

Modules
-------
solver
    The registered method.
formulation, parts
    The slot model's MILP variables, constraints and multi-part objectives.
backends
    HiGHS and CBC runs with the time limit held.
"""
from __future__ import annotations

__all__: list[str] = []
