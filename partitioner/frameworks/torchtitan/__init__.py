"""torchtitan 0.3: what it runs, and plans as its settings.

Modules
-------
rules
    :data:`RULES`: the schedules (:data:`SCHEDULE_NAMES`, torch's names),
    knobs, mesh and CP/EP axes, cuts and bytes-per-parameter counts
    torchtitan has (read by ``plan --target torchtitan`` and by the exporter).
export
    :func:`export_torchtitan`: a plan as ``--section.key`` overrides and a
    ``config_registry`` function.
models
    :data:`TITAN_MODELS`: the torchtitan family and flavor of a preset's
    language model (what a job starts from; a VLM's vision tower is not in it).

A reader of torchtitan jobs (a ``config_registry`` function's settings, a
0.2.x TOML file) belongs here too, as ``recipe.py`` next to the exporter it
mirrors.
"""
from __future__ import annotations

from .export import CHECKED_WITH, export_torchtitan, torchtitan_names
from .models import TITAN_MODELS
from .rules import RULES, SCHEDULE_NAMES

__all__ = ["RULES", "SCHEDULE_NAMES", "CHECKED_WITH", "export_torchtitan", "torchtitan_names", "TITAN_MODELS"]
