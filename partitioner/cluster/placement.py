"""Placing stages on nodes: from "which adjacent stages share a node" to device ids.

On the default cluster graph a plan's times depend on its placement only
through the *links*: the adjacent stage pairs that lie inside one same node
(their transfer runs at NVLink speed). A maximal chain of linked stages is a
*run*; runs must fit in a node, and all runs must pack exactly into the nodes
left over by the multi-node stages. This module decides whether a link
pattern can be realised and builds the ``device_ids``.

Two readings of a link pattern:

* ``exact=False`` -- the linked pairs must share a node; other adjacent pairs
may share one too (they only get faster when NVLink is the faster link).

More (the detail of this module): ``docs/internals/cluster.md``, section ``partitioner.cluster.placement``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from ..problem import Cluster

__all__ = [
    "runs_of",
    "pack_runs",
    "node_assignment_ids",
    "contiguous_node_assignment",
    "label_nodes",
    "size_sequences",
]

Assignment = list  # per stage: an int (the node of an in-node stage) or a tuple of whole nodes


def runs_of(sizes: Sequence[int], links: Sequence[bool]) -> list[list[int]]:
    """Split stage indices into runs: maximal chains joined by links."""
    runs: list[list[int]] = [[0]]
    for p in range(1, len(sizes)):
        if links[p - 1]:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def pack_runs(cluster: Cluster, sizes: Sequence[int], links: Sequence[bool], exact: bool = False) -> Assignment | None:
    """A node assignment realising ``links``, or None if there is none.

    Parameters
    ----------
    cluster : Cluster
    sizes : sequence of int
        Stage sizes (allowed sizes summing to the device count).
    links : sequence of bool
        ``links[p]``: stages ``p`` and ``p + 1`` share a node.
    exact : bool
        Also forbid unlinked adjacent stages from sharing a node.

    Returns
    -------
    list or None
        Per stage, the node of an in-node stage or the tuple of nodes of a
        multi-node stage.
    """
    G = cluster.gpus_per_node
    if sum(sizes) != cluster.num_devices or len(links) != len(sizes) - 1:
        return None
    runs = runs_of(sizes, links)
    run_size = []
    for run in runs:
        if len(run) > 1 and any(sizes[p] >= G for p in run):
            return None  # a full-node or multi-node stage cannot share its node
        total = sum(sizes[p] for p in run)
        if sizes[run[0]] <= G and total > G:
            return None
        run_size.append(total)
    in_node = [i for i, run in enumerate(runs) if sizes[run[0]] <= G]
    whole_nodes = sum(sizes[runs[i][0]] // G for i in range(len(runs)) if i not in set(in_node))
    bins = cluster.nodes - whole_nodes
    # conflicts: consecutive in-node runs may not share a bin in exact mode
    conflict = set()
    if exact:
        for i in range(len(runs) - 1):
            if sizes[runs[i][-1]] < G and sizes[runs[i + 1][0]] < G:
                conflict.add((i, i + 1))
    capacities = [G] * bins
    if cluster.last_node_gpus != G and bins:
        capacities[-1] = cluster.last_node_gpus  # the partly used last node (DESIGN "partial racks")
    bin_of = _pack([run_size[i] for i in in_node], in_node, capacities, conflict)
    if bin_of is None:
        return None
    stage_bin: list[int | None] = [None] * len(sizes)
    for i, run in enumerate(runs):
        for p in run:
            stage_bin[p] = bin_of.get(i)
    return label_nodes(sizes, stage_bin, G)


def label_nodes(sizes: Sequence[int], stage_bin: Sequence, gpus_per_node: int) -> Assignment:
    """Turn abstract bins into node numbers, in order of first use by a stage.

    ``stage_bin[p]`` names the bin (node) of an in-node stage; multi-node
    stages (``sizes[p] > gpus_per_node``) take the next whole nodes.
    """
    assignment: Assignment = []
    names: dict = {}
    next_node = 0
    for size, b in zip(sizes, stage_bin):
        if size > gpus_per_node:
            k = size // gpus_per_node
            assignment.append(tuple(range(next_node, next_node + k)))
            next_node += k
        else:
            if b not in names:
                names[b] = next_node
                next_node += 1
            assignment.append(names[b])
    return assignment


def _pack(items: list[int], ids: list[int], capacities: list[int], conflict: set) -> dict[int, int] | None:
    """Exact bin packing: every bin filled to its capacity; returns item id -> bin."""
    bins = len(capacities)
    if sum(items) != sum(capacities):
        return None
    order = sorted(range(len(items)), key=lambda j: -items[j])
    residual = list(capacities)
    where: dict[int, int] = {}
    neighbours: dict[int, set[int]] = {}
    for a, b in conflict:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)
    failed: set[tuple] = set()

    def search(k: int) -> bool:
        if k == len(order):
            return True
        key = (k, tuple(residual)) if not conflict else None
        if key is not None and key in failed:
            return False
        j = order[k]
        tried = set()
        for b in range(bins):
            r = residual[b]
            if r < items[j] or (not conflict and r in tried):
                continue
            if any(where.get(o) == b for o in neighbours.get(ids[j], ())):
                continue
            tried.add(r)
            residual[b] -= items[j]
            where[ids[j]] = b
            if search(k + 1):
                return True
            residual[b] += items[j]
            del where[ids[j]]
        if key is not None:
            failed.add(key)
        return False

    return dict(where) if search(0) else None


def node_assignment_ids(cluster: Cluster, sizes: Sequence[int], assignment: Assignment) -> list[tuple[int, ...]]:
    """Device ids per stage from a node assignment; in-node stages fill their node in stage order.

    When the job leaves the last node partly idle, the one node of the assignment that is not filled
    is renumbered the last (and the last one takes its number): the times depend only on which stages
    share a node, and the idle ids are then ``num_devices..`` as the format says.
    """
    G = cluster.gpus_per_node
    assignment = _partial_node_last(cluster, sizes, assignment)
    used = [0] * cluster.nodes
    ids: list[tuple[int, ...]] = []
    for size, where in zip(sizes, assignment):
        if isinstance(where, tuple):
            ids.append(tuple(d for n in where for d in range(n * G, (n + 1) * G)))
        else:
            start = where * G + used[where]
            ids.append(tuple(range(start, start + size)))
            used[where] += size
            if used[where] > G:
                raise ValueError(f"node {where} over-filled")
    return ids


def _partial_node_last(cluster: Cluster, sizes: Sequence[int], assignment: Assignment) -> Assignment:
    """``assignment`` with the partly used node (if the job has one) swapped with the last node."""
    G, last = cluster.gpus_per_node, cluster.nodes - 1
    if cluster.last_node_gpus == G:
        return assignment
    fill = [0] * cluster.nodes
    for size, where in zip(sizes, assignment):
        if not isinstance(where, tuple):
            fill[where] += size
    whole = {n for where in assignment if isinstance(where, tuple) for n in where}
    partly = [n for n in range(cluster.nodes) if n not in whole and fill[n] != G]
    if len(partly) != 1 or partly[0] == last:
        return assignment
    swap = {partly[0]: last, last: partly[0]}

    def moved(where):
        if isinstance(where, tuple):
            return tuple(swap.get(n, n) for n in where)
        return swap.get(where, where)

    return [moved(where) for where in assignment]


def contiguous_node_assignment(cluster: Cluster, sizes: Sequence[int]) -> Assignment | None:
    """First-fit in stage order: each in-node stage goes to the first node with room.

    Returns None when first-fit does not fill every node exactly.
    """
    G = cluster.gpus_per_node
    used: list[int] = []  # fill of the bins opened so far
    bins_total = cluster.nodes - sum(s // G for s in sizes if s > G)
    # the GPUs used per bin: the last bin opened is the partly used last node, if the job has one
    capacity = [G] * bins_total
    if bins_total and cluster.last_node_gpus != G:
        capacity[-1] = cluster.last_node_gpus
    stage_bin: list = []
    for s in sizes:
        if s > G:
            stage_bin.append(None)
            continue
        for b in range(len(used)):
            if used[b] + s <= capacity[b]:
                used[b] += s
                stage_bin.append(b)
                break
        else:
            if len(used) == bins_total or s > capacity[len(used)]:
                return None
            used.append(s)
            stage_bin.append(len(used) - 1)
    if len(used) != bins_total or any(u != c for u, c in zip(used, capacity)):
        return None
    return label_nodes(sizes, stage_bin, G)


@lru_cache(maxsize=None)
def size_sequences(allowed: tuple[int, ...], total: int, count: int) -> tuple[tuple[int, ...], ...]:
    """All sequences of ``count`` allowed sizes summing to ``total`` (for small enumerations)."""
    if count == 0:
        return ((),) if total == 0 else ()
    out = []
    for s in allowed:
        if s > total - (count - 1):
            break
        for rest in size_sequences(allowed, total - s, count - 1):
            out.append((s,) + rest)
    return tuple(out)
