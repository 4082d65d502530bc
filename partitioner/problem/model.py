"""Problem formats v1 and v2: the model, the cluster and the training setup a plan is made for.

A problem is loaded from JSON or YAML (:func:`load_problem`) or built from a
dict (:meth:`Problem.from_dict`). Loading validates everything and raises one
exception type, :class:`ProblemError`, whose message names the source and the
field path, e.g. ``p.json: layers[3].costs.dp2tp1.fwd_ms: must be >= 0, got -1``.
Units: times in ms, sizes in bytes, bandwidth in GB/s (1e9 B/s).

The formats are specified in ``DESIGN.md`` ("Problem format v1", "Problem
format v2", "Schedules"). Version 2 adds *variants* to the cost keys
(``dp2tp4/zero3``: a config is (dp, tp, variant)) and *segments*: in a
version-2 problem each maximal run of same-``module`` layers inside a stage
has its own config (:meth:`Problem.segments`). A version-1 problem keeps one
config per stage, so no v1 answer changes. Everything a solver needs is a
frozen dataclass here; nothing in this module knows about solvers, plans or
the CLI.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterator, Mapping

import numpy as np
import yaml

from ..documents import check_document, read_document
from ..limits import (
    MAX_BYTES,
    MAX_DEVICES,
    MAX_EDGES,
    MAX_GBPS,
    MAX_GPUS_PER_NODE,
    MAX_LAYERS,
    MAX_MICROBATCHES,
    MAX_NODES,
    MAX_TIME_MS,
    MAX_TOTAL_BYTES,
    MAX_VIRTUAL_STAGES,
    MIN_GBPS,
)
__all__ = [
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "OBJECTIVES",
    "SCHEDULES",
    "ProblemError",
    "Layout",
    "Config",
    "LayerCost",
    "Layer",
    "Topology",
    "Cluster",
    "Training",
    "StageBounds",
    "Problem",
    "load_problem",
    "as_problem",
    "dump_problem",
    "read_document",
]

FORMAT_VERSION = 1  # the version a document without v2 features is written as
FORMAT_VERSIONS = (1, 2)
OBJECTIVES = ("bottleneck", "iteration")
SCHEDULES = ("1f1b", "zb-h1", "interleaved", "gpipe")
_VARIANT = r"[a-z0-9][a-z0-9_.+-]*"
_LAYOUT_KEY = re.compile(r"^dp([1-9][0-9]*)tp([1-9][0-9]*)(?:/(" + _VARIANT + r"))?$")
_VARIANT_NAME = re.compile(r"^" + _VARIANT + r"$")


class ProblemError(ValueError):
    """A problem that does not follow format v1.

    The message reads ``SOURCE: FIELD.PATH: what is wrong``; ``source``,
    ``path`` and ``reason`` are also kept as attributes.
    """

    def __init__(self, reason: str, *, path: str = "", source: str | None = None):
        self.reason = reason
        self.path = path
        self.source = source
        parts = [p for p in (source, path) if p]
        super().__init__(": ".join(parts + [reason]))

    def with_source(self, source: str) -> "ProblemError":
        return ProblemError(self.reason, path=self.path, source=source)


# --------------------------------------------------------------------------- data


@dataclass(frozen=True, order=True)
class Layout:
    """A config of one stage segment: (data-parallel, tensor-parallel) on ``dp * tp`` devices,
    and a memory-knob ``variant`` (format v2; ``""`` is the plain key).

    The variant is opaque to the solvers: the cost entry's numbers say what it
    costs. Two configs with the same :attr:`mesh` need no reshard between them.
    """

    dp: int
    tp: int
    variant: str = ""

    @property
    def devices(self) -> int:
        return self.dp * self.tp

    @property
    def mesh(self) -> tuple[int, int]:
        """``(dp, tp)``: what the tensor layout depends on (not the variant)."""
        return (self.dp, self.tp)

    @property
    def key(self) -> str:
        base = f"dp{self.dp}tp{self.tp}"
        return f"{base}/{self.variant}" if self.variant else base

    @classmethod
    def parse(cls, key: str) -> "Layout":
        match = _LAYOUT_KEY.match(key) if isinstance(key, str) else None
        if not match:
            raise ValueError(
                "cost key must look like dp<int>tp<int> or dp<int>tp<int>/<variant> "
                f"(variant: lowercase letters, digits and _ . + -; e.g. dp2tp4, dp8tp1/zero3), got {key!r}"
            )
        if len(match.group(1)) > 6 or len(match.group(2)) > 6:
            raise ValueError(f"dp and tp in a cost key must be below 10^6, got {key[:40]!r}")
        return cls(int(match.group(1)), int(match.group(2)), match.group(3) or "")

    def __str__(self) -> str:
        return self.key


Config = Layout


@dataclass(frozen=True)
class LayerCost:
    """What one layer costs per microbatch in one config, on each device of the stage.

    ``bwd_input_ms`` and ``bwd_weight_ms`` (optional, summing to ``bwd_ms``)
    split the backward into B (input gradient) and W (weight gradient) for the
    zero-bubble schedule; :meth:`split` gives an even split when they are absent.
    """

    fwd_ms: float
    bwd_ms: float
    weight_bytes: int
    act_bytes: int
    bwd_input_ms: float | None = None
    bwd_weight_ms: float | None = None

    def split(self) -> tuple[float, float]:
        """``(B, W)``: the backward's input- and weight-gradient parts (even split if not given)."""
        if self.bwd_input_ms is None or self.bwd_weight_ms is None:
            return self.bwd_ms / 2, self.bwd_ms / 2
        return self.bwd_input_ms, self.bwd_weight_ms


