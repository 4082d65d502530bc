"""Communication groups of a 5D config: which links a group spans, and its all-to-all time.

Contract: :func:`group_span` tells how the members of a process group
spread over nodes, from the group's stride in the stage's rank order and
the node size; :func:`alltoall_ms` is one all-to-all over such a group,
its bytes split between NVLink (peers in the same node) and the NICs
(peers elsewhere) [7]. Pure arithmetic; times in ms, bandwidth in GB/s.

Rank order (format v3, Megatron's default ``tp-cp-ep-dp-pp`` [20]): on the
attention grid rank ``r = (i_dp * C + i_cp) * T + i_tp``, so a tensor-
parallel group has stride 1, a context-parallel group stride ``T``, the
data-parallel group stride ``T * C``.

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.axes.groups``.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GroupSpan", "group_span", "alltoall_ms", "alltoall_volume"]


@dataclass(frozen=True)
class GroupSpan:
    """A process group of ``ranks`` members, ``per_node`` of them in each of ``nodes`` nodes."""

    ranks: int
    per_node: int

    @property
    def nodes(self) -> int:
        return self.ranks // self.per_node

    @property
    def inside_node(self) -> bool:
        return self.per_node == self.ranks


def group_span(size: int, stride: int, stage_devices: int, gpus_per_node: int) -> GroupSpan:
    """How a group of ``size`` ranks ``stride`` apart in a stage of ``stage_devices`` ranks sits on the nodes.

    A stage of at most one node holds every group inside it. Otherwise the
    group's members ``r0, r0 + stride, ...`` fall ``max(1, gpus_per_node //
    stride)`` to a node (the group starts at a node boundary or inside one
    node; the sizes of format v3 are powers of two or whole nodes).
    """
    if size < 1 or stride < 1:
        raise ValueError(f"a group needs size and stride >= 1, got {size}, {stride}")
    if stage_devices <= gpus_per_node or size * stride <= gpus_per_node:
        return GroupSpan(size, size)
    per_node = max(1, min(size, gpus_per_node // stride))
    while size % per_node:  # uneven fold (a node size that is not a power of two): the largest divisor
        per_node -= 1
    return GroupSpan(size, per_node)


def alltoall_volume(nbytes: float, span: GroupSpan, dedup: float = 1.0,
                    intra_dedup: float = 1.0) -> tuple[float, float]:
    """``(nvlink_bytes, network_bytes)`` one rank sends in an all-to-all of its ``nbytes`` buffer [7]_.

    Each rank keeps ``1/r`` of its buffer and sends ``1/r`` to each peer:
    ``(g-1)/r`` to the ``g-1`` peers in its node, ``(r-g)/r`` to the others
    (times ``dedup`` when a token bound for several ranks of one node
    crosses the network once, the NVLink part times ``intra_dedup`` when a
    token bound for several experts of one rank reaches it once).

    References
    ----------
    .. [7] R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
       Communication Operations in MPICH", IJHPCA 19(1), 2005 (pairwise
       exchange: each rank sends and receives ``(r-1)/r`` of its buffer).
    """
    r, g = span.ranks, span.per_node
    if r <= 1:
        return 0.0, 0.0
    return (g - 1) / r * nbytes * intra_dedup, (r - g) / r * nbytes * dedup


def alltoall_ms(nbytes: float, span: GroupSpan, intra_GBps: float, inter_GBps: float, *, latency_us: float,
                nvlink_efficiency: float, links: str = "max", dedup: float = 1.0, intra_dedup: float = 1.0,
                network_efficiency: float = 1.0) -> float:
    """One all-to-all of a ``nbytes`` buffer per rank over the group ``span``, in ms.

    One launch latency (NCCL groups the sends and receives into one kernel
    [25]_) plus the NVLink part at ``nvlink_efficiency * intra_GBps`` and the
    network part at ``network_efficiency * inter_GBps``, taken together as their maximum
    (``links="max"``: the copy engines and the NICs run at once) or their
    sum (``"sum"``).

    References
    ----------
    .. [25] NVIDIA NCCL documentation, "Point-to-point communication":
       all-to-all as grouped ``ncclSend``/``ncclRecv`` calls in one launch.
    """
    if span.ranks <= 1 or nbytes <= 0:
        return 0.0
    intra, inter = alltoall_volume(nbytes, span, dedup, intra_dedup)
    t_intra = intra / (nvlink_efficiency * intra_GBps * 1e6)
    t_inter = inter / (network_efficiency * inter_GBps * 1e6)
    wire = max(t_intra, t_inter) if links == "max" else t_intra + t_inter
    return latency_us * 1e-3 + wire
