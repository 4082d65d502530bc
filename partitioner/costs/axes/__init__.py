"""The fourth and fifth axes of a layout: context parallelism (cp) and expert parallelism (ep, etp).

Pure cost terms the problem builder adds to a layer's entry under a 5D
layout key (``DESIGN.md``, "Cost model v3"); sources and closed forms in
each module's References.

Modules
-------
options: :class:`~.options.AxisOptions`: the CP algorithm, load balancing, degrees, MoE imbalance and capacity.
groups: Which nodes a cp/ep group spans in the rank order, and all-to-all times over those links.
context: Context parallelism: ring (p2p), Ulysses all-to-all and all-gather attention.
experts: Mixture-of-experts layers and expert parallelism: FLOPs, dispatch/combine, expert memory.
moe_kernels: The routed experts as GPUs run them: grouped GEMMs, permutation, router, dispatchers.
wiring: A layer's entry under a cp or ep config, put together for the problem builder.
report: The context-parallel terms of a layer, itemised for ``plan``'s report.
"""
from __future__ import annotations

__all__: list[str] = []