@dataclass(frozen=True)
class Layer:
    """One layer in execution order, with a cost entry per layout it can run in."""

    name: str
    module: str
    out_bytes: int
    costs: Mapping[Layout, LayerCost]

    def cost(self, layout: Layout) -> LayerCost | None:
        return self.costs.get(layout)


@dataclass(frozen=True)
class Topology:
    """A user-supplied cluster graph: undirected edges ``(u, v, GBps)``.

    GPUs are the integers ``0..N-1``; any other vertex (a switch, a NIC) is a
    string. The bandwidth between two device sets is the max-flow between
    them on this graph (see :mod:`partitioner.topology`).
    """

    edges: tuple[tuple[int | str, int | str, float], ...]


@dataclass(frozen=True)
class Cluster:
    nodes: int
    gpus_per_node: int
    gpu_memory_bytes: int
    intra_node_GBps: float
    inter_node_GBps: float
    topology: Topology | None = None

    @property
    def num_devices(self) -> int:
        return self.nodes * self.gpus_per_node

    def node_of(self, device: int) -> int:
        return device // self.gpus_per_node

    def allowed_sizes(self) -> tuple[int, ...]:
        """Stage sizes rule 3 allows: powers of two dividing ``gpus_per_node``,
        ``gpus_per_node`` itself, and ``k * gpus_per_node`` for ``k = 2..nodes``."""
        return _allowed_sizes(self.gpus_per_node, self.nodes)

    def allows_size(self, devices: int) -> bool:
        """``devices in allowed_sizes()``, without building the list."""
        g = self.gpus_per_node
        if devices < 1:
            return False
        if devices <= g:
            return devices == g or (g % devices == 0 and devices & (devices - 1) == 0)
        return devices % g == 0 and devices // g <= self.nodes

    def describe_sizes(self) -> str:
        """The allowed sizes for a message: all of them, or the first few, ``...`` and the last."""
        sizes = self.allowed_sizes()
        if len(sizes) <= 12:
            return ", ".join(map(str, sizes))
        return ", ".join(map(str, sizes[:8])) + ", ..., " + str(sizes[-1])

    def allows(self, layout: Layout) -> bool:
        return layout.tp <= self.gpus_per_node and self.allows_size(layout.devices)


