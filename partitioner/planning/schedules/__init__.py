"""How ``plan`` picks the pipeline schedule: every candidate simulated, the fastest kept.

Modules
-------
choice
    The candidates (1F1B, ZB-H1, GPipe, interleaved) re-solved or replayed, and the choice.
report
    The typed report of the schedules weighed (:class:`~.report.ScheduleReport`).
search
    One plan replayed under every schedule (the benchmark and the interleaved baseline).
"""
from __future__ import annotations

__all__: list[str] = []
