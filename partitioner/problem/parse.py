"""The validating parser of problem formats v1, v2 and v3: a document (a dict as JSON or YAML gives it) to a :class:`Problem`.

:func:`_parse_problem` checks every field against the format (``DESIGN.md``,
"Problem format v1", "Problem format v2", "Schedules", "Problem format v3") and the ranges of
:mod:`partitioner.core.limits`, and raises :class:`ProblemError` naming the field
path for anything else. :meth:`Problem.from_dict` is its entry point; the
document rules (size, depth, strict values) are checked before, by
:mod:`partitioner.core.documents`.
"""
from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..core.limits import (
    MAX_BYTES,
    MAX_DEVICES,
    MAX_EDGES,
    MAX_GBPS,
    MAX_GPUS_PER_NODE,
    MAX_LAYERS,
    MAX_LEVELS,
    MAX_MICROBATCHES,
    MAX_NODES,
    MAX_OVERSUBSCRIPTION,
    MAX_TIME_MS,
    MAX_TOTAL_BYTES,
    MAX_VIRTUAL_STAGES,
    MIN_GBPS,
)
from .nodes import _describe, _Node, _num
from .records import (
    _VARIANT,
    _VARIANT_NAME,
    FORMAT_VERSIONS,
    OBJECTIVES,
    SCHEDULES,
    Cluster,
    Layer,
    LayerCost,
    Layout,
    Level,
    Problem,
    ProblemError,
    StageBounds,
    Topology,
    Training,
    register_parser,
)


def _parse_problem(data: Any, source: str | None) -> Problem:
    root = _Node(data, "")
    if not isinstance(data, Mapping):
        raise ProblemError(f"the document must be an object (a mapping), got {_describe(data)}")
    if "version" not in data:
        raise ProblemError(
            "is missing (this reader knows format versions " + ", ".join(map(str, FORMAT_VERSIONS)) + ")", path="version"
        )
    version_node = root.child("version")
    if isinstance(version_node.value, bool) or version_node.value not in FORMAT_VERSIONS:
        raise version_node.fail(
            f"unknown format version {version_node.value!r}; this reader knows versions "
            + ", ".join(map(str, FORMAT_VERSIONS))
        )
    version = int(version_node.value)
    optional = ("name", "stages", "meta") + (("variants",) if version >= 2 else ())
    if version < 2 and "variants" in data:
        raise root.child("variants").fail("variants need format version 2 (set version: 2)")
    root.mapping(("version", "cluster", "training", "layers"), optional)

    name = root.child("name").string() if "name" in data else (Path(source).stem if source else "problem")
    cluster = _parse_cluster(root.child("cluster"))
    training = _parse_training(root.child("training"))
    variants = _parse_variants(root.child("variants")) if "variants" in data else None
    layers = _parse_layers(root.child("layers"), cluster, version, variants)
    stages = _parse_stages(root.child("stages") if "stages" in data else None, len(layers), cluster.num_devices)
    _check_schedule(training, stages, root)
    meta: Mapping[str, Any] = MappingProxyType({})
    if "meta" in data:
        node = root.child("meta")
        if not isinstance(node.value, Mapping):
            raise node.fail(f"must be an object, got {_describe(node.value)}")
        meta = _frozen(dict(node.value))
    return Problem(
        name=name,
        cluster=cluster,
        training=training,
        stages=stages,
        layers=layers,
        meta=meta,
        source=source,
        version=version,
        variants=MappingProxyType(dict(variants or {})),
    )


def _parse_variants(node: _Node) -> dict[str, str]:
    if not isinstance(node.value, Mapping):
        raise node.fail(f"must be an object {{variant name: one-line description}}, got {_describe(node.value)}")
    out = {}
    for key, child in node.items():
        if not _VARIANT_NAME.match(key):
            raise child.fail(f"variant name must match {_VARIANT} (lowercase letters, digits and _ . + -), got {key!r}")
        out[key] = child.string()
    return out


def _check_schedule(training: Training, stages: StageBounds, root: _Node) -> None:
    """Cross-field rules of ``training.schedule`` (DESIGN.md, "Schedules")."""
    if training.schedule != "interleaved":
        return
    if stages.min == stages.max and training.microbatches % stages.min:
        raise ProblemError(
            f"the interleaved schedule needs microbatches to be a multiple of the {stages.min} pipeline "
            f"stage groups, got {training.microbatches}",
            path="training.microbatches",
        )


