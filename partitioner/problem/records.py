"""The problem data model: the frozen dataclasses a solver reads, the format's constants, :class:`ProblemError`.

:class:`Problem` holds a validated problem; :meth:`Problem.from_dict` reads
one with the validating parser (:mod:`partitioner.problem.parse`) and
:meth:`Problem.to_dict` writes its document back. Nothing here reads or
writes files (:mod:`partitioner.problem.files`) or knows about solvers,
plans or the CLI.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from types import MappingProxyType
from typing import Any, Callable, Literal, Mapping, get_args

from ..core.documents import check_document
from ..core.errors import ProblemError
from .workload import ModelWorkload

__all__ = [
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "OBJECTIVES",
    "SCHEDULES",
    "Objective",
    "Schedule",
    "ProblemError",
    "Layout",
    "expert_tensor_parallel",
    "Config",
    "LayerCost",
    "Layer",
    "Level",
    "level_doc",
    "Topology",
    "Cluster",
    "Training",
    "StageBounds",
    "Problem",
]

FORMAT_VERSION = 1  # the version a document without v2 features is written as
FORMAT_VERSIONS = (1, 2, 3)
Objective = Literal["bottleneck", "iteration"]  # what a solver minimises (DESIGN.md, "Objectives")
Schedule = Literal["1f1b", "zb-h1", "interleaved", "gpipe"]  # a problem's pipeline schedule (training.schedule)
OBJECTIVES: tuple[Objective, ...] = get_args(Objective)
SCHEDULES: tuple[Schedule, ...] = get_args(Schedule)
_VARIANT = r"[a-z0-9][a-z0-9_.+-]*"
_LAYOUT_KEY = re.compile(r"^((?:(?:etp|dp|tp|cp|ep)[0-9]+)+)(?:/(" + _VARIANT + r"))?$")
_AXIS = re.compile(r"(etp|dp|tp|cp|ep)([0-9]+)")
_AXES = ("dp", "tp", "cp", "ep", "etp")  # the canonical order of a key's axes
_VARIANT_NAME = re.compile(r"^" + _VARIANT + r"$")

# The validating parser (:func:`.parse._parse_problem`), which builds these records and so imports this
# module: it registers itself here on import (:func:`register_parser`), so that the import graph stays
# one way (parse -> records) and :meth:`Problem.from_dict` can still run it.
_PARSER: "Callable[[Any, str | None], Problem] | None" = None


def register_parser(parser: "Callable[[Any, str | None], Problem]") -> None:
    """Make ``parser`` the function :meth:`Problem.from_dict` runs (called once by :mod:`.parse`)."""
    global _PARSER
    _PARSER = parser


# --------------------------------------------------------------------------- data


def expert_tensor_parallel(tp: int, ep: int, etp: int) -> int:
    """The ranks each routed expert's matrices are split over under a config's ``(tp, ep, etp)``.

    A config without an expert split (ep = etp = 1, the key ``dp{D}tp{T}``)
    holds each expert sharded over its tp ranks, as the rest of the MLP:
    the cost model's ep = 1 entries charge a MoE layer's routed weights /
    tp (:func:`partitioner.costs.entry.layer_terms`), which is
    Megatron-Core's default expert tensor-parallel size (ETP = TP when
    ``--expert-tensor-parallel-size`` is not given [MCoreETP]_). With an
    expert split (ep > 1, or an explicit etp) each of the ep ranks' experts
    is split over etp ranks (:func:`partitioner.costs.axes.wiring.moe_ep_cost`
    charges routed / (ep etp)). Exporters write this size, never the key's
    bare etp.

    References
    ----------
    .. [MCoreETP] Megatron-Core 0.16.1 ``megatron/core/model_parallel_config.py``
       (``ModelParallelConfig.__post_init__``) and ``megatron/core/parallel_state.py``
       (``initialize_model_parallel``): ``expert_tensor_parallel_size`` None
       means the tensor-parallel size.
    """
    return tp if ep == 1 and etp == 1 else etp


@dataclass(frozen=True, order=True)
class Layout:
    """A config of one stage segment (formats v1-v3).

    ``dp`` x ``tp`` x ``cp`` devices (data, tensor and context parallel, format
    v3 adds ``cp``), the expert-parallel split ``ep`` x ``etp`` of a MoE layer
    folded onto those devices (``ep * etp`` divides the devices; it adds
    none), and a memory-knob ``variant`` (format v2; ``""`` is the plain
    key). The variant, ep and etp are opaque to the solvers: the cost entry's
    numbers say what they cost. Two configs with the same :attr:`mesh` need
    no reshard between them (DESIGN.md, "Problem format v3").
    """

    dp: int
    tp: int
    variant: str = ""
    cp: int = 1
    ep: int = 1
    etp: int = 1

    @property
    def devices(self) -> int:
        """``dp * tp * cp``: ep and etp fold onto the same devices."""
        return self.dp * self.tp * self.cp

    @property
    def mesh(self) -> tuple[int, ...]:
        """What the activation's layout depends on (not the variant, ep or etp): ``(dp, tp)``, and
        ``(dp, tp, cp)`` when cp > 1 (so v1/v2 meshes keep their v2 value)."""
        return (self.dp, self.tp) if self.cp == 1 else (self.dp, self.tp, self.cp)

    @classmethod
    def of_mesh(cls, mesh: tuple[int, ...]) -> "Layout":
        """The plain config of a :attr:`mesh` ``(dp, tp[, cp])``."""
        return cls(mesh[0], mesh[1], "", mesh[2] if len(mesh) > 2 else 1)

    @property
    def expert_tp(self) -> int:
        """How many ranks split each routed expert's matrices: :func:`expert_tensor_parallel` of (tp, ep, etp)."""
        return expert_tensor_parallel(self.tp, self.ep, self.etp)

    @property
    def is_v3(self) -> bool:
        """True when the config uses an axis of format v3 (cp, ep or etp other than 1)."""
        return self.cp != 1 or self.ep != 1 or self.etp != 1

    @property
    def axes(self) -> str:
        """The canonical key without the variant: ``dp{D}tp{T}[cp{C}][ep{E}[etp{F}]]``; ``ep`` is written when
        ``etp`` is, so that every key it writes parses back to this config (etp without ep is bad input)."""
        base = f"dp{self.dp}tp{self.tp}"
        if self.cp != 1:
            base += f"cp{self.cp}"
        if self.ep != 1 or self.etp != 1:  # etp is written after its ep, even ep1 (``dp2tp2ep1etp2``)
            base += f"ep{self.ep}"
            if self.etp != 1:
                base += f"etp{self.etp}"
        return base

    @property
    def key(self) -> str:
        base = self.axes
        return f"{base}/{self.variant}" if self.variant else base

    def config_doc(self) -> dict[str, Any]:
        """The config object of a plan or result: dp, tp, and cp/ep/etp/variant when not the default."""
        doc: dict[str, Any] = {"dp": self.dp, "tp": self.tp}
        for axis in ("cp", "ep", "etp"):
            if getattr(self, axis) != 1:
                doc[axis] = getattr(self, axis)
        if self.variant:
            doc["variant"] = self.variant
        return doc

    @classmethod
    def parse(cls, key: str) -> "Layout":
        """The config a cost key names, in any spelling (format v3's canonicalisation).

        Raises
        ------
        ValueError
            A key that is not ``dp{D}tp{T}[cp{C}][ep{E}[etp{F}]][/variant]`` in
            some order of its axes, names an axis twice, gives ``etp`` without
            ``ep``, an axis below 1, or ``ep * etp`` not dividing ``dp * tp * cp``.
        """
        match = _LAYOUT_KEY.match(key) if isinstance(key, str) else None
        if not match:
            raise ValueError(
                "cost key must look like dp<int>tp<int>[cp<int>][ep<int>[etp<int>]][/<variant>] "
                f"(variant: lowercase letters, digits and _ . + -; e.g. dp2tp4, dp8tp1/zero3, dp2tp2cp2ep4), got {key!r}"
            )
        axes: dict[str, int] = {}
        for name, digits in _AXIS.findall(match.group(1)):
            if name in axes:
                raise ValueError(f"cost key {key!r} names the axis {name} twice")
            if len(digits) > 6:
                raise ValueError(f"every axis of a cost key must be below 10^6, got {key[:40]!r}")
            value = int(digits)
            if value < 1:
                raise ValueError(
                    f"cost key {key!r}: {name} must be >= 1 (keys look like dp<int>tp<int>[cp<int>][ep<int>[etp<int>]]), "
                    f"got {value}"
                )
            axes[name] = value
        for name in ("dp", "tp"):
            if name not in axes:
                raise ValueError(f"cost key {key!r} must name {name} (dp and tp are always written)")
        if "etp" in axes and "ep" not in axes:
            raise ValueError(f"cost key {key!r} gives etp without ep (expert tensor parallelism splits the experts of ep)")
        layout = cls(axes["dp"], axes["tp"], match.group(2) or "", axes.get("cp", 1), axes.get("ep", 1), axes.get("etp", 1))
        if layout.devices % (layout.ep * layout.etp):
            raise ValueError(
                f"cost key {key!r}: ep*etp = {layout.ep * layout.etp} must divide dp*tp*cp = {layout.devices} "
                "(expert parallelism folds onto the config's devices)"
            )
        return layout

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
    tied_weight_bytes: int = 0  # format v3: the bytes of the copy shared with the layer's tied_to

    def split(self) -> tuple[float, float]:
        """``(B, W)``: the backward's input- and weight-gradient parts (even split if not given)."""
        if self.bwd_input_ms is None or self.bwd_weight_ms is None:
            return self.bwd_ms / 2, self.bwd_ms / 2
        return self.bwd_input_ms, self.bwd_weight_ms


