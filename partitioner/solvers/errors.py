"""The solvers' exceptions: a request refused at the door, and why a search stopped short.

:class:`SolverError` is bad input to :func:`~partitioner.solvers.solve` (an
unknown method, objective or option, an option value out of range, a time
limit or seed that is not a number in range); it is a
:class:`~partitioner.problem.ProblemError`, so every door raises one kind of
error for bad input and the CLI answers it with exit code 2.
:class:`OutOfTime` and :class:`TooLarge` are internal to the solvers: a method
catches them and returns a ``Candidate("error", message=...)``, so they never
reach a caller of :func:`partitioner.solvers.solve`.
"""
from __future__ import annotations

from ..core.errors import ProblemError

__all__ = ["SolverError", "OutOfTime", "TooLarge"]


class SolverError(ProblemError):
    """A request no method may be given: unknown method or option, a value out of range (the message names it)."""


class OutOfTime(Exception):
    """The request's deadline passed before the recursion finished."""


class TooLarge(Exception):
    """The recursion's tables would exceed the memory budget; the message says by how much."""