def _parse_cluster(node: _Node) -> Cluster:
    node.mapping(
        ("nodes", "gpus_per_node", "gpu_memory_bytes", "intra_node_GBps", "inter_node_GBps"),
        ("topology", "stage_sizes", "devices", "levels"),
    )
    nodes = node.child("nodes").integer(minimum=1, maximum=MAX_NODES)
    gpus = node.child("gpus_per_node").integer(minimum=1, maximum=MAX_GPUS_PER_NODE)
    if nodes * gpus > MAX_DEVICES:
        raise node.fail(
            f"nodes * gpus_per_node = {nodes * gpus} devices is more than the {MAX_DEVICES} accepted "
            "(see the accepted ranges in docs/limits.md)"
        )
    memory = node.child("gpu_memory_bytes").integer(minimum=1, maximum=MAX_BYTES)
    intra = node.child("intra_node_GBps").number(positive=True, minimum=MIN_GBPS, maximum=MAX_GBPS)
    inter = node.child("inter_node_GBps").number(positive=True, minimum=MIN_GBPS, maximum=MAX_GBPS)
    topology = _parse_topology(node.child("topology"), nodes * gpus) if "topology" in node.value else None
    stage_sizes = _parse_stage_sizes(node.child("stage_sizes"), gpus) if "stage_sizes" in node.value else None
    devices = None
    if "devices" in node.value:
        dnode = node.child("devices")
        devices = dnode.integer(minimum=1)
        if not (nodes - 1) * gpus < devices <= nodes * gpus:
            raise dnode.fail(
                f"must be in {(nodes - 1) * gpus + 1}..{nodes * gpus}: the job uses every GPU of the first "
                f"{nodes - 1} nodes and 1..{gpus} of the last (give fewer nodes for a smaller job), got {devices}"
            )
        if topology is not None:
            raise dnode.fail("a job on part of the cluster (devices) cannot be combined with a user topology yet")
    levels = None
    if "levels" in node.value:
        lnode = node.child("levels")
        if "topology" in node.value:
            raise lnode.fail("network levels cannot be combined with cluster.topology (a graph of its own)")
        levels = _parse_levels(lnode, nodes)
    return Cluster(nodes, gpus, memory, intra, inter, topology, stage_sizes, devices, levels)


def parse_levels(value: Any, path: str = "levels", cluster_nodes: int = 1) -> tuple[Level, ...]:
    """``levels`` as in a problem's cluster (DESIGN.md "Network levels"), for a cluster preset: a
    :class:`ProblemError` names ``path``'s field; ``cluster_nodes`` is checked against the outermost level."""
    return _parse_levels(_Node(value, path), cluster_nodes)


def _parse_levels(node: _Node, cluster_nodes: int) -> tuple[Level, ...]:
    """``cluster.levels``: tiers of nested groups of consecutive nodes, innermost first (DESIGN.md
    "Network levels"); every level but the last states ``nodes``, each a multiple of the one before."""
    if not isinstance(node.value, list) or not node.value:
        raise node.fail(f"must be a non-empty list of levels (innermost first), got {_describe(node.value)}")
    if len(node.value) > MAX_LEVELS:
        raise node.fail(f"has {len(node.value)} levels, more than the {MAX_LEVELS} accepted")
    levels: list[Level] = []
    count = len(node.value)
    for k, child in enumerate(node.elements()):
        child.mapping(("name", "GBps"), ("nodes", "oversubscription"))
        name = child.child("name").string()
        if not name or any(level.name == name for level in levels):
            raise child.child("name").fail(f"must be a non-empty name no other level has, got {name!r}")
        size = None
        if "nodes" in child.value:
            snode = child.child("nodes")
            size = snode.integer(minimum=1, maximum=MAX_NODES)
            inner = levels[-1].nodes if levels else None
            if inner is not None and (size <= inner or size % inner):
                raise snode.fail(f"must be a multiple of the inner level's {inner} nodes, larger than it (groups nest), "
                                 f"got {size}")
            if k == count - 1 and size < cluster_nodes:
                raise snode.fail(f"the outermost level must hold every node: give at least the cluster's "
                                 f"{cluster_nodes} nodes, or omit nodes, got {size}")
        elif k < count - 1:
            raise ProblemError("is missing (only the outermost level may omit it: one group then holds the "
                               "whole cluster)", path=f"{child.path}.nodes")
        gbps = child.child("GBps").number(positive=True, minimum=MIN_GBPS, maximum=MAX_GBPS)
        over = 1.0
        if "oversubscription" in child.value:
            over = child.child("oversubscription").number(minimum=1.0, maximum=MAX_OVERSUBSCRIPTION)
        levels.append(Level(name, size, gbps, over))
    return tuple(levels)


