"""Why a search stopped short: the limits the exact recursions raise.

Both are internal to the solvers: a method catches them and returns a
``Candidate("error", message=...)``, so they never reach a caller of
:func:`partitioner.solvers.solve`.
"""
from __future__ import annotations

__all__ = ["OutOfTime", "TooLarge"]


class OutOfTime(Exception):
    """The request's deadline passed before the recursion finished."""


class TooLarge(Exception):
    """The recursion's tables would exceed the memory budget; the message says by how much."""
