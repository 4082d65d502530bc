"""Solvers: one module per method, one registry, one entry point :func:`solve`.

Methods: ``cpsat`` (OR-Tools CP-SAT), ``milp`` (PuLP + HiGHS/CBC), ``dp``
(exact dynamic programming), ``brute`` (exhaustive oracle), and the
baselines ``greedy``, ``uniform`` and ``balanced``.
"""
from __future__ import annotations

from .base import Candidate, SolveRequest, SolverError, methods, register, solve

__all__ = ["solve", "methods", "register", "SolveRequest", "Candidate", "SolverError"]

# The method modules register themselves on import; their heavy back-ends (OR-Tools, PuLP) load on
# first use (partitioner.core.lazy), so that `import partitioner` stays light.
# The registry keeps this order (it is the order `partitioner solve --help` and messages list them).
from .cpsat import solver as _cpsat  # noqa: E402,F401,I001
from .milp import solver as _milp  # noqa: E402,F401
from .dp import method as _dp  # noqa: E402,F401
from . import brute, greedy, baselines  # noqa: E402,F401
