"""Solvers: one module per method, one registry, one entry point :func:`solve`.

Methods: ``dp`` (exact dynamic programming, the default), ``cpsat`` (OR-Tools
CP-SAT), ``milp`` (PuLP + HiGHS/CBC), ``brute`` (exhaustive oracle), and the
baselines ``greedy``, ``uniform`` and ``balanced``. Each registers its typed
options record and its capabilities (:mod:`.options`); :func:`solve` checks
both before it dispatches (:mod:`.base`).
"""
from __future__ import annotations

from .base import DEFAULT_METHOD, Candidate, SolveRequest, SolverError, method_spec, methods, register, solve
from .options import (
    BruteOptions,
    Capabilities,
    CpsatOptions,
    DpOptions,
    MethodOptions,
    MilpOptions,
    NoOptions,
)

__all__ = [
    "solve",
    "methods",
    "method_spec",
    "register",
    "SolveRequest",
    "Candidate",
    "SolverError",
    "DEFAULT_METHOD",
    "MethodOptions",
    "NoOptions",
    "DpOptions",
    "CpsatOptions",
    "MilpOptions",
    "BruteOptions",
    "Capabilities",
]

# The method modules register themselves on import; their heavy back-ends (OR-Tools, PuLP) load on
# first use (partitioner.core.lazy), so that `import partitioner` stays light.
# The registry keeps this order (it is the order `partitioner solve --help` and messages list them).
from .cpsat import solver as _cpsat  # noqa: E402,F401,I001
from .milp import solver as _milp  # noqa: E402,F401
from .dp import method as _dp  # noqa: E402,F401
from . import brute, greedy, baselines  # noqa: E402,F401
