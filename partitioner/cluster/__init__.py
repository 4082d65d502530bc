"""The cluster: its graph, where stages sit on it, and moving tensors between layouts.

Modules
-------
topology
    The networkx cluster graph and the bandwidth between two device sets.
placement
    Device ids for stages: which GPUs of which nodes a stage may take.
reshard
    Cross-mesh resharding between layouts of one tensor: the plan, its volume, a numpy executor.
"""
from __future__ import annotations

__all__: list[str] = []
