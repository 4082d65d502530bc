"""The cluster as a networkx graph, and the bandwidth between two device sets.

Default graph (DESIGN.md): the GPUs of a node hang off one NVLink switch,
each GPU by a link of ``intra_node_GBps``; each GPU also has its own NIC of
``inter_node_GBps`` to the network. Traffic between two GPUs of one node uses
NVLink only, so the network side is split per node: a node's NICs feed an
``out`` vertex that reaches only the *other* nodes' ``in`` vertices.

The bandwidth between two disjoint device sets is the max-flow between them on
the subgraph of those devices (other GPUs do not relay: "each GPU reaching
other nodes through its own NIC").

More (the detail of this module): ``docs/internals/cluster.md``, section ``partitioner.cluster.topology``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Iterable

from ..core.lazy import lazy_module
from ..problem import Cluster

if TYPE_CHECKING:
    import networkx as nx
else:
    nx = lazy_module("networkx")

__all__ = ["cluster_graph", "bandwidth", "default_bandwidth", "transfer_ms", "nodes_of"]

_SOURCE, _SINK = ("source",), ("sink",)


def nodes_of(cluster: Cluster, device_ids: Iterable[int]) -> frozenset[int]:
    """The set of nodes the given devices sit on."""
    return frozenset(cluster.node_of(d) for d in device_ids)


def cluster_graph(cluster: Cluster, devices: Iterable[int] | None = None) -> nx.DiGraph:
    """The cluster graph with ``capacity`` in GB/s on every arc.

    ``devices`` restricts the default graph to those GPUs (and the switches);
    a user topology is always returned whole. On a cluster with ``levels`` the
    network is their tree over the nodes of ``devices`` (none inside one node).
    """
    graph = nx.DiGraph()
    if cluster.topology is not None:
        for u, v, gbps in cluster.topology.edges:
            for a, b in ((u, v), (v, u)):
                cap = graph[a][b]["capacity"] + gbps if graph.has_edge(a, b) else gbps
                graph.add_edge(a, b, capacity=cap)
        return graph
    ids = range(cluster.num_devices) if devices is None else sorted(set(devices))
    nodes = sorted({cluster.node_of(d) for d in ids})
    for d in ids:
        n = cluster.node_of(d)
        graph.add_edge(d, ("nvswitch", n), capacity=cluster.intra_node_GBps)
        graph.add_edge(("nvswitch", n), d, capacity=cluster.intra_node_GBps)
        graph.add_edge(d, ("nic-out", n), capacity=cluster.inter_node_GBps)
        graph.add_edge(("nic-in", n), d, capacity=cluster.inter_node_GBps)
    if cluster.levels is not None:
        if len(nodes) > 1:
            _add_levels(graph, cluster, ids)
        return graph
    for a in nodes:
        for b in nodes:
            if a != b:
                graph.add_edge(("nic-out", a), ("nic-in", b))  # no capacity: unbounded
    return graph


def _add_levels(graph: nx.DiGraph, cluster: Cluster, ids: Iterable[int]) -> None:
    """The network of a levels cluster (DESIGN.md "Network levels") over the devices ``ids``: per level and
    group a switch (``up`` -> ``down``, unbounded); a node reaches its level-0 switch, and a group its
    parent's, by arcs of (the GPUs of ``ids`` in it) x (the rate of the level climbed to), both ways."""
    assert cluster.levels is not None
    rates = cluster.level_rates()
    count: dict[tuple, int] = {}
    for d in ids:
        n = cluster.node_of(d)
        count[("node", n)] = count.get(("node", n), 0) + 1
        for level in range(len(cluster.levels)):
            key = (level, cluster.group_of(n, level))
            count[key] = count.get(key, 0) + 1
    for key, gpus in count.items():
        if key[0] == "node":
            n = key[1]
            up, down = ("up", 0, cluster.group_of(n, 0)), ("down", 0, cluster.group_of(n, 0))
            graph.add_edge(("nic-out", n), up, capacity=gpus * rates[0])
            graph.add_edge(down, ("nic-in", n), capacity=gpus * rates[0])
            continue
        level, g = key
        graph.add_edge(("up", level, g), ("down", level, g))  # the switch: no capacity, unbounded
        if level + 1 < len(cluster.levels):
            parent = cluster.group_of(g * (cluster.levels[level].nodes or 1), level + 1)
            cap = gpus * rates[level + 1]
            graph.add_edge(("up", level, g), ("up", level + 1, parent), capacity=cap)
            graph.add_edge(("down", level + 1, parent), ("down", level, g), capacity=cap)


def bandwidth(cluster: Cluster, src_ids: Iterable[int], dst_ids: Iterable[int]) -> float:
    """Max-flow bandwidth (GB/s) from the devices ``src_ids`` to ``dst_ids``."""
    src, dst = frozenset(src_ids), frozenset(dst_ids)
    if not src or not dst:
        raise ValueError("both device sets must be non-empty")
    if src & dst:
        raise ValueError(f"device sets overlap: {sorted(src & dst)}")
    return _max_flow(cluster, src, dst)


@lru_cache(maxsize=4096)
def _max_flow(cluster: Cluster, src: frozenset[int], dst: frozenset[int]) -> float:
    graph = cluster_graph(cluster, None if cluster.topology is not None else src | dst)
    for d in src:
        graph.add_edge(_SOURCE, d)
    for d in dst:
        graph.add_edge(d, _SINK)
    return float(nx.maximum_flow_value(graph, _SOURCE, _SINK))


def default_bandwidth(cluster: Cluster, size_a: int, size_b: int, same_node: bool) -> float:
    """The DESIGN closed form: ``min(size_a, size_b) * bw`` (GB/s)."""
    bw = cluster.intra_node_GBps if same_node else cluster.inter_node_GBps
    return min(size_a, size_b) * bw


def transfer_ms(nbytes: float, gbps: float) -> float:
    """Time in ms to move ``nbytes`` at ``gbps`` GB/s (1e9 B/s)."""
    if nbytes == 0:
        return 0.0
    return nbytes / (gbps * 1e6)
