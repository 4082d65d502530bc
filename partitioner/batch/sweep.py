"""The sweep file: what to solve, with which methods and settings, and its expansion into jobs.

A *sweep* (YAML or JSON) names the problems -- problem files and/or a grid
over the cost model's presets -- and the methods to run on each::

More (the detail of this module): ``docs/internals/batch.md``, section ``partitioner.batch.sweep``.
"""
from __future__ import annotations

import glob
import hashlib
import importlib
import itertools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..problem import OBJECTIVES, Problem, ProblemError, load_problem, read_document
from ..solvers import SolverError, method_spec
from ..solvers import methods as registered_methods
from ..solvers.options import options_record
from .errors import SweepError
from .jobs import Job, canonical_json, job_key, make_jobs
from .records import failure_record, local_info

__all__ = ["GRID_KEYS", "GridPoint", "Sweep", "Expansion", "load_sweep", "expand"]

GRID_KEYS = ("model", "cluster", "nodes", "global_batch", "microbatches")
_SWEEP_FIELDS = ("problems", "grid", "methods", "objective", "time_limit", "seed", "options", "imports", "name")
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class GridPoint:
    """One configuration of the preset grid; built into a problem by the cost model."""

    model: str
    cluster: str
    nodes: int
    global_batch: int
    microbatches: int
    options: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"{self.model}/{self.cluster}/n{self.nodes}/gb{self.global_batch}/m{self.microbatches}"

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {k: getattr(self, k) for k in GRID_KEYS}
        if self.options:
            doc["options"] = dict(self.options)
        return doc


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: problem files, grid points, methods and solve settings."""

    problems: tuple[str, ...] = ()
    grid: tuple[GridPoint, ...] = ()
    methods: tuple[str, ...] = ()
    objective: str | None = None
    time_limit: float | None = None
    seed: int = 0
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    imports: tuple[str, ...] = ()
    name: str = "sweep"
    base_dir: Path = field(default_factory=Path)
    source: str | None = None

    @classmethod
    def from_dict(cls, data: Any, *, base_dir: str | Path = ".", source: str | None = None) -> "Sweep":
        """Validate a sweep document; errors name ``source`` and the field path."""
        try:
            return _parse_sweep(data, Path(base_dir), source)
        except SweepError:
            raise
        except ProblemError as err:
            raise SweepError(err.reason, path=err.path, source=err.source or source) from None

    def problem_path(self, entry: str) -> Path:
        path = Path(entry)
        return path if path.is_absolute() else self.base_dir / path


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file (YAML or JSON); problem paths are relative to it."""
    path = Path(path)
    data = read_document(path)
    return Sweep.from_dict(data, base_dir=path.parent, source=str(path))


def _fail(reason: str, path: str) -> SweepError:
    return SweepError(reason, path=path)


def _string_list(value: Any, path: str, *, allow_scalar: bool = False) -> list[str]:
    if allow_scalar and isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(f"must be a list of non-empty strings, got {value!r}", path)
    return value


