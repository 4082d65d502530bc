"""Solvers: one module per method, one registry, one entry point :func:`solve`.

Methods: ``cpsat`` (OR-Tools CP-SAT), ``milp`` (PuLP + HiGHS/CBC), ``dp``
(exact dynamic programming), ``brute`` (exhaustive oracle), and the
baselines ``greedy``, ``uniform`` and ``balanced``.
"""
from __future__ import annotations

import importlib

from .base import Candidate, SolveRequest, SolverError, methods, register, solve

__all__ = ["solve", "methods", "register", "SolveRequest", "Candidate", "SolverError"]

# Method modules, imported here to register; their heavy back-ends (OR-Tools, PuLP) load on first
# use (partitioner.core.lazy), so that `import partitioner` stays light.
_METHOD_MODULES = ("cpsat.solver", "milp.solver", "dp.method", "brute", "greedy", "baselines")


def _import_methods() -> None:
    for name in _METHOD_MODULES:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise


_import_methods()
_load_all = True
