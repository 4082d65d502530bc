"""DeepSpeed's pipeline engine: what it runs, and plans as its settings.

Modules
-------
rules
    :data:`RULES`: the schedule, knobs, mesh and CP/EP axes and
    bytes-per-parameter counts DeepSpeed's ``PipelineEngine`` has (read by
    ``plan --target deepspeed`` and by the exporter).
export
    :func:`export_deepspeed`: a plan as a ``PipelineModule`` with the planned
    boundaries, its topology and the batch config.
recipe
    :func:`read_deepspeed_config`: a DeepSpeed config JSON (or the
    export's document) as the recipe ``estimate`` prices.
"""
from __future__ import annotations

from .export import CHECKED_WITH, export_deepspeed
from .recipe import read_deepspeed_config
from .rules import RULES

__all__ = ["RULES", "CHECKED_WITH", "export_deepspeed", "read_deepspeed_config"]