@lru_cache(maxsize=64)
def _allowed_sizes(g: int, nodes: int) -> tuple[int, ...]:
    sizes = {1 << i for i in range(g.bit_length()) if g % (1 << i) == 0}
    sizes.add(g)
    sizes.update(k * g for k in range(2, nodes + 1))
    return tuple(sorted(sizes))


@dataclass(frozen=True)
class Training:
    microbatches: int
    objective: str = "bottleneck"
    schedule: str = "1f1b"
    virtual_stages: int = 1


@dataclass(frozen=True)
class StageBounds:
    min: int
    max: int


@dataclass(frozen=True)
class Problem:
    """A validated v1 problem. Build it with :meth:`from_dict` or :func:`load_problem`."""

    name: str
    cluster: Cluster
    training: Training
    stages: StageBounds
    layers: tuple[Layer, ...]
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    source: str | None = field(default=None, compare=False, repr=False)
    version: int = 1
    variants: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    @property
    def num_devices(self) -> int:
        return self.cluster.num_devices

    @property
    def microbatches(self) -> int:
        return self.training.microbatches

    @property
    def objective(self) -> str:
        return self.training.objective

    def layouts(self) -> tuple[Layout, ...]:
        """Every config some layer can run in, sorted by (devices, tp, variant)."""
        found = {lay for layer in self.layers for lay in layer.costs}
        return tuple(sorted(found, key=lambda l: (l.devices, l.tp, l.variant)))

    configs = layouts

    @property
    def has_variants(self) -> bool:
        return any(lay.variant for lay in self.layouts())

    def segments(self, first: int, last: int) -> tuple[tuple[int, int], ...]:
        """The segments of a stage of layers ``first..last`` (inclusive).

        Version 2: the maximal runs of consecutive layers with the same
        ``module``, in order. Version 1: the whole stage (one layout per stage).
        """
        if self.version < 2:
            return ((first, last),)
        out = []
        start = first
        for i in range(first + 1, last + 1):
            if self.layers[i].module != self.layers[i - 1].module:
                out.append((start, i - 1))
                start = i
        out.append((start, last))
        return tuple(out)

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None, _checked: bool = False) -> "Problem":
        """Validate a problem document (a dict as JSON or YAML would give it).

        Raises
        ------
        ProblemError
            Naming the field, for anything outside format v1/v2 or the ranges
            of :mod:`partitioner.limits`.
        """
        try:
            if not _checked:
                check_document(data, source=source)
            return _parse_problem(data, source)
        except ProblemError as err:
            raise err if err.source or source is None else err.with_source(source)

    def to_dict(self) -> dict[str, Any]:
        """The v1 document; ``Problem.from_dict(p.to_dict()) == p``."""
        c = self.cluster
        cluster: dict[str, Any] = {
            "nodes": c.nodes,
            "gpus_per_node": c.gpus_per_node,
            "gpu_memory_bytes": c.gpu_memory_bytes,
            "intra_node_GBps": c.intra_node_GBps,
            "inter_node_GBps": c.inter_node_GBps,
        }
        if c.topology is not None:
            cluster["topology"] = {"edges": [list(e) for e in c.topology.edges]}
        training: dict[str, Any] = {"microbatches": self.training.microbatches, "objective": self.training.objective}
        if self.training.schedule != "1f1b":
            training["schedule"] = self.training.schedule
        if self.training.virtual_stages != 1:
            training["virtual_stages"] = self.training.virtual_stages
        doc: dict[str, Any] = {
            "version": self.version,
            "name": self.name,
            "cluster": cluster,
            "training": training,
            "stages": {"min": self.stages.min, "max": self.stages.max},
            "layers": [
                {
                    "name": layer.name,
                    "module": layer.module,
                    "out_bytes": layer.out_bytes,
                    "costs": {lay.key: _cost_doc(cost) for lay, cost in layer.costs.items()},
                }
                for layer in self.layers
            ],
        }
        if self.variants:
            doc["variants"] = dict(self.variants)
        if self.meta:
            doc["meta"] = _plain(self.meta)
        return doc


