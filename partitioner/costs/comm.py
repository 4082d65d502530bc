"""Collective communication times: tensor-parallel all-reduces, the data-parallel gradient sync.

Contract: :func:`allreduce_ms` is one ring all-reduce [7]_ of ``nbytes``
over ``ranks`` GPUs (a latency plus ``2 (r-1)/r * bytes`` over the link's
effective bandwidth); :func:`grad_sync_ms` is the per-iteration gradient
all-reduce of a stage's trainable weights over its dp replicas (NVLink
inside a node, the network across nodes). Times in ms.

References
----------
.. [7] R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
   Communication Operations in MPICH", IJHPCA 19(1), 2005.
"""
from __future__ import annotations

from ..presets import ClusterSpec
from ..problem import Layout
from .options import CostOptions

__all__ = ["allreduce_ms", "grad_sync_ms"]


def allreduce_ms(nbytes: float, ranks: int, GBps: float, opts: CostOptions, link_efficiency: float | None = None) -> float:
    """One ring all-reduce of ``nbytes`` over ``ranks`` GPUs, each on a ``GBps`` link, in ms [7]_."""
    if ranks <= 1:
        return 0.0
    eff = opts.nvlink_efficiency if link_efficiency is None else link_efficiency
    volume = 2.0 * (ranks - 1) / ranks * nbytes
    return opts.collective_latency_us * 1e-3 + volume / (eff * GBps * 1e6)


def grad_sync_ms(trainable_params: float, layout: Layout, cluster: ClusterSpec, opts: CostOptions) -> float:
    """The data-parallel gradient all-reduce of a stage's ``trainable_params``, once per iteration.

    A stage of at most one node syncs over NVLink; a larger one over the network.
    """
    if layout.dp <= 1 or trainable_params <= 0:
        return 0.0
    inside = layout.devices <= cluster.gpus_per_node
    bw = cluster.intra_node_GBps if inside else cluster.inter_node_GBps
    nbytes = trainable_params / layout.tp * opts.grad_bytes_per_param
    return allreduce_ms(nbytes, layout.dp, bw, opts, link_efficiency=opts.nvlink_efficiency if inside else 1.0)

