"""Network levels (DESIGN.md "Network levels"): the closed-form bandwidth and the consecutive placement.

On a cluster with ``levels`` a transfer between two device sets on different nodes climbs a tree:
each GPU's NIC (``inter_node_GBps``), then per level the per-GPU rate of :meth:`Cluster.level_rates`
times the GPUs of the set in the group that climbs. :func:`levels_bandwidth` is the max-flow of that
tree (:func:`partitioner.cluster.topology.cluster_graph` builds it as a graph) in closed form: supply
and demand are matched as low in the tree as they can be. Stages sit on consecutive devices in
pipeline order, a stage no larger than a level's group inside one group (:func:`consecutive_fits`):
a boundary's bandwidth is a function of its offset, a stage's span (:func:`size_level`) of its size.

More (the detail of this module): ``docs/internals/cluster.md``, section ``partitioner.cluster.levels``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from ..problem import Cluster

__all__ = ["levels_bandwidth", "boundary_bandwidth", "consecutive_fits", "consecutive_ids", "span_level", "size_level",
           "network_GBps", "levels_period"]


def levels_bandwidth(cluster: Cluster, src_ids: Iterable[int], dst_ids: Iterable[int]) -> float:
    """Max-flow GB/s from ``src_ids`` to ``dst_ids`` on a levels cluster, in closed form.

    Both sets on one node: NVLink only, ``min(|src|, |dst|) * intra_node_GBps``. Otherwise no node may
    hold GPUs of both sets (valid plans never do; :class:`ValueError`). Each node offers its GPUs' NIC
    and level-0 share, ``k * min(inter_node_GBps, rate_0)``; each level's switch matches what its
    children bring (``min(Σ supply, Σ demand)``), and a group passes the rest up, at most its involved
    GPUs times the next level's rate. On a tree matching low is optimal (it spends no upper arc).
    """
    src, dst = sorted(set(src_ids)), sorted(set(dst_ids))
    if not src or not dst:
        raise ValueError("both device sets must be non-empty")
    G = cluster.gpus_per_node
    src_nodes, dst_nodes = {d // G for d in src}, {d // G for d in dst}
    if len(src_nodes | dst_nodes) == 1:
        return min(len(src), len(dst)) * cluster.intra_node_GBps
    if src_nodes & dst_nodes:
        raise ValueError(f"nodes {sorted(src_nodes & dst_nodes)} hold devices of both sets")
    assert cluster.levels is not None
    rates = cluster.level_rates()
    first = min(cluster.inter_node_GBps, rates[0])
    # per node: (supply, demand, involved GPUs); then per group of each level, bottom up
    groups: dict[int, list[float]] = {}
    for d in src:
        groups.setdefault(d // G, [0.0, 0.0, 0])[0] += first
    for d in dst:
        groups.setdefault(d // G, [0.0, 0.0, 0])[1] += first
    for d in (*src, *dst):
        groups[d // G][2] += 1
    total = 0.0
    members = {n: n for n in groups}  # key -> node index it starts from (to find the group of each level)
    for level in range(len(cluster.levels)):
        merged: dict[int, list[float]] = {}
        firsts: dict[int, int] = {}
        for key, (supply, demand, gpus) in groups.items():
            if level > 0:  # the child group climbs to this level: at most its GPUs times this level's rate
                cap = gpus * rates[level]
                supply, demand = min(supply, cap), min(demand, cap)
            g = cluster.group_of(members[key], level)
            acc = merged.setdefault(g, [0.0, 0.0, 0])
            acc[0] += supply
            acc[1] += demand
            acc[2] += gpus
            firsts.setdefault(g, members[key])
        groups = {}
        for g, (supply, demand, gpus) in merged.items():
            matched = min(supply, demand)
            total += matched
            groups[g] = [supply - matched, demand - matched, gpus]
        members = firsts
    return total


def boundary_bandwidth(cluster: Cluster, offset: int, size: int, next_size: int) -> float:
    """The bandwidth between a stage on devices ``offset..offset+size-1`` and the next one after it."""
    return _boundary(cluster, offset, size, next_size)


@lru_cache(maxsize=65536)
def _boundary(cluster: Cluster, offset: int, size: int, next_size: int) -> float:
    a = range(offset, offset + size)
    return levels_bandwidth(cluster, a, range(offset + size, offset + size + next_size))


def consecutive_fits(cluster: Cluster, offset: int, size: int) -> bool:
    """May a stage of ``size`` devices start at device ``offset`` (rule 4: an in-node stage inside one
    node, a larger one on whole nodes; on a levels cluster also a stage no larger than a level's group
    inside one group of that level)?"""
    G = cluster.gpus_per_node
    if offset < 0 or offset + size > cluster.num_devices:
        return False
    if size <= G:
        return offset % G + size <= G
    if offset % G or size % G:
        return False
    for level in cluster.levels or ():
        if level.nodes is not None and size <= level.nodes * G:
            width = level.nodes * G
            if offset // width != (offset + size - 1) // width:
                return False
    return True


def consecutive_ids(sizes: Iterable[int]) -> list[tuple[int, ...]]:
    """Each stage's device ids when the stages sit on consecutive devices in pipeline order."""
    out, offset = [], 0
    for s in sizes:
        out.append(tuple(range(offset, offset + s)))
        offset += s
    return out


def span_level(cluster: Cluster, device_ids: Iterable[int]) -> int:
    """The innermost level one of whose groups holds every given device; -1 when they share a node."""
    nodes = {cluster.node_of(d) for d in device_ids}
    if len(nodes) <= 1:
        return -1
    assert cluster.levels is not None
    for level in range(len(cluster.levels)):
        if len({cluster.group_of(n, level) for n in nodes}) == 1:
            return level
    return len(cluster.levels) - 1


def size_level(levels, gpus_per_node: int, devices: int) -> int:
    """The level a stage of ``devices`` GPUs spans when placed by rule 4 on a levels cluster: -1 inside one
    node, else the innermost level whose groups hold that many GPUs (the outermost when none does)."""
    if devices <= gpus_per_node:
        return -1
    for k, level in enumerate(levels):
        if level.nodes is None or devices <= level.nodes * gpus_per_node:
            return k
    return len(levels) - 1


def network_GBps(levels, inter_node_GBps: float, gpus_per_node: int, devices: int) -> float:
    """The per-GPU network GB/s of a group of ``devices`` GPUs across nodes: the NIC, and the rate of every
    level up to the one the group spans (``inter_node_GBps`` without levels, or inside one node)."""
    rate = inter_node_GBps
    top = size_level(levels or (), gpus_per_node, devices)
    taper = 1.0
    for level in (levels or ())[: top + 1]:
        taper *= level.oversubscription
        rate = min(rate, level.GBps / taper)
    return rate


def levels_period(cluster: Cluster) -> int:
    """A width (GPUs) the levels repeat with: the largest group of a level that does not hold the whole
    cluster, times the node (the node alone when none). Moving stages by it inside the cluster changes
    neither rule 4 nor any boundary's max-flow: every level's groups move onto groups of the same level."""
    widest = 1
    for level in cluster.levels or ():
        if level.nodes is not None and level.nodes < cluster.nodes:
            widest = max(widest, level.nodes)
    return widest * cluster.gpus_per_node
