"""The plan data model: :class:`Stage`, :class:`Plan`, :class:`PlanError` and the plan loader.

A :class:`Plan` is a list of :class:`Stage` objects, each with one config
(dp, tp, variant) or one per segment (format v2). :meth:`Plan.from_dict` and
:func:`load_plan` read a plan or result document and raise
:class:`~partitioner.problem.ProblemError` with the field path when it is
malformed; :meth:`Plan.to_dict` writes the plan document back.
:class:`PlanError` is what :func:`partitioner.plan.evaluate` raises for a
plan that breaks one of the validity rules (:data:`RULES`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Mapping

from ..problem import Layout, Problem, ProblemError, read_document

if TYPE_CHECKING:
    from .evaluation import Evaluation

__all__ = ["RULES", "PlanError", "Stage", "Plan", "load_plan"]

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
    """Layers ``first_layer..last_layer`` (inclusive) on ``devices`` GPUs.

    ``dp``, ``tp``, ``variant`` (and format v3's ``cp``, ``ep``, ``etp``) give
    one config for the whole stage (v1, and the v2 shorthand); ``configs``, when given, holds one config per
    segment (format v2) and ``dp``/``tp``/``variant`` then repeat the first.
    ``device_ids`` may be None, meaning contiguous ids in stage order.
    """

    first_layer: int
    last_layer: int
    devices: int
    dp: int
    tp: int
    device_ids: tuple[int, ...] | None = None
    variant: str = ""
    configs: tuple[Layout, ...] | None = None
    cp: int = 1  # format v3: context parallel (the stage's devices are dp * tp * cp)
    ep: int = 1  # format v3: expert parallel, folded onto the same devices
    etp: int = 1  # format v3: expert tensor parallel

    def __post_init__(self) -> None:
        if self.configs is not None:
            object.__setattr__(self, "configs", tuple(self.configs))

    @classmethod
    def from_configs(
        cls, first_layer: int, last_layer: int, devices: int, configs, device_ids: tuple[int, ...] | None = None
    ) -> "Stage":
        """A stage with one config per segment; ``configs`` collapses to the shorthand when all are equal."""
        configs = tuple(configs)
        if not configs:
            raise ValueError("a stage needs at least one config")
        head = configs[0]
        uniform = all(c == head for c in configs)
        return cls(
            first_layer, last_layer, devices, head.dp, head.tp, device_ids, head.variant,
            None if uniform else configs, head.cp, head.ep, head.etp,
        )

    @property
    def layout(self) -> Layout:
        """The stage's config (the first segment's when segments differ)."""
        return Layout(self.dp, self.tp, self.variant, self.cp, self.ep, self.etp)

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.last_layer + 1)

    def segment_configs(self, problem: Problem) -> list[tuple[tuple[int, int], Layout]]:
        """``((first, last), config)`` for every segment of the stage in ``problem``.

        Raises
        ------
        PlanError
            Rule 5 when ``configs`` does not hold one config per segment.
        """
        segments = problem.segments(self.first_layer, self.last_layer)
        if self.configs is None:
            return [(seg, self.layout) for seg in segments]
        if len(self.configs) != len(segments):
            raise PlanError(
                5,
                f"has {len(self.configs)} configs for its {len(segments)} segment(s) "
                + ("(format version 1: one layout per stage)" if problem.version < 2 else "(one per run of same-module layers)"),
            )
        return list(zip(segments, self.configs))


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
        """The plan document. With an evaluation of a v2 problem every stage carries
        ``configs`` and ``reshard_ms`` (result format v2)."""
        stages = []
        ids = self.device_ids()
        v2 = evaluation is not None and evaluation.version >= 2
        for p, s in enumerate(self.stages):
            configs = evaluation.stages[p].configs if evaluation is not None else s.configs
            uniform = configs is None or all(c == configs[0] for c in configs)
            entry: dict[str, Any] = {"first_layer": s.first_layer, "last_layer": s.last_layer, "devices": s.devices}
            if uniform:
                entry.update(s.layout.config_doc())
            if configs is not None and (v2 or not uniform):
                entry["configs"] = [_config_doc(c) for c in configs]
            entry["device_ids"] = list(ids[p])
            if evaluation is not None:
                ev = evaluation.stages[p]
                entry.update(time_ms=ev.time_ms, fwd_ms=ev.fwd_ms, bwd_ms=ev.bwd_ms, memory_bytes=ev.memory_bytes)
                if v2:
                    entry["reshard_ms"] = ev.reshard_ms
            stages.append(entry)
        return {"stages": stages}

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None) -> "Plan":
        """Read a plan: ``{"stages": [...]}``, a result ``{"plan": {...}}`` (its ``plan`` first), or a bare stage list.

        Malformed documents raise :class:`~partitioner.problem.ProblemError` with the field path.
        """
        path = ""
        if isinstance(data, Mapping) and "plan" in data and ("stages" not in data or isinstance(data["plan"], Mapping)):
            # a result's plan; an ``estimate --json`` report also lists its own per-stage "stages" beside it
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
            configs = _configs_field(entry.get("configs"), f"{where}.configs", source)
            required = ("first_layer", "last_layer", "devices") + (("dp", "tp") if configs is None else ())
            values: dict[str, Any] = {}
            for key in required:
                if key not in entry:
                    raise ProblemError("is missing", path=f"{where}.{key}", source=source)
                values[key] = _int_field(entry[key], f"{where}.{key}", source)
            ids = entry.get("device_ids")
            if ids is not None:
                if not isinstance(ids, list):
                    raise ProblemError("must be a list of device ids", path=f"{where}.device_ids", source=source)
                ids = tuple(_int_field(v, f"{where}.device_ids[{j}]", source) for j, v in enumerate(ids))
            if configs is not None:
                stages.append(Stage.from_configs(values["first_layer"], values["last_layer"], values["devices"], configs, ids))
            else:
                variant = _variant_field(entry.get("variant", ""), f"{where}.variant", source)
                axes = _axes_fields(entry, where, source)
                stages.append(Stage(
                    values["first_layer"], values["last_layer"], values["devices"], values["dp"], values["tp"],
                    device_ids=ids, variant=variant,
                    cp=axes.get("cp", 1), ep=axes.get("ep", 1), etp=axes.get("etp", 1),
                ))
        return cls(tuple(stages))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _int_field(value: Any, path: str, source: str | None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ProblemError(f"must be an integer, got {value!r}", path=path, source=source)
    return value


def _config_doc(config: Layout) -> dict[str, Any]:
    return config.config_doc()


def _variant_field(value: Any, path: str, source: str | None) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise ProblemError(f"must be a string, got {value!r}", path=path, source=source)
    try:
        return Layout.parse(f"dp1tp1/{value}").variant
    except ValueError:
        raise ProblemError(f"not a variant name (lowercase letters, digits and _ . + -): {value!r}", path=path, source=source) from None


def _configs_field(value: Any, path: str, source: str | None) -> tuple[Layout, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ProblemError("must be a non-empty list of {dp, tp, variant}", path=path, source=source)
    out = []
    for j, item in enumerate(value):
        where = f"{path}[{j}]"
        if not isinstance(item, Mapping):
            raise ProblemError("must be an object {dp, tp, variant}", path=where, source=source)
        for key in ("dp", "tp"):
            if key not in item:
                raise ProblemError("is missing", path=f"{where}.{key}", source=source)
        out.append(
            Layout(
                _int_field(item["dp"], f"{where}.dp", source),
                _int_field(item["tp"], f"{where}.tp", source),
                _variant_field(item.get("variant", ""), f"{where}.variant", source),
                **_axes_fields(item, where, source),
            )
        )
    return tuple(out)


def _axes_fields(item: Mapping, where: str, source: str | None) -> dict[str, int]:
    """The format-v3 axes ``cp``, ``ep``, ``etp`` of a stage or config object (1 when absent)."""
    out = {}
    for axis in ("cp", "ep", "etp"):
        if axis in item:
            out[axis] = _int_field(item[axis], f"{where}.{axis}", source)
    return out


def load_plan(path: str) -> Plan:
    """Load a plan or a result file (JSON or YAML)."""
    return Plan.from_dict(read_document(path), source=str(path))
