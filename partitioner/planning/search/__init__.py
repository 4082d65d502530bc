"""``plan``'s search: the microbatch counts screened, the method's solves, the exact proof of the kept one.

Modules, in the order a plan flows through them
-----------------------------------------------
screening
    Each microbatch count's problems, its baselines and a quick greedy plan.
knobs
    Uniform knob settings as format-v1 problems, and each segment's own knobs.
knob_solve
    The method per uniform knob setting, then each segment's own knobs.
target_solve
    The same under ``plan --target``: every mesh and knob setting the target runs.
dominance, exact
    One exact solve of the kept candidate's whole problem, after an exact reduction of dominated configs.
"""
from __future__ import annotations

__all__: list[str] = []
