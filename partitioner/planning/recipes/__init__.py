"""A recipe -- a layout stated from outside -- as a plan of the planner's problem.

Modules
-------
estimate
    A user's recipe estimated: its memory, times and throughput (the ``estimate`` command).
forced
    A published run's layout forced on a model: its plan and its estimate (the calibration).
baseline
    The user's recipe as ``plan``'s baseline (``plan --baseline RECIPE``).
"""
from __future__ import annotations

__all__: list[str] = []