def _cost_doc(cost: LayerCost) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "fwd_ms": cost.fwd_ms,
        "bwd_ms": cost.bwd_ms,
        "weight_bytes": cost.weight_bytes,
        "act_bytes": cost.act_bytes,
    }
    if cost.bwd_input_ms is not None and cost.bwd_weight_ms is not None:
        doc["bwd_input_ms"] = cost.bwd_input_ms
        doc["bwd_weight_ms"] = cost.bwd_weight_ms
    return doc


def _plain(value: Any) -> Any:
    """Mapping proxies and tuples back to dicts and lists (for JSON/YAML dumps)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _frozen(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


# --------------------------------------------------------------------------- reading files


def load_problem(path: str | Path) -> Problem:
    """Load and validate a v1 or v2 problem from a JSON or YAML file.

    The file must follow the document rules of :mod:`partitioner.documents`
    (size, depth, strict values, no duplicate keys) and the fields the ranges
    of :mod:`partitioner.limits`; anything else raises :class:`ProblemError`.
    """
    data = read_document(path)
    return Problem.from_dict(data, source=str(path), _checked=True)


def as_problem(value: Any, *, what: str = "problem") -> Problem:
    """What the API accepts as a problem: a :class:`Problem`, a problem document (a mapping), or a file path.

    Raises
    ------
    ProblemError
        When ``value`` is none of these (saying what was expected), or is not a valid problem.
    """
    if isinstance(value, Problem):
        return value
    if isinstance(value, Mapping):
        return Problem.from_dict(value)
    if isinstance(value, (str, Path)):
        return load_problem(value)
    raise ProblemError(
        f"expected a Problem, a problem document (dict) or the path of a problem file, got {_describe(value)}", path=what
    )


def dump_problem(problem: Problem, path: str | Path) -> None:
    """Write ``problem`` as JSON (``.json``) or YAML (``.yaml``/``.yml``)."""
    path = Path(path)
    doc = problem.to_dict()
    if path.suffix.lower() in (".yaml", ".yml"):
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")


# --------------------------------------------------------------------------- validation


class _Node:
    """A value in the document together with its field path, for error messages.

    The path is spelled out only when asked for (an error, a nested message):
    a large problem has millions of nodes and almost never needs one.
    """

    __slots__ = ("value", "_path", "_parent", "_key")

    def __init__(self, value: Any, path: str | None, parent: "_Node | None" = None, key: str | int | None = None):
        self.value = value
        self._path = path
        self._parent = parent
        self._key = key

    @property
    def path(self) -> str:
        if self._path is None:
            base, key = self._parent.path, self._key
            self._path = f"{base}[{key}]" if isinstance(key, int) else (f"{base}.{key}" if base else key)
        return self._path

    def fail(self, reason: str) -> ProblemError:
        return ProblemError(reason, path=self.path)

    def child(self, key: str | int) -> "_Node":
        return _Node(self.value[key], None, self, key)

    # -- shapes
    def mapping(self, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> "_Node":
        if type(self.value) is not dict and not isinstance(self.value, Mapping):
            raise self.fail(f"must be an object, got {_describe(self.value)}")
        for key in required:
            if key not in self.value:
                where = f"{self.path}.{key}" if self.path else key
                raise ProblemError("is missing", path=where)
        unknown = [k for k in self.value if k not in required and k not in optional]
        if unknown:
            allowed = ", ".join(required + optional)
            raise self.fail(f"unknown field {unknown[0]!r} (allowed: {allowed})")
        return self

    def items(self) -> Iterator[tuple[str, "_Node"]]:
        for key in self.value:
            if not isinstance(key, str):
                raise self.fail(f"keys must be strings, got {key!r}")
            yield key, self.child(key)

    def elements(self) -> Iterator["_Node"]:
        if not isinstance(self.value, list):
            raise self.fail(f"must be a list, got {_describe(self.value)}")
        for i in range(len(self.value)):
            yield self.child(i)

    # -- scalars
    def string(self) -> str:
        if not isinstance(self.value, str):
            raise self.fail(f"must be a string, got {_describe(self.value)}")
        return self.value

    def number(self, *, minimum: float | None = None, positive: bool = False, maximum: float | None = None) -> float:
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(f"must be a number, got {_describe(v)}")
        if isinstance(v, int) and v.bit_length() > 63:
            raise self.fail(f"must be a number in range, got {_big(v)}")
        if not math.isfinite(v):
            raise self.fail(f"must be finite, got {v}")
        if positive and v <= 0:
            raise self.fail(f"must be > 0, got {_num(v)}")
        if minimum is not None and v < minimum:
            raise self.fail(f"must be >= {_num(minimum)}, got {_num(v)}")
        if maximum is not None and v > maximum:
            raise self.fail(f"must be <= {_num(maximum)}, got {_num(v)} (see the accepted ranges in the README)")
        return float(v)

    def integer(self, *, minimum: int | None = None, maximum: int | None = None) -> int:
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(f"must be an integer, got {_describe(v)}")
        if isinstance(v, float):
            if not math.isfinite(v):
                raise self.fail(f"must be finite, got {v}")
            if not v.is_integer():
                raise self.fail(f"must be an integer, got {v}")
            v = int(v)
        if minimum is not None and v < minimum:
            raise self.fail(f"must be >= {minimum}, got {_big(v)}")
        if maximum is not None and v > maximum:
            raise self.fail(f"must be <= {_num(maximum)}, got {_big(v)} (see the accepted ranges in the README)")
        return v


def _big(v: int) -> str:
    """An integer for a message: its digits, or its size when it has very many."""
    return str(v) if v.bit_length() <= 64 else f"an integer of {v.bit_length()} bits"


def _num(v: float) -> str:
    if isinstance(v, int) and v.bit_length() > 64:
        return _big(v)
    if isinstance(v, int) and v >= 2**40 and v & (v - 1) == 0:
        return f"2^{v.bit_length() - 1}"
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e16 else repr(float(v))


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}" if len(value) <= 40 else "a string"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__


def _parse_problem(data: Any, source: str | None) -> Problem:
    root = _Node(data, "")
    if not isinstance(data, Mapping):
        raise ProblemError(f"the document must be an object (a mapping), got {_describe(data)}")
    if "version" not in data:
        raise ProblemError("is missing (this reader knows format versions 1 and 2)", path="version")
    version_node = root.child("version")
    if isinstance(version_node.value, bool) or version_node.value not in FORMAT_VERSIONS:
        raise version_node.fail(
            f"unknown format version {version_node.value!r}; this reader knows versions "
            + " and ".join(map(str, FORMAT_VERSIONS))
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
        ("nodes", "gpus_per_node", "gpu_memory_bytes", "intra_node_GBps", "inter_node_GBps"), ("topology",)
    )
    nodes = node.child("nodes").integer(minimum=1, maximum=MAX_NODES)
    gpus = node.child("gpus_per_node").integer(minimum=1, maximum=MAX_GPUS_PER_NODE)
    if nodes * gpus > MAX_DEVICES:
        raise node.fail(
            f"nodes * gpus_per_node = {nodes * gpus} devices is more than the {MAX_DEVICES} accepted "
            "(see the accepted ranges in the README)"
        )
    memory = node.child("gpu_memory_bytes").integer(minimum=1, maximum=MAX_BYTES)
    intra = node.child("intra_node_GBps").number(positive=True, minimum=MIN_GBPS, maximum=MAX_GBPS)
    inter = node.child("inter_node_GBps").number(positive=True, minimum=MIN_GBPS, maximum=MAX_GBPS)
    topology = _parse_topology(node.child("topology"), nodes * gpus) if "topology" in node.value else None
    return Cluster(nodes, gpus, memory, intra, inter, topology)


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
        raise node.fail(f"has {len(node.value)} layers, more than the {MAX_LAYERS} accepted (see the accepted ranges in the README)")
    layers = []
    totals = _Totals()
    configs: dict[str, Layout] = {}  # cost key -> its checked config
    # id of a costs dict -> (its table, its keys, their totals slots, their bytes): a dict several layers share
    # (a YAML alias, the cost model's table of equal blocks) is read once; the document keeps it alive and unchanged
    read: dict[int, tuple[Mapping[Layout, LayerCost], list[str], np.ndarray, np.ndarray]] = {}
    for i, lnode in enumerate(node.elements()):
        lnode.mapping(("costs",), ("name", "module", "out_bytes"))
        name = lnode.child("name").string() if "name" in lnode.value else f"layer{i}"
        module = lnode.child("module").string() if "module" in lnode.value else "layer"
        out_bytes = lnode.child("out_bytes").integer(minimum=0, maximum=MAX_BYTES) if "out_bytes" in lnode.value else 0
        costs_node = lnode.child("costs")
        shared = read.get(id(costs_node.value)) if type(costs_node.value) is dict else None
        if shared is not None:
            totals.add_table(shared[2], shared[3], shared[1], costs_node)
            layers.append(Layer(name, module, out_bytes, shared[0]))
            continue
        if type(costs_node.value) is not dict and not isinstance(costs_node.value, Mapping):
            raise costs_node.fail(
                f"must be an object keyed by config (dp<int>tp<int>[/variant]), got {_describe(costs_node.value)}"
            )
        costs: dict[Layout, LayerCost] = {}
        keys, slots = [], []
        for key, cnode in costs_node.items():
            layout = configs.get(key)
            if layout is None:  # each distinct key is checked once, where it first appears
                layout = configs[key] = _parse_config(key, cnode, cluster, version, variants)
            if layout in costs:
                raise cnode.fail("duplicate config")
            cost = costs[layout] = _parse_cost(cnode)
            keys.append(key)
            slots.append(totals.add(layout, cost, costs_node, key))
        if not costs:
            raise costs_node.fail(
                "no layout usable on this cluster: give at least one dp<int>tp<int> entry "
                f"with dp*tp in {{{cluster.describe_sizes()}}}"
            )
        table = MappingProxyType(costs)
        if type(costs_node.value) is dict:
            amounts = np.array([[c.weight_bytes for c in costs.values()], [c.act_bytes for c in costs.values()]], dtype=np.int64)
            read[id(costs_node.value)] = (table, keys, np.array(slots, dtype=np.int64), amounts)
        layers.append(Layer(name, module, out_bytes, table))
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
        raise cnode.fail(
            f"dp*tp={layout.devices} is not an allowed stage size on this cluster (allowed: {cluster.describe_sizes()})"
        )
    return layout


_PLAIN_COST = frozenset(("fwd_ms", "bwd_ms", "weight_bytes", "act_bytes"))
_SPLIT_COST = _PLAIN_COST | {"bwd_input_ms", "bwd_weight_ms"}
_NUMBER = (float, int)


def _parse_cost(cnode: _Node) -> LayerCost:
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
    return _parse_cost_checked(cnode)


def _parse_cost_checked(cnode: _Node) -> LayerCost:
    cnode.mapping(("fwd_ms", "bwd_ms", "weight_bytes", "act_bytes"), ("bwd_input_ms", "bwd_weight_ms"))
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
    return LayerCost(
        fwd_ms=fwd,
        bwd_ms=bwd,
        weight_bytes=cnode.child("weight_bytes").integer(minimum=0, maximum=MAX_BYTES),
        act_bytes=cnode.child("act_bytes").integer(minimum=0, maximum=MAX_BYTES),
        bwd_input_ms=split_b,
        bwd_weight_ms=split_w,
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
        f"2^53 accepted (see the accepted ranges in the README)"
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
