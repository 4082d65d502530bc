"""The sections of ``plan``'s answer that explain the kept plan's axes.

Modules
-------
axes
    "Why not EP?" and "why not CP?": the best plan that uses the axis, and its time.
context
    Per stage, what its context-parallel segments cost and hold.
"""
from __future__ import annotations

__all__: list[str] = []