@dataclass(frozen=True)
class Layer:
    """One layer in execution order, with a cost entry per layout it can run in.

    ``tied_to`` (format v3) is the index of an earlier layer whose weights this
    one shares (an LM head tied to the input embedding): on a stage holding
    both, this layer counts ``weight_bytes - tied_weight_bytes`` of its entry.
    """

    name: str
    module: str
    out_bytes: int
    costs: Mapping[Layout, LayerCost]
    tied_to: int | None = None

    def cost(self, layout: Layout) -> LayerCost | None:
        return self.costs.get(layout)


@dataclass(frozen=True)
class Topology:
    """A user-supplied cluster graph: undirected edges ``(u, v, GBps)``.

    GPUs are the integers ``0..N-1``; any other vertex (a switch, a NIC) is a
    string. The bandwidth between two device sets is the max-flow between
    them on this graph (see :mod:`partitioner.cluster.topology`).
    """

    edges: tuple[tuple[int | str, int | str, float], ...]


@dataclass(frozen=True)
class Level:
    """One tier of the network above the nodes (DESIGN.md "Network levels"), innermost first.

    ``nodes`` is the size of its groups of consecutive nodes (None on the outermost level: the whole
    cluster); ``GBps`` the per-GPU bandwidth of a transfer whose two sides first meet at this level,
    before the ``oversubscription`` of this and the inner levels divides it (:meth:`Cluster.level_rates`).
    """

    name: str
    nodes: int | None
    GBps: float
    oversubscription: float = 1.0


