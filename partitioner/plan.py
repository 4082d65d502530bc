"""Plans, their evaluation against the v1 contract, and the solver result.

A :class:`Plan` is a list of :class:`Stage` objects. :func:`evaluate` checks
the six validity rules of ``DESIGN.md`` in order and either raises
:class:`PlanError` naming the rule and the stage, or returns an
:class:`Evaluation` with every stage's forward/backward time (sends
included), memory and the objective. Every solver's value is recomputed
here, so this module is the single definition of what a plan costs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from .problem import Layout, Problem, ProblemError, read_document
from .topology import bandwidth, default_bandwidth, transfer_ms
from .units import format_bytes

__all__ = [
    "STATUSES",
    "RULES",
    "PlanError",
    "Stage",
    "Plan",
    "StageEvaluation",
    "Evaluation",
    "SolveResult",
    "evaluate",
    "load_plan",
]

STATUSES = ("optimal", "feasible", "infeasible", "error")
RULES = {
    1: "cover",
    2: "devices",
    3: "mesh shape",
    4: "placement",
    5: "layout",
    6: "memory",
}


class PlanError(ValueError):
    """A plan that breaks validity rule ``rule`` (1-6 of DESIGN.md), at ``stage`` if known."""

    def __init__(self, rule: int, reason: str, stage: int | None = None):
        self.rule = rule
        self.stage = stage
        self.reason = reason
        where = f"stage {stage}: " if stage is not None else ""
        super().__init__(f"rule {rule} ({RULES[rule]}): {where}{reason}")


# --------------------------------------------------------------------------- plan data


@dataclass(frozen=True)
class Stage:
    """Layers ``first_layer..last_layer`` (inclusive) on ``devices`` GPUs in layout (dp, tp).

    ``device_ids`` may be None, meaning contiguous ids in stage order.
    """

    first_layer: int
    last_layer: int
    devices: int
    dp: int
    tp: int
    device_ids: tuple[int, ...] | None = None

    @property
    def layout(self) -> Layout:
        return Layout(self.dp, self.tp)

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.last_layer + 1)

    def layout_for(self, layer: int) -> Layout:
        """The layout ``layer`` runs in. v1: one layout per stage; v2 will map modules to layouts."""
        return self.layout


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def has_device_ids(self) -> bool:
        return all(s.device_ids is not None for s in self.stages)

    def device_ids(self) -> list[tuple[int, ...]]:
        """Each stage's devices: as given, or contiguous in stage order when none are given."""
        if self.has_device_ids:
            return [tuple(s.device_ids) for s in self.stages]  # type: ignore[arg-type]
        out, start = [], 0
        for s in self.stages:
            out.append(tuple(range(start, start + s.devices)))
            start += s.devices
        return out

    def with_device_ids(self) -> "Plan":
        """The same plan with explicit ``device_ids`` on every stage."""
        return Plan(tuple(replace(s, device_ids=ids) for s, ids in zip(self.stages, self.device_ids())))

    def layers_per_stage(self) -> list[int]:
        return [s.last_layer - s.first_layer + 1 for s in self.stages]

    def to_dict(self, evaluation: "Evaluation | None" = None) -> dict[str, Any]:
        stages = []
        ids = self.device_ids()
        for p, s in enumerate(self.stages):
            entry: dict[str, Any] = {
                "first_layer": s.first_layer,
                "last_layer": s.last_layer,
                "devices": s.devices,
                "dp": s.dp,
                "tp": s.tp,
                "device_ids": list(ids[p]),
            }
            if evaluation is not None:
                ev = evaluation.stages[p]
                entry.update(time_ms=ev.time_ms, fwd_ms=ev.fwd_ms, bwd_ms=ev.bwd_ms, memory_bytes=ev.memory_bytes)
            stages.append(entry)
        return {"stages": stages}

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None) -> "Plan":
        """Read a plan: ``{"stages": [...]}``, a result ``{"plan": {...}}``, or a bare stage list.

        Malformed documents raise :class:`~partitioner.problem.ProblemError` with the field path.
        """
        path = ""
        if isinstance(data, Mapping) and "plan" in data and "stages" not in data:
            data, path = data["plan"], "plan"
            if data is None:
                raise ProblemError("is null: this result has no plan (was it infeasible?)", path=path, source=source)
        if isinstance(data, Mapping):
            if "stages" not in data:
                raise ProblemError("is missing", path=_join(path, "stages"), source=source)
            data, path = data["stages"], _join(path, "stages")
        if not isinstance(data, list) or not data:
            raise ProblemError("must be a non-empty list of stages", path=path or "stages", source=source)
        stages = []
        for i, entry in enumerate(data):
            where = f"{path or 'stages'}[{i}]"
            if not isinstance(entry, Mapping):
                raise ProblemError("must be an object", path=where, source=source)
            values = {}
            for key in ("first_layer", "last_layer", "devices", "dp", "tp"):
                if key not in entry:
                    raise ProblemError("is missing", path=f"{where}.{key}", source=source)
                values[key] = _int_field(entry[key], f"{where}.{key}", source)
            ids = entry.get("device_ids")
            if ids is not None:
                if not isinstance(ids, list):
                    raise ProblemError("must be a list of device ids", path=f"{where}.device_ids", source=source)
                ids = tuple(_int_field(v, f"{where}.device_ids[{j}]", source) for j, v in enumerate(ids))
            stages.append(Stage(device_ids=ids, **values))
        return cls(tuple(stages))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _int_field(value: Any, path: str, source: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ProblemError(f"must be an integer, got {value!r}", path=path, source=source)
    return value


def load_plan(path: str) -> Plan:
    """Load a plan or a result file (JSON or YAML)."""
    return Plan.from_dict(read_document(path), source=str(path))


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class StageEvaluation:
    index: int
    first_layer: int
    last_layer: int
    devices: int
    layout: Layout
    device_ids: tuple[int, ...]
    nodes: tuple[int, ...]
    compute_fwd_ms: float
    compute_bwd_ms: float
    send_fwd_ms: float  # x_p: activations to the next stage (0 on the last)
    send_bwd_ms: float  # x_{p-1}: gradients to the previous stage (0 on the first)
    weight_bytes: int
    act_bytes: int
    stash: int  # min(m, P - p) microbatches of activations held by 1F1B

    @property
    def fwd_ms(self) -> float:
        return self.compute_fwd_ms + self.send_fwd_ms

    @property
    def bwd_ms(self) -> float:
        return self.compute_bwd_ms + self.send_bwd_ms

    @property
    def time_ms(self) -> float:
        return self.fwd_ms + self.bwd_ms

    @property
    def memory_bytes(self) -> int:
        return self.weight_bytes + self.stash * self.act_bytes


@dataclass(frozen=True)
class Evaluation:
    stages: tuple[StageEvaluation, ...]
    transfers_ms: tuple[float, ...]  # x_0 .. x_{P-2}
    microbatches: int
    objective: str

    @property
    def times_ms(self) -> list[float]:
        return [s.time_ms for s in self.stages]

    @property
    def bottleneck_ms(self) -> float:
        return max(self.times_ms)

    @property
    def bottleneck_stage(self) -> int:
        times = self.times_ms
        return times.index(max(times))

    @property
    def iteration_ms(self) -> float:
        """Alpa's 1F1B estimate: sum of stage times plus (m - 1) bottlenecks."""
        return sum(self.times_ms) + (self.microbatches - 1) * self.bottleneck_ms

    @property
    def value(self) -> float:
        return objective_value(self.objective, self.times_ms, self.microbatches)

    @property
    def peak_memory_bytes(self) -> list[int]:
        return [s.memory_bytes for s in self.stages]


def objective_value(objective: str, times: Sequence[float], microbatches: int) -> float:
    """``bottleneck`` = max t_p; ``iteration`` = sum t_p + (m - 1) max t_p."""
    if objective == "bottleneck":
        return max(times)
    if objective == "iteration":
        return sum(times) + (microbatches - 1) * max(times)
    raise ValueError(f"unknown objective {objective!r}")


def evaluate(problem: Problem, plan: Plan, objective: str | None = None) -> Evaluation:
    """Check ``plan`` against validity rules 1-6 and compute its times and memory.

    Parameters
    ----------
    problem : Problem
    plan : Plan
        Stages with or without ``device_ids`` (without: contiguous ids in stage order).
    objective : {"bottleneck", "iteration"}, optional
        Defaults to the problem's objective.

    Returns
    -------
    Evaluation

    Raises
    ------
    PlanError
        The first rule the plan breaks, with the stage and the numbers.
    """
    objective = objective or problem.objective
    if objective not in ("bottleneck", "iteration"):
        raise ValueError(f"unknown objective {objective!r}")
    cluster = problem.cluster
    stages = plan.stages
    P, L, N, G = len(stages), problem.num_layers, cluster.num_devices, cluster.gpus_per_node
    m = problem.microbatches

    # rule 1: contiguous cover, stage count within bounds
    if P == 0:
        raise PlanError(1, "the plan has no stages")
    expected = 0
    for p, s in enumerate(stages):
        if s.first_layer != expected:
            raise PlanError(1, f"starts at layer {s.first_layer}, expected {expected}", p)
        if s.last_layer < s.first_layer:
            raise PlanError(1, f"last_layer {s.last_layer} < first_layer {s.first_layer}", p)
        if s.last_layer >= L:
            raise PlanError(1, f"last_layer {s.last_layer} is past the last layer {L - 1}", p)
        expected = s.last_layer + 1
    if expected != L:
        raise PlanError(1, f"the stages end at layer {expected - 1}, not at the last layer {L - 1}")
    if not problem.stages.min <= P <= problem.stages.max:
        raise PlanError(1, f"{P} stages, outside the allowed {problem.stages.min}..{problem.stages.max}")

    # rule 2: every device used
    total = sum(s.devices for s in stages)
    if total != N:
        raise PlanError(2, f"the stages use {total} devices, the cluster has {N}")

    # rule 3: mesh shape
    allowed = cluster.allowed_sizes()
    for p, s in enumerate(stages):
        if s.devices not in allowed:
            raise PlanError(3, f"{s.devices} devices is not an allowed size ({', '.join(map(str, allowed))})", p)

    # rule 4: placement
    if any(s.device_ids is not None for s in stages) and not plan.has_device_ids:
        raise PlanError(4, "either every stage names its device_ids or none does")
    ids = plan.device_ids()
    seen: dict[int, int] = {}
    for p, (s, dev) in enumerate(zip(stages, ids)):
        if len(dev) != s.devices:
            raise PlanError(4, f"names {len(dev)} device ids for {s.devices} devices", p)
        for d in dev:
            if not 0 <= d < N:
                raise PlanError(4, f"device id {d} is outside 0..{N - 1}", p)
            if d in seen:
                raise PlanError(4, f"device {d} is also used by stage {seen[d]}" if seen[d] != p else f"device {d} is listed twice", p)
            seen[d] = p
        nodes = sorted({cluster.node_of(d) for d in dev})
        if s.devices <= G:
            if len(nodes) != 1:
                raise PlanError(4, f"{s.devices} devices must lie inside one node, but span nodes {nodes}", p)
        elif set(dev) != {d for n in nodes for d in range(n * G, (n + 1) * G)}:
            raise PlanError(4, f"a {s.devices}-device stage must take whole nodes, got devices {sorted(dev)}", p)
    # (ids are disjoint, in range and sum to N, so they cover 0..N-1)

    # rule 5: layout
    for p, s in enumerate(stages):
        if s.dp < 1 or s.tp < 1 or s.dp * s.tp != s.devices:
            raise PlanError(5, f"dp*tp = {s.dp}*{s.tp} must equal its {s.devices} devices", p)
        if s.tp > G:
            raise PlanError(5, f"tp={s.tp} exceeds gpus_per_node={G}", p)
        for i in s.layers:
            lay = s.layout_for(i)
            if problem.layers[i].cost(lay) is None:
                raise PlanError(5, f"layer {i} ({problem.layers[i].name}) has no cost entry {lay.key}", p)

    # times and memory
    transfers = []
    for p in range(P - 1):
        nbytes = problem.layers[stages[p].last_layer].out_bytes
        transfers.append(transfer_ms(nbytes, _boundary_bandwidth(problem, ids[p], ids[p + 1])) if nbytes else 0.0)
    evals = []
    for p, s in enumerate(stages):
        fwd = bwd = 0.0
        weight = act = 0
        for i in s.layers:
            c = problem.layers[i].cost(s.layout_for(i))
            fwd += c.fwd_ms
            bwd += c.bwd_ms
            weight += c.weight_bytes
            act += c.act_bytes
        evals.append(
            StageEvaluation(
                index=p,
                first_layer=s.first_layer,
                last_layer=s.last_layer,
                devices=s.devices,
                layout=s.layout,
                device_ids=tuple(ids[p]),
                nodes=tuple(sorted({cluster.node_of(d) for d in ids[p]})),
                compute_fwd_ms=fwd,
                compute_bwd_ms=bwd,
                send_fwd_ms=transfers[p] if p < P - 1 else 0.0,
                send_bwd_ms=transfers[p - 1] if p > 0 else 0.0,
                weight_bytes=weight,
                act_bytes=act,
                stash=min(m, P - p),
            )
        )

    # rule 6: memory, 1F1B stash included
    capacity = cluster.gpu_memory_bytes
    for e in evals:
        if e.memory_bytes > capacity:
            raise PlanError(
                6,
                f"needs {format_bytes(e.memory_bytes)} (weights {format_bytes(e.weight_bytes)} + {e.stash} x activations "
                f"{format_bytes(e.act_bytes)}) > {format_bytes(capacity)} per GPU",
                e.index,
            )
    return Evaluation(tuple(evals), tuple(transfers), m, objective)


def _boundary_bandwidth(problem: Problem, a: Sequence[int], b: Sequence[int]) -> float:
    cluster = problem.cluster
    if cluster.topology is not None:
        return bandwidth(cluster, a, b)
    na = {cluster.node_of(d) for d in a}
    nb = {cluster.node_of(d) for d in b}
    same_node = len(na) == 1 and na == nb
    return default_bandwidth(cluster, len(a), len(b), same_node)




# --------------------------------------------------------------------------- solver result


@dataclass(frozen=True)
class SolveResult:
    """What a solver returns: one object with status, value, bound and message.

    ``value`` is always recomputed by :func:`evaluate`; ``bound`` is a proven
    lower bound on the optimum (or None); ``gap = (value - bound) / value``.
    """

    status: str
    method: str
    objective: str
    value: float | None = None
    bound: float | None = None
    solve_seconds: float = 0.0
    message: str = ""
    plan: Plan | None = None
    evaluation: Evaluation | None = field(default=None, compare=False, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def gap(self) -> float | None:
        if self.value is None or self.bound is None:
            return None
        if self.value == 0:
            return 0.0
        return max(0.0, (self.value - self.bound) / abs(self.value))

    @property
    def ok(self) -> bool:
        return self.status in ("optimal", "feasible")

    def to_dict(self) -> dict[str, Any]:
        """Result format v1 (DESIGN.md), plus ``gap`` and any ``extra`` sections."""
        doc: dict[str, Any] = {
            "status": self.status,
            "method": self.method,
            "objective": self.objective,
            "value": _finite_or_none(self.value),
            "bound": _finite_or_none(self.bound),
            "gap": self.gap,
            "solve_seconds": self.solve_seconds,
            "message": self.message,
            "plan": self.plan.to_dict(self.evaluation) if self.plan is not None else None,
        }
        for key, value in self.extra.items():
            doc.setdefault(key, value)
        return doc

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None) -> "SolveResult":
        if not isinstance(data, Mapping):
            raise ProblemError("a result must be an object", source=source)
        for key in ("status", "method", "objective"):
            if key not in data:
                raise ProblemError("is missing", path=key, source=source)
        if data["status"] not in STATUSES:
            raise ProblemError(f"must be one of {', '.join(STATUSES)}", path="status", source=source)
        plan = Plan.from_dict(data, source=source) if data.get("plan") is not None else None
        known = {"status", "method", "objective", "value", "bound", "gap", "solve_seconds", "message", "plan"}
        return cls(
            status=data["status"],
            method=str(data["method"]),
            objective=str(data["objective"]),
            value=data.get("value"),
            bound=data.get("bound"),
            solve_seconds=float(data.get("solve_seconds") or 0.0),
            message=str(data.get("message") or ""),
            plan=plan,
            extra={k: v for k, v in data.items() if k not in known},
        )


def _finite_or_none(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return value