def _parse_sweep(data: Any, base_dir: Path, source: str | None) -> Sweep:
    if not isinstance(data, Mapping):
        raise SweepError("a sweep must be an object (a mapping)", source=source)
    unknown = [k for k in data if k not in _SWEEP_FIELDS]
    if unknown:
        raise SweepError(f"unknown field {unknown[0]!r} (allowed: {', '.join(_SWEEP_FIELDS)})", source=source)
    try:
        imports = tuple(_string_list(data.get("imports", []), "imports"))
        for i, module in enumerate(imports):
            try:
                importlib.import_module(module)
            except Exception as err:  # any failure to import is the user's module
                raise _fail(f"cannot import {module!r}: {type(err).__name__}: {err}", f"imports[{i}]") from None

        if "methods" not in data:
            raise _fail("is missing", "methods")
        method_list = _string_list(data["methods"], "methods", allow_scalar=True)
        if not method_list:
            raise _fail("must name at least one method", "methods")
        known = registered_methods()
        for i, m in enumerate(method_list):
            if m not in known:
                raise _fail(f"unknown method {m!r}; choose from {', '.join(known)}", f"methods[{i}]")
        if len(set(method_list)) != len(method_list):
            raise _fail("lists a method twice", "methods")

        objective = data.get("objective")
        if objective is not None and objective not in OBJECTIVES:
            raise _fail(f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}", "objective")

        time_limit = data.get("time_limit")
        if time_limit is not None:
            if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
                raise _fail(f"must be a number of seconds > 0, got {time_limit!r}", "time_limit")
            if not math.isfinite(time_limit):
                raise _fail("must be finite", "time_limit")
            time_limit = float(time_limit)

        seed = data.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**31:
            raise _fail(f"must be an integer in 0..2^31-1 (as solve takes it), got {seed!r}", "seed")

        options = _parse_options(data.get("options", {}), method_list)

        problems: list[str] = []
        for i, entry in enumerate(_string_list(data.get("problems", []), "problems")):
            if _GLOB_CHARS & set(entry):
                pattern = entry if Path(entry).is_absolute() else str(base_dir / entry)
                matches = sorted(glob.glob(pattern))
                if not matches:
                    raise _fail(f"pattern {entry!r} matches no file", f"problems[{i}]")
                problems.extend(_relative(m, base_dir, entry) for m in matches)
            else:
                problems.append(entry)

        grid = _parse_grid(data["grid"]) if "grid" in data else ()
        if not problems and not grid:
            raise SweepError("lists no problems: give `problems:` (files) and/or `grid:` (presets)")
        name = data.get("name", Path(source).stem if source else "sweep")
        if not isinstance(name, str):
            raise _fail("must be a string", "name")
    except SweepError as err:
        raise SweepError(err.reason, path=err.path, source=source) from None
    return Sweep(
        problems=tuple(problems),
        grid=grid,
        methods=tuple(method_list),
        objective=objective,
        time_limit=time_limit,
        seed=seed,
        options=options,
        imports=imports,
        name=name,
        base_dir=base_dir,
        source=source,
    )


def _relative(match: str, base_dir: Path, pattern: str) -> str:
    """A glob match written the way the pattern was: relative to the sweep file if the pattern was."""
    if Path(pattern).is_absolute():
        return match
    return os.path.relpath(match, base_dir)


def _parse_options(value: Any, method_list: Sequence[str]) -> dict[str, dict[str, Any]]:
    if not isinstance(value, Mapping):
        raise _fail("must map a method name to its options", "options")
    parsed: dict[str, dict[str, Any]] = {}
    for method, opts in value.items():
        where = f"options.{method}"
        if method not in method_list:
            raise _fail(f"{method!r} is not one of the sweep's methods ({', '.join(method_list)})", where)
        if not isinstance(opts, Mapping):
            raise _fail("must be an object of option: value", where)
        try:  # the method's own record checks names and values (solvers.options); the jobs get the mapping
            options_record(method_spec(method).options, method, opts)
        except SolverError as err:
            raise _fail(err.reason, f"{where}.{err.path.removeprefix('options.')}") from None
        parsed[method] = dict(opts)
    return parsed


def _parse_grid(value: Any) -> tuple[GridPoint, ...]:
    blocks = value if isinstance(value, list) else [value]
    points: list[GridPoint] = []
    for b, block in enumerate(blocks):
        where = f"grid[{b}]" if isinstance(value, list) else "grid"
        if not isinstance(block, Mapping):
            raise _fail("must be an object with model, cluster, nodes, global_batch, microbatches", where)
        unknown = [k for k in block if k not in GRID_KEYS + ("options",)]
        if unknown:
            raise _fail(f"unknown field {unknown[0]!r} (allowed: {', '.join(GRID_KEYS + ('options',))})", where)
        axes = []
        for key in GRID_KEYS:
            if key not in block:
                raise _fail("is missing", f"{where}.{key}")
            values = block[key] if isinstance(block[key], list) else [block[key]]
            if not values:
                raise _fail("must not be empty", f"{where}.{key}")
            for i, v in enumerate(values):
                if key in ("model", "cluster"):
                    if not isinstance(v, str) or not v:
                        raise _fail(f"must be a preset name, got {v!r}", f"{where}.{key}[{i}]")
                elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise _fail(f"must be a positive integer, got {v!r}", f"{where}.{key}[{i}]")
            axes.append(values)
        opts = block.get("options")
        if opts is not None and not isinstance(opts, Mapping):
            raise _fail("must be an object (cost model options)", f"{where}.options")
        for model, cluster, nodes, global_batch, microbatches in itertools.product(*axes):  # GRID_KEYS' order
            points.append(GridPoint(model, cluster, nodes, global_batch, microbatches, options=dict(opts) if opts else None))
    return tuple(points)


