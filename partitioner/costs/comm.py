"""Collective communication times: tensor-parallel all-reduces, the data-parallel gradient sync.

Contract: :func:`allreduce_ms` is one ring all-reduce [7] of ``nbytes``
over ``ranks`` GPUs (a latency plus ``2 (r-1)/r * bytes`` over the link's
effective bandwidth), :func:`allgather_ms` an all-gather or reduce-scatter
(``(r-1)/r * bytes``); :func:`grad_sync_ms` is the per-iteration gradient
all-reduce of a stage's trainable weights over its dp replicas and
:func:`shard_gather_ms` one ZeRO-3 parameter all-gather (or gradient
reduce-scatter) of a layer's weights [10] (NVLink inside a node, the
network across nodes). Times in ms.

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.comm``.
"""
from __future__ import annotations

from ..cluster.levels import network_GBps
from ..presets import ClusterSpec
from ..problem import Layout
from .options import CostOptions

__all__ = ["allreduce_ms", "allgather_ms", "grad_sync_ms", "shard_gather_ms", "dp_link", "overlapped_ms"]


def allreduce_ms(nbytes: float, ranks: int, GBps: float, opts: CostOptions, link_efficiency: float | None = None) -> float:
    """One ring all-reduce of ``nbytes`` over ``ranks`` GPUs, each on a ``GBps`` link, in ms [7]_.

    References
    ----------
    .. [7] R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
       Communication Operations in MPICH", IJHPCA 19(1), 2005.
    """
    if ranks <= 1:
        return 0.0
    eff = opts.nvlink_efficiency if link_efficiency is None else link_efficiency
    volume = 2.0 * (ranks - 1) / ranks * nbytes
    return opts.collective_latency_us * 1e-3 + volume / (eff * GBps * 1e6)


def allgather_ms(nbytes: float, ranks: int, GBps: float, opts: CostOptions, link_efficiency: float | None = None) -> float:
    """One ring all-gather (or reduce-scatter) whose full result is ``nbytes``, in ms [7]_.

    Each rank sends and receives ``(r-1)/r * nbytes``: half an all-reduce.

    References
    ----------
    .. [7] As cited in :func:`allreduce_ms`.
    """
    if ranks <= 1:
        return 0.0
    eff = opts.nvlink_efficiency if link_efficiency is None else link_efficiency
    volume = (ranks - 1) / ranks * nbytes
    return opts.collective_latency_us * 1e-3 + volume / (eff * GBps * 1e6)


def dp_link(layout: Layout, cluster: ClusterSpec, opts: CostOptions) -> tuple[float, float]:
    """(GBps, efficiency) of the data-parallel group's ring: NVLink inside one node; across nodes the NICs.

    Across nodes a group has ``k = min(dp, gpus_per_node / tp)`` members in
    each node (Megatron's rank order: tp innermost, then dp), each with its
    own NIC; NCCL runs one ring per member, so a node's share of the ring
    traffic leaves through k NICs [14]_: the ring's bandwidth is
    ``min(k x inter_node_GBps, nvlink_efficiency x intra_node_GBps)``. On a cluster with network levels
    ``inter_node_GBps`` is the NIC capped by every level the stage spans
    (:func:`~partitioner.cluster.levels.network_GBps`).

    References
    ----------
    .. [14] NVIDIA, NCCL documentation and nccl-tests ``PERFORMANCE.md``: bus
       bandwidth, and one ring (channel) per NIC across nodes.
    """
    inside = layout.devices <= cluster.gpus_per_node
    if inside:
        return cluster.intra_node_GBps, opts.nvlink_efficiency
    k = max(1, min(layout.dp, cluster.gpus_per_node // layout.tp))
    # with network levels each NIC's share is the least rate of the levels the stage spans (rule 4 keeps a
    # stage no larger than a level's group inside one group; DESIGN.md "Network levels")
    network = k * network_GBps(cluster.levels, cluster.inter_node_GBps, cluster.gpus_per_node, layout.devices)
    nvlink = opts.nvlink_efficiency * cluster.intra_node_GBps
    return (network, 1.0) if network < nvlink else (cluster.intra_node_GBps, opts.nvlink_efficiency)


def shard_gather_ms(params: float, layout: Layout, cluster: ClusterSpec, opts: CostOptions,
                    bytes_per_param: float | None = None) -> float:
    """One ZeRO-3 all-gather of ``params`` parameters (their tp shard) over the dp group, in ms.

    ``bytes_per_param`` defaults to ``param_gather_bytes_per_param`` (bf16);
    a gradient reduce-scatter of the same parameters (``grad_bytes_per_param``)
    moves the same volume per byte [7]_.

    References
    ----------
    .. [7] As cited in :func:`allreduce_ms`.
    """
    if layout.dp <= 1 or params <= 0:
        return 0.0
    per = opts.param_gather_bytes_per_param if bytes_per_param is None else bytes_per_param
    bw, eff = dp_link(layout, cluster, opts)
    return allgather_ms(params / layout.tp * per, layout.dp, bw, opts, link_efficiency=eff)


def grad_sync_ms(trainable_params: float, layout: Layout, cluster: ClusterSpec, opts: CostOptions) -> float:
    """The data-parallel gradient all-reduce of a stage's ``trainable_params``, once per iteration.

    A stage of at most one node syncs over NVLink; a larger one over the network.
    """
    if layout.dp <= 1 or trainable_params <= 0:
        return 0.0
    bw, eff = dp_link(layout, cluster, opts)
    nbytes = trainable_params / layout.tp * opts.grad_bytes_per_param
    return allreduce_ms(nbytes, layout.dp, bw, opts, link_efficiency=eff)



def overlapped_ms(comm: float, partner: float, sm_fraction: float) -> float:
    """What ``comm`` ms of a collective still cost when it runs beside ``partner`` ms of independent compute.

    The part that outlasts the compute, ``max(0, comm - partner)``, plus the
    compute's slowdown while they overlap: the collective's kernels occupy
    ``sm_fraction`` of the SMs (:func:`~.compute.hardware.comm_sm_fraction`), so
    the overlapped ``min(comm, partner)`` ms of compute take that fraction
    longer. With no partner the whole collective is exposed.
    """
    if comm <= 0:
        return 0.0
    if partner <= 0:
        return comm
    return max(0.0, comm - partner) + sm_fraction * min(comm, partner)
