"""Replaying a plan in time: the discrete-event simulator, its timeline and its pictures.

Modules
-------
engine
    :func:`simulate`: every schedule's op order replayed, makespan, bubble, peak memory.
timeline
    The ops of a replay as rows a chart or a trace reads.
breakdown
    Where a stage's time goes (compute, reshards, transfers, waiting).
viz
    The Gantt chart (PNG/SVG) and the Chrome/Perfetto trace.
"""
from __future__ import annotations

from .engine import SCHEDULES, Op, Simulation, device_order, simulate, simulate_times

__all__ = ["SCHEDULES", "Op", "Simulation", "device_order", "simulate", "simulate_times"]