# --------------------------------------------------------------------------- expansion into jobs


@dataclass(frozen=True)
class Expansion:
    """A sweep's jobs, and the records of grid points the cost model could not build."""

    jobs: tuple[Job, ...]
    failed: tuple[dict[str, Any], ...] = ()
    duplicates: int = 0


def expand(sweep: Sweep) -> Expansion:
    """Load the problem files, build the grid points, and make one job per (problem, method).

    Raises
    ------
    SweepError
        A problem file that cannot be loaded (naming the sweep field and the
        file's own error), or a grid without the cost model.
    """
    jobs: list[Job] = []
    failed: list[dict[str, Any]] = []
    settings: dict[str, Any] = dict(objective=sweep.objective, time_limit=sweep.time_limit, seed=sweep.seed, options=sweep.options)
    for i, entry in enumerate(sweep.problems):
        try:
            problem = load_problem(sweep.problem_path(entry))
        except ProblemError as err:
            raise SweepError(str(err), path=f"problems[{i}]", source=sweep.source) from None
        jobs.extend(make_jobs(problem, entry, sweep.methods, **settings))
    if sweep.grid:
        build_problem = _grid_builder(sweep)
        for point in sweep.grid:
            objective = sweep.objective or "iteration"
            try:
                problem = build_problem(
                    _preset(sweep, point.model),
                    _preset(sweep, point.cluster),
                    nodes=point.nodes,
                    global_batch=point.global_batch,
                    microbatches=point.microbatches,
                    options=dict(point.options) if point.options else None,
                    objective=objective,
                )
            except (ProblemError, ValueError, KeyError) as err:
                failed.extend(_unbuilt_records(sweep, point, objective, err))
                continue
            jobs.extend(make_jobs(problem, point.name, sweep.methods, grid=point.to_dict(), **settings))
    unique: dict[str, Job] = {}
    for job in jobs:
        unique.setdefault(job.key, job)
    return Expansion(tuple(unique.values()), tuple(failed), len(jobs) - len(unique))


def _preset(sweep: Sweep, name: str) -> str:
    """A preset name as is; a model/cluster file relative to the sweep file, like problem files."""
    if name.lower().endswith((".yaml", ".yml", ".json")):
        return str(sweep.problem_path(name))
    return name


def _grid_builder(sweep: Sweep) -> Callable[..., Problem]:
    """The cost model's ``build_problem``, after checking every model and cluster name of the grid once.

    A misspelt preset is an error in the sweep (exit 2), not a column of failed jobs.
    """
    try:
        from .. import costs
    except ImportError as err:
        raise SweepError(
            f"a grid needs the cost model (partitioner.costs), which cannot be imported: {err}",
            path="grid",
            source=sweep.source,
        ) from None
    for field_name, loader_name in (("model", "load_model"), ("cluster", "load_cluster")):
        loader = getattr(costs, loader_name, None)
        if loader is None:
            continue
        for name in dict.fromkeys(getattr(point, field_name) for point in sweep.grid):
            try:
                loader(_preset(sweep, name))
            except ProblemError as err:
                raise SweepError(f"{field_name} {name!r}: {err}", path="grid", source=sweep.source) from None
    return costs.build_problem


def _unbuilt_records(sweep: Sweep, point: GridPoint, objective: str, err: Exception) -> list[dict[str, Any]]:
    """``error`` records for a grid point the cost model rejected (one per method, so resume skips them)."""
    digest = "grid:" + hashlib.sha256(canonical_json(point.to_dict())).hexdigest()
    records = []
    for method in sweep.methods:
        opts = dict(sweep.options.get(method, {}))
        job = Job(job_key(digest, method, objective, sweep.time_limit, sweep.seed, opts), point.name, digest,
                  method, objective, sweep.time_limit, sweep.seed, opts, {}, point.to_dict())
        message = f"the cost model could not build this grid point: {type(err).__name__}: {err}"
        records.append(failure_record(job, opts, "error", message, 0.0, local_info()))
    return records
