"""``plan --target``: the plans a framework (Megatron-LM, torchtitan, DeepSpeed) can run.

Modules
-------
rules
    Each target's schedules, knobs and where it may cut, applied as restrictions of the problem.
solve
    The exact search over one target's space (every mesh and allowed knob setting).
report
    ``--target any``: per target, the fastest candidate it runs and its speed-up.
"""
from __future__ import annotations

__all__: list[str] = []
