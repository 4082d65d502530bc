"""dp's inner loops, written once in the numba subset of Python, and the engine that runs them.

Modules
-------
marks
    :func:`~.marks.kernel`, the mark of a function the engine may compile.
kernels
    The level kernels :mod:`..recursion` calls.
stage_kernels
    The stage-table loops :mod:`..stage` calls.
engine
    Which runs: the Python functions or their compiled twins (per call, by work and deadline);
    ``partitioner warmup`` compiles every signature once.
"""
from __future__ import annotations

__all__: list[str] = []