def _parse_stage_sizes(node: _Node, gpus_per_node: int) -> tuple[int, ...]:
    """``cluster.stage_sizes``: distinct in-node stage sizes in 1..gpus_per_node, any order (kept sorted)."""
    if not isinstance(node.value, list) or not node.value:
        raise node.fail(f"must be a non-empty list of stage sizes in 1..{gpus_per_node}, got {_describe(node.value)}")
    sizes: list[int] = []
    for child in node.elements():
        size = child.integer(minimum=1, maximum=gpus_per_node)
        if size in sizes:
            raise child.fail(f"lists the stage size {size} twice")
        sizes.append(size)
    return tuple(sorted(sizes))


def _parse_topology(node: _Node, num_devices: int) -> Topology:
    node.mapping(("edges",))
    edges = []
    seen_gpus: set[int] = set()
    edges_node = node.child("edges")
    if isinstance(edges_node.value, list) and len(edges_node.value) > MAX_EDGES:
        raise edges_node.fail(f"has {len(edges_node.value)} edges, more than the {MAX_EDGES} accepted")
    for edge in edges_node.elements():
        if not isinstance(edge.value, list) or len(edge.value) != 3:
            raise edge.fail("must be a list [u, v, GBps]")
        ends = []
        for i in (0, 1):
            end = edge.child(i)
            v = end.value
            if isinstance(v, bool) or not isinstance(v, (int, str)):
                raise end.fail(f"must be a GPU id (integer) or a vertex name (string), got {_describe(v)}")
            if isinstance(v, int):
                if not 0 <= v < num_devices:
                    raise end.fail(f"GPU id must be in 0..{num_devices - 1}, got {v}")
                seen_gpus.add(v)
            ends.append(v)
        if ends[0] == ends[1]:
            raise edge.fail("an edge must join two different vertices")
        edges.append((ends[0], ends[1], edge.child(2).number(positive=True, minimum=MIN_GBPS, maximum=MAX_GBPS)))
    if not edges:
        raise node.child("edges").fail("must list at least one edge")
    missing = sorted(set(range(num_devices)) - seen_gpus)
    if missing:
        raise node.child("edges").fail(f"GPU {missing[0]} is on no edge; every GPU 0..{num_devices - 1} must be connected")
    import networkx as nx  # local: only user topologies need the connectivity check here

    graph = nx.Graph()
    graph.add_edges_from((u, v) for u, v, _ in edges)
    if not nx.is_connected(graph):
        raise node.child("edges").fail("the graph is not connected")
    return Topology(tuple(edges))


