"""The one error of a sweep that cannot run.

:class:`SweepError` is a :class:`~partitioner.problem.ProblemError`: it names
the sweep (or results) file and the field path, and the CLI turns it into exit
code 2. It covers a bad sweep file, an unreadable or locked results file, a
backend that is missing or cannot start, and workers that cannot start.
A *job* that fails is never an error of the sweep: it is recorded
(:mod:`.records`) and the sweep goes on.
"""
from __future__ import annotations

from ..problem import ProblemError

__all__ = ["SweepError"]


class SweepError(ProblemError):
    """A sweep that cannot run: bad sweep file, unreadable results file, missing backend."""
