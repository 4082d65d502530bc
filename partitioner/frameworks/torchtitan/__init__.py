"""torchtitan 0.3: what it runs, and plans as its settings.

Modules
-------
rules: :data:`RULES`: the schedules (:data:`SCHEDULE_NAMES`), knobs, mesh, CP/EP axes and byte counts torchtitan has.
export: :func:`export_torchtitan`: a plan as ``--section.key`` overrides and a ``config_registry`` function.
models: :data:`TITAN_MODELS`: the torchtitan family and flavor of a preset's language model.
recipe: a torchtitan job (a 0.2.x TOML file, or a launch's ``--section.key`` overrides) read as a recipe.
"""
from __future__ import annotations

from .export import CHECKED_WITH, export_torchtitan, torchtitan_names
from .models import TITAN_MODELS
from .rules import RULES, SCHEDULE_NAMES

__all__ = ["RULES", "SCHEDULE_NAMES", "CHECKED_WITH", "export_torchtitan", "torchtitan_names", "TITAN_MODELS"]