def _parse_training(node: _Node) -> Training:
    node.mapping(("microbatches",), ("objective", "schedule", "virtual_stages"))
    microbatches = node.child("microbatches").integer(minimum=1, maximum=MAX_MICROBATCHES)
    objective = "bottleneck"
    if "objective" in node.value:
        obj = node.child("objective")
        objective = obj.string()
        if objective not in OBJECTIVES:
            raise obj.fail(f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    schedule = "1f1b"
    if "schedule" in node.value:
        sched = node.child("schedule")
        schedule = sched.string()
        if schedule not in SCHEDULES:
            raise sched.fail(f"must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    virtual = 1
    if "virtual_stages" in node.value:
        vnode = node.child("virtual_stages")
        virtual = vnode.integer(minimum=1, maximum=MAX_VIRTUAL_STAGES)
        if schedule != "interleaved" and virtual != 1:
            raise vnode.fail(f"virtual stages are for schedule 'interleaved' only (schedule is {schedule!r})")
    if schedule == "interleaved":
        if "virtual_stages" not in node.value:
            raise ProblemError("is missing: the interleaved schedule needs virtual_stages >= 2", path=f"{node.path}.virtual_stages")
        if virtual < 2:
            raise node.child("virtual_stages").fail(f"the interleaved schedule needs virtual_stages >= 2, got {virtual}")
    return Training(microbatches, objective, schedule, virtual)


def _parse_layers(node: _Node, cluster: Cluster, version: int = 1, variants: Mapping[str, str] | None = None) -> tuple[Layer, ...]:
    if isinstance(node.value, list) and len(node.value) > MAX_LAYERS:
        raise node.fail(f"has {len(node.value)} layers, more than the {MAX_LAYERS} accepted (see the accepted ranges in docs/limits.md)")
    layers = []
    totals = _Totals()
    configs: dict[str, Layout] = {}  # cost key -> its checked config
    # id of a costs dict -> (its table, its keys, their totals slots, their bytes): a dict several layers share
    # (a YAML alias, the cost model's table of equal blocks) is read once; the document keeps it alive and unchanged
    read: dict[int, tuple[Mapping[Layout, LayerCost], list[str], np.ndarray, np.ndarray]] = {}
    for i, lnode in enumerate(node.elements()):
        lnode.mapping(("costs",), ("name", "module", "out_bytes", "tied_to"))
        tied_to = _parse_tied_to(lnode, i, version) if "tied_to" in lnode.value else None
        name = lnode.child("name").string() if "name" in lnode.value else f"layer{i}"
        module = lnode.child("module").string() if "module" in lnode.value else "layer"
        out_bytes = lnode.child("out_bytes").integer(minimum=0, maximum=MAX_BYTES) if "out_bytes" in lnode.value else 0
        costs_node = lnode.child("costs")
        shared = read.get(id(costs_node.value)) if type(costs_node.value) is dict else None
        if shared is not None:
            totals.add_table(shared[2], shared[3], shared[1], costs_node)
            if tied_to is None and version >= 3:
                _check_untied(shared[0], shared[1], costs_node)
            layers.append(Layer(name, module, out_bytes, shared[0], tied_to))
            continue
        if type(costs_node.value) is not dict and not isinstance(costs_node.value, Mapping):
            raise costs_node.fail(
                f"must be an object keyed by config (dp<int>tp<int>[/variant]), got {_describe(costs_node.value)}"
            )
        costs: dict[Layout, LayerCost] = {}
        keys: list[str] = []
        slots: list[int] = []
        for key, cnode in costs_node.items():
            layout = configs.get(key)
            if layout is None:  # each distinct key is checked once, where it first appears
                layout = configs[key] = _parse_config(key, cnode, cluster, version, variants)
            if layout in costs:
                other = keys[list(costs).index(layout)]
                raise cnode.fail(
                    f"duplicate config: {key!r} and {other!r} are two spellings of {layout.key!r}"
                    if other != key else "duplicate config"
                )
            cost = costs[layout] = _parse_cost(cnode, version)
            keys.append(key)
            slots.append(totals.add(layout, cost, costs_node, key))
        if not costs:
            raise costs_node.fail(
                "no layout usable on this cluster: give at least one dp<int>tp<int> entry "
                f"with dp*tp in {{{cluster.describe_sizes()}}}"
            )
        table = MappingProxyType(costs)
        if tied_to is None and version >= 3:
            _check_untied(table, keys, costs_node)
        if type(costs_node.value) is dict:
            amounts = np.array([[c.weight_bytes for c in costs.values()], [c.act_bytes for c in costs.values()]], dtype=np.int64)
            read[id(costs_node.value)] = (table, keys, np.array(slots, dtype=np.int64), amounts)
        layers.append(Layer(name, module, out_bytes, table, tied_to))
    if not layers:
        raise node.fail("must list at least one layer")
    return tuple(layers)


def _parse_config(
    key: str, cnode: _Node, cluster: Cluster, version: int, variants: Mapping[str, str] | None
) -> Layout:
    """The config a cost key names, checked against the format version, the variants and the cluster."""
    try:
        layout = Layout.parse(key)
    except ValueError as err:
        raise cnode.fail(str(err)) from None
    if layout.is_v3 and version < 3:
        raise cnode.fail(f"cp, ep and etp in a cost key need format version 3 (set version: 3), got {key!r}")
    if layout.variant and version < 2:
        raise cnode.fail(f"variant {layout.variant!r} in a cost key needs format version 2 (set version: 2)")
    if layout.variant and variants is not None and layout.variant not in variants:
        raise cnode.fail(
            f"variant {layout.variant!r} is not listed in the top-level 'variants' "
            f"(listed: {', '.join(sorted(variants)) or 'none'})"
        )
    if layout.tp > cluster.gpus_per_node:
        raise cnode.fail(f"tp={layout.tp} exceeds gpus_per_node={cluster.gpus_per_node}")
    if not cluster.allows_size(layout.devices):
        product = "dp*tp*cp" if layout.cp != 1 else "dp*tp"
        raise cnode.fail(
            f"{product}={layout.devices} is not an allowed stage size on this cluster (allowed: {cluster.describe_sizes()})"
        )
    return layout


def _parse_tied_to(lnode: _Node, index: int, version: int) -> int:
    """``tied_to`` of layer ``index``: an earlier layer's index (format v3)."""
    node = lnode.child("tied_to")
    if version < 3:
        raise node.fail("tied weights need format version 3 (set version: 3)")
    if index == 0:
        raise node.fail("the first layer has no earlier layer to be tied to")
    return node.integer(minimum=0, maximum=index - 1)


def _check_untied(table: Mapping[Layout, LayerCost], keys: list[str], costs_node: _Node) -> None:
    """A layer without ``tied_to`` gives no ``tied_weight_bytes``."""
    for key, cost in zip(keys, table.values()):
        if cost.tied_weight_bytes:
            raise costs_node.child(key).child("tied_weight_bytes").fail(
                "needs tied_to on the layer (the earlier layer whose weights this copy shares)"
            )


_PLAIN_COST = frozenset(("fwd_ms", "bwd_ms", "weight_bytes", "act_bytes"))
_SPLIT_COST = _PLAIN_COST | {"bwd_input_ms", "bwd_weight_ms"}
_NUMBER = (float, int)


def _parse_cost(cnode: _Node, version: int = 3) -> LayerCost:
    v = cnode.value
    if type(v) is dict and (len(v) == 4 and v.keys() == _PLAIN_COST or len(v) == 6 and v.keys() == _SPLIT_COST):
        # fast path, the common entries with every value plainly in range; anything else is checked below
        fwd, bwd, w, a = v["fwd_ms"], v["bwd_ms"], v["weight_bytes"], v["act_bytes"]
        if (
            type(fwd) in _NUMBER
            and type(bwd) in _NUMBER
            and type(w) is int
            and type(a) is int
            and 0 <= fwd <= MAX_TIME_MS
            and 0 <= bwd <= MAX_TIME_MS
            and 0 <= w <= MAX_BYTES
            and 0 <= a <= MAX_BYTES
        ):
            if len(v) == 4:
                return LayerCost(float(fwd), float(bwd), w, a)
            split_b, split_w = v["bwd_input_ms"], v["bwd_weight_ms"]
            if (
                type(split_b) in _NUMBER
                and type(split_w) in _NUMBER
                and 0 <= split_b <= MAX_TIME_MS
                and 0 <= split_w <= MAX_TIME_MS
                and math.isclose(float(split_b) + float(split_w), float(bwd), rel_tol=1e-9, abs_tol=1e-12)
            ):
                return LayerCost(float(fwd), float(bwd), w, a, float(split_b), float(split_w))
    return _parse_cost_checked(cnode, version)


def _parse_cost_checked(cnode: _Node, version: int = 3) -> LayerCost:
    optional = ("bwd_input_ms", "bwd_weight_ms") + (("tied_weight_bytes",) if version >= 3 else ())
    cnode.mapping(("fwd_ms", "bwd_ms", "weight_bytes", "act_bytes"), optional)
    fwd = cnode.child("fwd_ms").number(minimum=0, maximum=MAX_TIME_MS)
    bwd = cnode.child("bwd_ms").number(minimum=0, maximum=MAX_TIME_MS)
    split_b = split_w = None
    given = [k for k in ("bwd_input_ms", "bwd_weight_ms") if k in cnode.value]
    if len(given) == 1:
        other = "bwd_weight_ms" if given[0] == "bwd_input_ms" else "bwd_input_ms"
        raise ProblemError(f"is missing: {given[0]} is given, so {other} must be too", path=f"{cnode.path}.{other}")
    if given:
        split_b = cnode.child("bwd_input_ms").number(minimum=0, maximum=MAX_TIME_MS)
        split_w = cnode.child("bwd_weight_ms").number(minimum=0, maximum=MAX_TIME_MS)
        if not math.isclose(split_b + split_w, bwd, rel_tol=1e-9, abs_tol=1e-12):
            raise cnode.child("bwd_weight_ms").fail(
                f"bwd_input_ms + bwd_weight_ms = {_num(split_b + split_w)} must equal bwd_ms = {_num(bwd)}"
            )
    weight = cnode.child("weight_bytes").integer(minimum=0, maximum=MAX_BYTES)
    tied = 0
    if "tied_weight_bytes" in cnode.value:
        tied = cnode.child("tied_weight_bytes").integer(minimum=0, maximum=MAX_BYTES)
        if tied > weight:
            raise cnode.child("tied_weight_bytes").fail(f"must be <= weight_bytes = {weight}, got {tied}")
    return LayerCost(
        fwd_ms=fwd,
        bwd_ms=bwd,
        weight_bytes=weight,
        act_bytes=cnode.child("act_bytes").integer(minimum=0, maximum=MAX_BYTES),
        bwd_input_ms=split_b,
        bwd_weight_ms=split_w,
        tied_weight_bytes=tied,
    )


class _Totals:
    """Per config, Σ weight_bytes and Σ act_bytes over the layers read so far, each kept within MAX_TOTAL_BYTES.

    int64 columns (a total stops below 2^53 + 2^50); a table several layers
    share is added in one step, and the error names the first entry, in key
    order, whose total passes the limit -- where adding entry by entry stops.
    """

    def __init__(self) -> None:
        self.slot: dict[Layout, int] = {}
        self.sums = np.zeros((2, 16), dtype=np.int64)  # rows: weight_bytes, act_bytes

    def add(self, layout: Layout, cost: LayerCost, costs_node: _Node, key: str) -> int:
        """Add entry ``key`` of ``costs_node``; its config's column."""
        i = self.slot.get(layout)
        if i is None:
            i = self.slot[layout] = len(self.slot)
            if i == self.sums.shape[1]:
                self.sums = np.concatenate([self.sums, np.zeros_like(self.sums)], axis=1)
        column = self.sums[:, i]
        column[0] += cost.weight_bytes
        column[1] += cost.act_bytes
        if column[0] > MAX_TOTAL_BYTES or column[1] > MAX_TOTAL_BYTES:
            raise _over_total(column, costs_node, key)
        return i

    def add_table(self, slots: np.ndarray, amounts: np.ndarray, keys: list[str], costs_node: _Node) -> None:
        """Add a table read before: its entries' bytes (2 x entries) at their columns ``slots`` (distinct)."""
        self.sums[:, slots] += amounts
        over = np.flatnonzero((self.sums[:, slots] > MAX_TOTAL_BYTES).any(axis=0))
        if over.size:
            raise _over_total(self.sums[:, slots[over[0]]], costs_node, keys[over[0]])


def _over_total(totals: Any, costs_node: _Node, key: str) -> ProblemError:
    """The error for totals past MAX_TOTAL_BYTES after entry ``key`` of ``costs_node`` (weight_bytes named first)."""
    weight, act = int(totals[0]), int(totals[1])
    field_name = "weight_bytes" if weight > MAX_TOTAL_BYTES else "act_bytes"
    total = weight if field_name == "weight_bytes" else act
    return costs_node.child(key).child(field_name).fail(
        f"the {field_name} of this config summed over the layers so far is {total} bytes, more than the "
        f"2^53 accepted (see the accepted ranges in docs/limits.md)"
    )


def _parse_stages(node: _Node | None, num_layers: int, num_devices: int) -> StageBounds:
    limit = min(num_layers, num_devices)
    if node is None:
        return StageBounds(1, limit)
    if isinstance(node.value, Mapping):
        node.mapping((), ("min", "max"))
        lo = node.child("min").integer(minimum=1) if "min" in node.value else 1
        hi = node.child("max").integer(minimum=1) if "max" in node.value else limit
        if "max" in node.value and hi > limit:
            raise node.child("max").fail(f"must be <= min(layers, devices) = {limit}, got {hi}")
        if lo > limit:
            raise node.child("min").fail(f"must be <= min(layers, devices) = {limit}, got {lo}")
        if lo > hi:
            raise node.fail(f"min ({lo}) must be <= max ({hi})")
        return StageBounds(lo, hi)
    count = node.integer(minimum=1)
    if count > limit:
        raise node.fail(f"must be <= min(layers, devices) = {limit}, got {count}")
    return StageBounds(count, count)


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


register_parser(_parse_problem)