@dataclass(frozen=True)
class Cluster:
    """The cluster a problem plans on (DESIGN.md, format v1, and "Partial racks").

    ``stage_sizes`` (optional) lists the stage sizes allowed inside one node
    (each 1..``gpus_per_node``; ``gpus_per_node`` itself is always allowed), in
    place of rule 3's powers of two dividing the node: an NVL72 rack's 16, 18,
    32, 36. ``devices`` (optional) is the number of GPUs the job uses,
    ``(nodes - 1) * gpus_per_node < devices <= nodes * gpus_per_node``: the idle
    ones are the last ids of the last node. Absent, both read as formats v1-v3.
    """

    nodes: int
    gpus_per_node: int
    gpu_memory_bytes: int
    intra_node_GBps: float
    inter_node_GBps: float
    topology: Topology | None = None
    stage_sizes: tuple[int, ...] | None = None
    devices: int | None = None
    levels: tuple[Level, ...] | None = None

    def level_rates(self) -> tuple[float, ...]:
        """Per level, the per-GPU GB/s a transfer climbing to it gets there: ``GBps / Π oversubscription``
        over that level and the inner ones (empty without levels)."""
        rates, taper = [], 1.0
        for level in self.levels or ():
            taper *= level.oversubscription
            rates.append(level.GBps / taper)
        return tuple(rates)

    def group_of(self, node: int, level: int) -> int:
        """The group of ``levels[level]`` that ``node`` sits in (0 on an outermost level without ``nodes``)."""
        assert self.levels is not None
        size = self.levels[level].nodes
        return 0 if size is None else node // size

    @property
    def num_devices(self) -> int:
        """The devices a plan uses (rule 2): ``devices`` when given, else every GPU of the cluster."""
        return self.nodes * self.gpus_per_node if self.devices is None else self.devices

    @property
    def physical_devices(self) -> int:
        """``nodes * gpus_per_node``: every GPU, idle ones included."""
        return self.nodes * self.gpus_per_node

    @property
    def partial(self) -> bool:
        """True when the cluster uses the partial-rack fields (``stage_sizes`` or ``devices``)."""
        return self.stage_sizes is not None or self.devices is not None

    @property
    def last_node_gpus(self) -> int:
        """The GPUs the job uses on the last node (``gpus_per_node`` unless ``devices`` leaves some idle)."""
        return self.num_devices - (self.nodes - 1) * self.gpus_per_node

    @property
    def full_nodes(self) -> int:
        """The nodes whose every GPU the job uses: all of them, or all but the partly used last one."""
        return self.nodes if self.last_node_gpus == self.gpus_per_node else self.nodes - 1

    def node_capacities(self) -> tuple[int, ...]:
        """The GPUs the job uses on each node, in node order."""
        return (self.gpus_per_node,) * (self.nodes - 1) + (self.last_node_gpus,)

    def node_of(self, device: int) -> int:
        return device // self.gpus_per_node

    def allowed_sizes(self) -> tuple[int, ...]:
        """Stage sizes rule 3 allows: powers of two dividing ``gpus_per_node`` (or the ``stage_sizes``
        given), ``gpus_per_node`` itself, and ``k * gpus_per_node`` for ``k = 2..nodes``; with ``devices``,
        only sizes that fit the nodes used (in-node sizes up to the last node's GPUs when no node is whole,
        ``k`` up to the whole nodes)."""
        return _allowed_sizes(self.gpus_per_node, self.nodes, self.stage_sizes, self.num_devices)

    def allows_size(self, devices: int) -> bool:
        """``devices in allowed_sizes()``, without building the list."""
        g = self.gpus_per_node
        if devices < 1:
            return False
        if self.partial:
            if devices <= g:
                in_node = self.stage_sizes if self.stage_sizes is not None else ()
                ok = devices == g or devices in in_node or (
                    self.stage_sizes is None and g % devices == 0 and devices & (devices - 1) == 0
                )
                return ok and (self.full_nodes >= 1 or devices <= self.last_node_gpus)
            return devices % g == 0 and 2 <= devices // g <= self.full_nodes
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
def _allowed_sizes(g: int, nodes: int, stage_sizes: tuple[int, ...] | None = None, used: int | None = None) -> tuple[int, ...]:
    if stage_sizes is None:
        sizes = {1 << i for i in range(g.bit_length()) if g % (1 << i) == 0}
    else:
        sizes = set(stage_sizes)
    sizes.add(g)
    used = nodes * g if used is None else used
    last = used - (nodes - 1) * g
    full = nodes if last == g else nodes - 1
    if full == 0:  # one node, partly used: the in-node sizes that fit it
        sizes = {s for s in sizes if s <= last}
    sizes.update(k * g for k in range(2, full + 1))
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
    """A validated v1 problem. Build it with :meth:`from_dict` or :func:`~.files.load_problem`."""

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
        return tuple(sorted(found, key=lambda l: (l.devices, l.tp, l.cp, l.ep, l.etp, l.variant)))

    configs = layouts

    @cached_property
    def workload(self) -> ModelWorkload:
        """The model's workload and the hardware's peak as ``meta`` holds them (:class:`~.workload.ModelWorkload`)."""
        return ModelWorkload.of(self.meta)

    @cached_property
    def ties(self) -> tuple[tuple[int, int], ...]:
        """``(j, k)`` for every layer k tied to an earlier layer j (format v3), in order of k."""
        return tuple((layer.tied_to, k) for k, layer in enumerate(self.layers) if layer.tied_to is not None)

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
            of :mod:`partitioner.core.limits`.
        """
        if _PARSER is None:  # pragma: no cover - .parse registers itself when the package is imported
            raise RuntimeError("partitioner.problem.parse was not imported")
        try:
            if not _checked:
                check_document(data, source=source)
            return _PARSER(data, source)
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
        if c.stage_sizes is not None:
            cluster["stage_sizes"] = list(c.stage_sizes)
        if c.devices is not None:
            cluster["devices"] = c.devices
        if c.levels is not None:
            cluster["levels"] = [level_doc(level) for level in c.levels]
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
            "layers": [_layer_doc(layer) for layer in self.layers],
        }
        if self.variants:
            doc["variants"] = dict(self.variants)
        if self.meta:
            doc["meta"] = _plain(self.meta)
        return doc


def _layer_doc(layer: Layer) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": layer.name,
        "module": layer.module,
        "out_bytes": layer.out_bytes,
        "costs": {lay.key: _cost_doc(cost) for lay, cost in layer.costs.items()},
    }
    if layer.tied_to is not None:
        doc["tied_to"] = layer.tied_to
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
    if cost.tied_weight_bytes:
        doc["tied_weight_bytes"] = cost.tied_weight_bytes
    return doc


def _plain(value: Any) -> Any:
    """Mapping proxies and tuples back to dicts and lists (for JSON/YAML dumps)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def level_doc(level: Level) -> dict[str, Any]:
    """A level as its document: ``nodes`` only when given, ``oversubscription`` only when not 1."""
    out: dict[str, Any] = {"name": level.name}
    if level.nodes is not None:
        out["nodes"] = level.nodes
    out["GBps"] = level.GBps
    if level.oversubscription != 1:
        out["oversubscription"] = level.oversubscription
    return out
