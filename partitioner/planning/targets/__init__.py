"""``plan --target``: the plans a framework (Megatron-LM, torchtitan, DeepSpeed) can run.

Modules
-------
rules
    Each target's schedules, knobs and where it may cut, applied as restrictions of the problem.
memory
    Weight memory as each target keeps it, per ZeRO stage.
report
    ``--target any``: per target, the fastest candidate it runs and its speed-up.

The solves over one target's space are :mod:`partitioner.planning.search.target_solve`'s.
"""
from __future__ import annotations

__all__: list[str] = []
