"""Batch solve: sweeps over many problems x methods, resumable, on one machine or a Ray cluster.

A *sweep* (YAML or JSON) names the problems -- problem files and/or a grid
over the cost model's presets -- and the methods to run on each::

    problems: [examples/vla_toy_2x4.json, "generated/*.json"]   # relative to the sweep file
    grid:                                   # optional; needs partitioner.costs
      model: [openvla-7b, llava-1.5-7b]
      cluster: [dgx-h100]
      nodes: [1, 2]
      global_batch: [256]
      microbatches: [8, 16]
    methods: [cpsat, dp, greedy]
    objective: iteration                    # optional; default: each problem's own
    time_limit: 60                          # seconds per job, optional
    seed: 0                                 # optional
    options: {cpsat: {some_option: 1}}      # optional, per method
    imports: [my_methods]                   # optional: modules that register extra methods

Every (problem, method) pair is a :class:`Job` with a stable key: a hash of
the problem's content (the canonical JSON of ``Problem.to_dict()``), the
method, the objective, the time limit, the seed and the method options the
sweep gives. Each finished job is appended to a JSON-lines results file,
flushed and fsynced, by the parent process only. Running the same sweep
again resumes: keys already in the file are skipped, and a half-written last
line (the previous run was killed while writing it) is cut away first.

Jobs run in worker processes that can be killed one by one (``local``
backend: a pool of spawned processes; ``ray`` backend: one Ray actor per
worker). A job that raises is recorded as ``error`` with the message; a
worker that dies (segfault, ``os._exit``) is recorded as ``error`` and
replaced; a job still running ``time_limit + grace`` seconds after it
started is killed, recorded as ``timeout``, and its worker replaced. The
sweep always goes on.

Solver threads: with W workers on C cores each job may use ``max(1, C // W)``
threads; methods that declare a thread option (``num_workers`` for CP-SAT,
``threads`` for the MILP; :data:`THREAD_OPTIONS`) receive it unless the
sweep sets it, so the machine is not oversubscribed. That runtime option is
recorded in the result but is not part of the key, so a sweep may be
resumed with a different ``--workers``.
"""
from __future__ import annotations

import glob
import hashlib
import importlib
import itertools
import json
import math
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing.connection import wait as wait_objects
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from .problem import OBJECTIVES, Problem, ProblemError, load_problem, read_document
from .solvers import methods as registered_methods
from .solvers.base import method_options

__all__ = [
    "BACKENDS",
    "FAILED",
    "GRID_KEYS",
    "THREAD_OPTIONS",
    "SweepError",
    "GridPoint",
    "Sweep",
    "Job",
    "Expansion",
    "SweepSummary",
    "ResultsFile",
    "load_sweep",
    "expand",
    "make_jobs",
    "problem_hash",
    "job_key",
    "read_results",
    "latest_records",
    "run_job",
    "run_jobs",
    "run_sweep",
    "available_cores",
]

BACKENDS = ("local", "ray")
FAILED = ("error", "timeout")  # statuses a job ends with when it produced no answer of its own
GRID_KEYS = ("model", "cluster", "nodes", "global_batch", "microbatches")
# Options through which a method takes its thread count: CP-SAT's num_workers, the MILP's threads.
THREAD_OPTIONS = ("num_workers", "threads")
_SWEEP_FIELDS = ("problems", "grid", "methods", "objective", "time_limit", "seed", "options", "imports", "name")
_GLOB_CHARS = frozenset("*?[")


class SweepError(ProblemError):
    """A sweep that cannot run: bad sweep file, unreadable results file, missing backend."""


# --------------------------------------------------------------------------- the sweep file


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
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise _fail(f"must be an integer, got {seed!r}", "seed")

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
        declared = method_options(method)
        for key in opts:
            if key not in declared:
                allowed = ", ".join(sorted(declared)) or "none"
                raise _fail(f"method {method} has no option {key!r} (options: {allowed})", f"{where}.{key}")
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
        for combo in itertools.product(*axes):
            points.append(GridPoint(*combo, options=dict(opts) if opts else None))
    return tuple(points)


# --------------------------------------------------------------------------- jobs and keys


def _canonical(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def problem_hash(problem: Problem | Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys) of ``Problem.to_dict()``."""
    doc = problem.to_dict() if isinstance(problem, Problem) else problem
    return hashlib.sha256(_canonical(doc)).hexdigest()


def job_key(
    problem_digest: str,
    method: str,
    objective: str,
    time_limit: float | None,
    seed: int,
    options: Mapping[str, Any] | None = None,
) -> str:
    """The stable identity of a job: what was solved, how, and with which settings."""
    doc = {
        "problem": problem_digest,
        "method": method,
        "objective": objective,
        "time_limit": time_limit,
        "seed": seed,
        "options": dict(options or {}),
    }
    return hashlib.sha256(_canonical(doc)).hexdigest()[:32]


def _label(method: str, options: Mapping[str, Any]) -> str:
    if not options:
        return method
    return method + "(" + ",".join(f"{k}={json.dumps(options[k], sort_keys=True)}" for k in sorted(options)) + ")"


@dataclass(frozen=True)
class Job:
    """One (problem, method) pair to solve, with everything a worker needs."""

    key: str
    problem: str  # the file path as the sweep wrote it, or the grid point's name
    problem_hash: str
    method: str
    objective: str
    time_limit: float | None
    seed: int
    options: Mapping[str, Any]
    document: Mapping[str, Any] = field(repr=False, compare=False)  # Problem.to_dict()
    grid: Mapping[str, Any] | None = None  # the preset grid point it was built from, if any

    @property
    def label(self) -> str:
        """The method with its sweep options, e.g. ``brute(max_combinations=1000)``."""
        return _label(self.method, self.options)


def make_jobs(
    problem: Problem,
    name: str,
    methods: Sequence[str],
    *,
    objective: str | None = None,
    time_limit: float | None = None,
    seed: int = 0,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    grid: Mapping[str, Any] | None = None,
) -> list[Job]:
    """The jobs for one problem, one per method (the problem's own objective by default)."""
    document = problem.to_dict()
    digest = problem_hash(document)
    objective = objective or problem.objective
    jobs = []
    for method in methods:
        opts = dict((options or {}).get(method, {}))
        key = job_key(digest, method, objective, time_limit, seed, opts)
        jobs.append(Job(key, name, digest, method, objective, time_limit, seed, opts, document, grid))
    return jobs


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
    settings = dict(objective=sweep.objective, time_limit=sweep.time_limit, seed=sweep.seed, options=sweep.options)
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
        from . import costs
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
    digest = "grid:" + hashlib.sha256(_canonical(point.to_dict())).hexdigest()
    records = []
    for method in sweep.methods:
        opts = dict(sweep.options.get(method, {}))
        job = Job(job_key(digest, method, objective, sweep.time_limit, sweep.seed, opts), point.name, digest,
                  method, objective, sweep.time_limit, sweep.seed, opts, {}, point.to_dict())
        message = f"the cost model could not build this grid point: {type(err).__name__}: {err}"
        records.append(_failure_record(job, opts, "error", message, 0.0, _local_info()))
    return records


# --------------------------------------------------------------------------- the results file


def _parse_lines(data: bytes, source: str) -> tuple[list[dict[str, Any]], int, bool]:
    """Records in ``data``, the length of the valid prefix, and whether it ends without a newline.

    A damaged tail -- lines that do not parse, with nothing valid after them --
    is what a killed writer leaves, and is dropped; a damaged line followed by
    valid ones is not, and raises.
    """
    records: list[dict[str, Any]] = []
    valid_end = 0
    bad_line: int | None = None
    pos = 0
    lineno = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        raw = data[pos:end]
        lineno += 1
        pos = end
        if not raw.strip(b" \t\r\n\x00"):
            if bad_line is None:
                valid_end = end if nl >= 0 else valid_end
            continue
        try:
            record = json.loads(raw)
            ok = isinstance(record, dict) and isinstance(record.get("key"), str)
        except (ValueError, UnicodeDecodeError):
            ok = False
        if not ok:
            bad_line = bad_line or lineno
            continue
        if bad_line is not None:
            raise ProblemError(f"line {bad_line} is not a valid result record (and later lines are)", source=source)
        records.append(record)
        valid_end = end
    missing_newline = valid_end > 0 and not data[:valid_end].endswith(b"\n")
    return records, valid_end, missing_newline


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a results file in order; a half-written last line is ignored."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ProblemError("file not found", source=str(path)) from None
    except OSError as err:
        raise ProblemError(f"cannot read file: {err}", source=str(path)) from None
    return _parse_lines(data, str(path))[0]


def latest_records(records: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The last record of every key (a retried job's new record replaces the old one)."""
    latest: dict[str, Mapping[str, Any]] = {}
    for record in records:
        latest[record["key"]] = record
    return latest


class ResultsFile:
    """The JSON-lines results store, opened for appending by one process at a time.

    Opening it takes an exclusive lock (another sweep writing the same file
    fails at once), reads the finished records and cuts away a half-written
    tail. :meth:`append` writes one line, flushes and fsyncs it.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        created = not self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a+b")
        except OSError as err:
            raise SweepError(f"cannot open the results file: {err.strerror or err}", source=str(self.path)) from None
        try:
            _lock(self._file, self.path)
            self._file.seek(0)
            data = self._file.read()
            self.records, valid_end, missing_newline = _parse_lines(data, str(self.path))
            self.dropped_bytes = len(data) - valid_end
            if self.dropped_bytes:
                self._file.truncate(valid_end)
            if missing_newline:
                self._file.write(b"\n")
            self._sync()
            if created:
                _fsync_dir(self.path.parent)
        except BaseException:
            self._file.close()
            raise

    def latest(self) -> dict[str, Mapping[str, Any]]:
        return latest_records(self.records)

    def append(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), default=_json_default) + "\n"
        self._file.write(line.encode())
        self._sync()
        self.records.append(dict(record))

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()  # closing releases the lock

    def __enter__(self) -> "ResultsFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _lock(handle: Any, path: Path) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory lock, one writer is the user's job
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SweepError("is being written by another running sweep (it holds the file lock)", source=str(path)) from None
    except OSError:  # a file system without locks (some NFS mounts): go on unlocked
        pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return str(value)


# --------------------------------------------------------------------------- running one job (in a worker)


def _local_info() -> dict[str, Any]:
    from . import __version__

    return {"version": __version__, "host": socket.gethostname(), "worker": os.getpid()}


def run_job(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Solve one job's payload; never raises (an exception becomes an ``error`` result).

    Returns ``{"result": SolveResult.to_dict() or None, "error": message or None,
    "traceback": ..., "wall_seconds", "cpu_seconds", "version", "host", "worker"}``.
    """
    from .solvers import solve

    start, cpu_start = time.perf_counter(), time.process_time()
    out: dict[str, Any] = {"result": None, "error": None}
    try:
        problem = Problem.from_dict(payload["problem"])
        result = solve(
            problem,
            payload["method"],
            objective=payload["objective"],
            time_limit=payload["time_limit"],
            seed=payload["seed"],
            options=payload["options"],
        )
        out["result"] = result.to_dict()
    except Exception as err:  # the job failed, not the sweep: record it
        out["error"] = f"{type(err).__name__}: {err}"
        out["traceback"] = "".join(traceback.format_exception(type(err), err, err.__traceback__)[-8:])
    out["wall_seconds"] = time.perf_counter() - start
    out["cpu_seconds"] = time.process_time() - cpu_start  # every thread of the worker: load-independent cost
    out.update(_local_info())
    return out


def _prepare_worker(imports: Sequence[str]) -> None:
    registered_methods()
    for module in imports:
        importlib.import_module(module)


def _watch_parent() -> None:
    """Exit when the sweep process is gone (it was killed, so nobody will read our results)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def _process_worker(conn: Any, imports: Sequence[str]) -> None:
    """A local worker: announce readiness, then solve jobs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _watch_parent()
    try:
        _prepare_worker(imports)
    except BaseException as err:
        conn.send(("fatal", f"worker setup failed: {type(err).__name__}: {err}"))
        return
    conn.send(("ready", _local_info()))
    while True:
        try:
            payload = conn.recv()
        except (EOFError, OSError):
            return
        if payload is None:
            return
        out = run_job(payload)
        try:
            conn.send(("done", out))
        except (OSError, ValueError):
            return


# --------------------------------------------------------------------------- worker pools


class _ProcessPool:
    """Worker processes (spawned, so the parent's threads and solver state are not inherited)."""

    backend = "local"

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: dict[int, Any] = {}
        self._conns: dict[int, Any] = {}

    def cores(self) -> int:
        return available_cores()

    def configure(self, imports: Sequence[str], threads: int) -> None:
        self._imports = tuple(imports)  # threads reach the jobs as a method option, not a process setting

    def start(self, slot: int) -> None:
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=_process_worker, args=(child_end, self._imports), name=f"partitioner-batch-{slot}",
            daemon=True,
        )
        proc.start()
        child_end.close()
        self._procs[slot], self._conns[slot] = proc, parent_end

    def send(self, slot: int, payload: Mapping[str, Any]) -> None:
        self._conns[slot].send(dict(payload))

    def wait(self, timeout: float) -> list[tuple[int, str, Any]]:
        by_object: dict[Any, tuple[int, str]] = {}
        for slot, conn in self._conns.items():
            by_object[conn] = (slot, "conn")
            by_object[self._procs[slot].sentinel] = (slot, "sentinel")
        events: list[tuple[int, str, Any]] = []
        dead: set[int] = set()
        for obj in wait_objects(list(by_object), timeout):
            slot, kind = by_object[obj]
            if slot in dead:
                continue
            conn = self._conns[slot]
            try:
                while conn.poll():  # drain messages before believing a death
                    kind_msg, data = conn.recv()
                    events.append((slot, kind_msg, data))
            except (EOFError, OSError):
                pass
            proc = self._procs[slot]
            if kind == "sentinel" or not proc.is_alive():
                proc.join(timeout=1.0)
                if not proc.is_alive():
                    dead.add(slot)
                    events.append((slot, "died", _exit_description(proc.exitcode)))
        return events

    def kill(self, slot: int) -> None:
        proc = self._procs.pop(slot)
        conn = self._conns.pop(slot)
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5.0)
        conn.close()

    def forget(self, slot: int) -> None:
        """Drop a slot whose process already ended."""
        self.kill(slot)

    def close(self) -> None:
        for slot, conn in list(self._conns.items()):
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 2.0
        for slot in list(self._procs):
            proc = self._procs[slot]
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
            self.kill(slot)


def _exit_description(code: int | None) -> str:
    if code is None:
        return "worker process ended"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker process died ({name})"
    return f"worker process died (exit code {code})"


class _RayWorker:
    """The Ray actor behind one worker slot (decorated with ``ray.remote`` at run time)."""

    def __init__(self, imports: Sequence[str]):
        try:
            _prepare_worker(imports)
            self._setup_error = None
        except BaseException as err:
            self._setup_error = f"worker setup failed: {type(err).__name__}: {err}"

    def ready(self) -> tuple[str, Any]:
        if self._setup_error:
            return ("fatal", self._setup_error)
        return ("ready", _local_info())

    def run(self, payload: Mapping[str, Any]) -> tuple[str, Any]:
        return ("done", run_job(payload))


class _RayPool:
    """One Ray actor per worker slot, on a local Ray instance or a cluster at ``address``."""

    backend = "ray"

    def __init__(self, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise SweepError("the ray backend needs Ray: pip install 'partitioner[ray]'") from None
        self._ray = ray
        self._owns = False
        if not ray.is_initialized():
            import logging

            try:
                ray.init(
                    address=address,
                    runtime_env=_ray_runtime_env(address),
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
            except Exception as err:  # unreachable address, refused authentication, ...
                where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                raise SweepError(f"cannot connect to {where}: {type(err).__name__}: {_first_line(err)}") from None
            self._owns = True
        self._actors: dict[int, Any] = {}
        self._refs: dict[Any, int] = {}

    def cores(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def configure(self, imports: Sequence[str], threads: int) -> None:
        # each actor reserves the CPUs its jobs may use, so Ray does not oversubscribe a node
        self._cls = self._ray.remote(num_cpus=threads, max_restarts=0, max_task_retries=0)(_RayWorker)
        self._imports = tuple(imports)

    def start(self, slot: int) -> None:
        actor = self._cls.remote(self._imports)
        self._actors[slot] = actor
        self._refs[actor.ready.remote()] = slot

    def send(self, slot: int, payload: Mapping[str, Any]) -> None:
        self._refs[self._actors[slot].run.remote(dict(payload))] = slot

    def wait(self, timeout: float) -> list[tuple[int, str, Any]]:
        if not self._refs:
            time.sleep(timeout)
            return []
        done, _ = self._ray.wait(list(self._refs), num_returns=1, timeout=timeout)
        if done:
            more, _ = self._ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
            done = list(dict.fromkeys(done + more))
        events = []
        for ref in done:
            slot = self._refs.pop(ref)
            try:
                kind, data = self._ray.get(ref)
                events.append((slot, kind, data))
            except self._ray.exceptions.RayActorError as err:
                events.append((slot, "died", f"Ray worker died: {_first_line(err)}"))
            except self._ray.exceptions.RayError as err:
                events.append((slot, "died", f"Ray task failed: {_first_line(err)}"))
        return events

    def kill(self, slot: int) -> None:
        actor = self._actors.pop(slot)
        self._refs = {ref: s for ref, s in self._refs.items() if s != slot}
        self._ray.kill(actor, no_restart=True)

    def forget(self, slot: int) -> None:
        self.kill(slot)

    def close(self) -> None:
        for slot in list(self._actors):
            self.kill(slot)
        if self._owns:
            self._ray.shutdown()


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _ray_runtime_env(address: str | None) -> dict[str, Any]:
    """Make the driver's code importable by Ray workers.

    A local instance shares the file system: put this checkout and the
    driver's extra import paths on the workers' PYTHONPATH. A remote cluster
    gets this ``partitioner`` package uploaded (its dependencies must be
    installed there).
    """
    if address not in (None, "local"):
        import partitioner

        return {"py_modules": [partitioner]}
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    paths = [str(Path(__file__).resolve().parent.parent)]
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        if os.path.isdir(real) and not any(real == p or real.startswith(p + os.sep) for p in prefixes):
            paths.append(real)
    extra = os.environ.get("PYTHONPATH")
    if extra:
        paths.append(extra)
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}}


def available_cores() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# --------------------------------------------------------------------------- records


def _base_record(job: Job, options: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "key": job.key,
        "problem": job.problem,
        "method": job.method,
        "label": job.label,
        "options": dict(options),
        "objective": job.objective,
        "time_limit": job.time_limit,
        "seed": job.seed,
        **({"grid": dict(job.grid)} if job.grid is not None else {}),
    }


def _finish_record(record: dict[str, Any], job: Job, info: Mapping[str, Any], wall: float) -> dict[str, Any]:
    record.update(
        version=info.get("version"),
        host=info.get("host"),
        worker=info.get("worker"),
        wall_seconds=wall,
        cpu_seconds=info.get("cpu_seconds"),
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        problem_hash=job.problem_hash,
    )
    return record


def _failure_record(
    job: Job, options: Mapping[str, Any], status: str, message: str, wall: float, info: Mapping[str, Any]
) -> dict[str, Any]:
    record = _base_record(job, options)
    record.update(status=status, value=None, bound=None, gap=None, solve_seconds=wall, message=message, plan=None)
    return _finish_record(record, job, info, wall)


def _result_record(job: Job, options: Mapping[str, Any], out: Mapping[str, Any]) -> dict[str, Any]:
    wall = float(out.get("wall_seconds") or 0.0)
    if out.get("result") is None:
        record = _failure_record(job, options, "error", out.get("error") or "the job returned nothing", wall, out)
        if out.get("traceback"):
            record["traceback"] = out["traceback"]
        return record
    record = _base_record(job, options)
    result = dict(out["result"])
    for name in ("status", "value", "bound", "gap", "solve_seconds", "message", "plan"):
        record[name] = result.pop(name, None)
    for name, value in result.items():
        record.setdefault(name, value)
    return _finish_record(record, job, out, wall)


def _runtime_options(job: Job, threads: int) -> dict[str, Any]:
    options = dict(job.options)
    declared = method_options(job.method)
    for name in THREAD_OPTIONS:
        if name in declared and name not in options:
            options[name] = threads
    return options


# --------------------------------------------------------------------------- the scheduler


@dataclass
class _Slot:
    ready: bool = False
    job: Job | None = None
    options: Mapping[str, Any] | None = None
    started: float = 0.0
    deadline: float | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    idle_deaths: int = 0


def _default_grace(time_limit: float) -> float:
    """Seconds a job may run past its time limit before it is killed: solvers stop between steps."""
    return 5.0 + 0.1 * time_limit


def _schedule(
    pool: Any, jobs: Sequence[Job], size: int, threads: int, grace: float | None
) -> Iterator[dict[str, Any]]:
    """Run ``jobs`` on ``size`` worker slots of ``pool``; yield one record per job as it ends."""
    pending = deque(jobs)
    slots = {i: _Slot() for i in range(size)}
    for i in slots:
        pool.start(i)
    started_any = time.monotonic()
    ever_ready = False

    def restart(i: int) -> None:
        slots[i] = _Slot(idle_deaths=slots[i].idle_deaths)
        pool.start(i)

    def release(i: int) -> None:
        slot = slots[i]
        slot.job, slot.options, slot.deadline = None, None, None

    while pending or any(s.job is not None for s in slots.values()):
        now = time.monotonic()
        for i, slot in slots.items():
            if slot.ready and slot.job is None and pending:
                job = pending.popleft()
                slot.job, slot.options, slot.started = job, _runtime_options(job, threads), now
                if job.time_limit is not None:
                    slot.deadline = now + job.time_limit + (_default_grace(job.time_limit) if grace is None else grace)
                try:
                    pool.send(i, _payload(job, slot.options))
                except (OSError, ValueError):  # the worker died while idle: its death event restarts it
                    pending.appendleft(job)
                    release(i)
                    slot.ready = False
        deadlines = [s.deadline for s in slots.values() if s.deadline is not None]
        timeout = min([1.0] + [max(0.0, d - now) for d in deadlines])
        for i, kind, data in pool.wait(timeout):
            slot = slots[i]
            if kind == "ready":
                slot.ready, slot.info, slot.idle_deaths = True, data, 0
                ever_ready = True
            elif kind == "done":
                if slot.job is not None:
                    yield _result_record(slot.job, slot.options or {}, data)
                    release(i)
            elif kind == "fatal":
                raise SweepError(str(data))
            elif kind == "died":
                pool.forget(i)
                if slot.job is not None:
                    wall = time.monotonic() - slot.started
                    yield _failure_record(slot.job, slot.options or {}, "error", f"{data} while solving", wall, slot.info)
                    release(i)
                else:
                    slot.idle_deaths += 1
                    if slot.idle_deaths >= 3:
                        raise SweepError(f"a {pool.backend} worker keeps dying before it takes a job: {data}")
                restart(i)
        now = time.monotonic()
        for i, slot in slots.items():
            if slot.job is not None and slot.deadline is not None and now > slot.deadline:
                wall = now - slot.started
                limit = slot.job.time_limit
                message = f"killed after {wall:.1f} s: it overran its time limit of {limit:g} s (+ {slot.deadline - slot.started - limit:g} s grace)"
                pool.kill(i)
                yield _failure_record(slot.job, slot.options or {}, "timeout", message, wall, slot.info)
                restart(i)
        if not ever_ready and time.monotonic() - started_any > 300:
            raise SweepError(f"no {pool.backend} worker started within 300 s")


def _payload(job: Job, options: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "problem": job.document,
        "method": job.method,
        "objective": job.objective,
        "time_limit": job.time_limit,
        "seed": job.seed,
        "options": dict(options),
    }


# --------------------------------------------------------------------------- running a sweep


@dataclass(frozen=True)
class SweepSummary:
    """What one run of a sweep did."""

    out: str
    total: int  # distinct jobs in the sweep
    skipped: int  # already in the results file
    ran: int  # records written by this run
    statuses: Mapping[str, int]  # of the records written by this run
    seconds: float
    backend: str
    workers: int
    threads: int
    dropped_bytes: int = 0  # a half-written tail cut from the results file
    duplicates: int = 0  # jobs listed twice (same problem content, method and settings)


def _make_pool(backend: str, address: str | None) -> Any:
    if backend == "local":
        if address:
            raise SweepError("--address is for the ray backend")
        return _ProcessPool()
    if backend == "ray":
        return _RayPool(address)
    raise SweepError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def run_jobs(
    jobs: Sequence[Job],
    out: str | Path,
    *,
    workers: int | None = None,
    backend: str = "local",
    address: str | None = None,
    grace: float | None = None,
    retry_failed: bool = False,
    imports: Sequence[str] = (),
    prefailed: Sequence[Mapping[str, Any]] = (),
    on_start: Callable[[int, int], None] | None = None,
    on_record: Callable[[Mapping[str, Any]], None] | None = None,
    duplicates: int = 0,
) -> SweepSummary:
    """Run ``jobs`` not yet finished in ``out``, appending a record for each.

    Parameters
    ----------
    jobs : sequence of Job
    out : path
        The JSON-lines results file (created if missing).
    workers : int, optional
        Concurrent jobs; default: the cores (local) or the cluster's CPUs (ray).
    backend : {"local", "ray"}
    address : str, optional
        A Ray cluster address (``ray`` backend); default: start a local instance.
    grace : float, optional
        Seconds past its time limit before a job is killed; default 5 + 10 % of the limit.
    retry_failed : bool
        Also run jobs whose latest record is ``error`` or ``timeout``.
    imports : sequence of str
        Modules every worker imports first (methods registered outside the package).
    prefailed : sequence of dict
        Records to write without running anything (grid points that could not be built).
    on_start : callable(total, done), optional
    on_record : callable(record), optional
        Progress hooks; ``on_record`` is called after each record is on disk.
    """
    if workers is not None and workers < 1:
        raise SweepError(f"--workers must be >= 1, got {workers}")
    if grace is not None and grace < 0:
        raise SweepError(f"--grace must be >= 0 seconds, got {grace}")
    if backend not in BACKENDS:
        raise SweepError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    start = time.monotonic()
    statuses: Counter[str] = Counter()
    with ResultsFile(out) as store:
        finished = store.latest()

        def done(key: str) -> bool:
            record = finished.get(key)
            return record is not None and not (retry_failed and record.get("status") in FAILED)

        todo = [job for job in jobs if not done(job.key)]
        late = [r for r in prefailed if r["key"] not in finished]
        total = len(jobs) + len(prefailed)
        skipped = total - len(todo) - len(late)
        if on_start:
            on_start(total, skipped)

        def write(record: Mapping[str, Any]) -> None:
            store.append(record)
            statuses[record["status"]] += 1
            if on_record:
                on_record(record)

        for record in late:
            write(record)
        size, threads = 0, 1
        if todo:
            pool = _make_pool(backend, address)
            try:
                cores = pool.cores()
                size = min(workers or cores, len(todo))
                threads = max(1, cores // size)
                pool.configure(imports, threads)
                for record in _schedule(pool, todo, size, threads, grace):
                    write(record)
            finally:
                pool.close()
        dropped = store.dropped_bytes
    return SweepSummary(
        out=str(out),
        total=total,
        skipped=skipped,
        ran=sum(statuses.values()),
        statuses=dict(statuses),
        seconds=time.monotonic() - start,
        backend=backend,
        workers=size,
        threads=threads,
        dropped_bytes=dropped,
        duplicates=duplicates,
    )


def run_sweep(sweep: Sweep | str | Path, out: str | Path, **kwargs: Any) -> SweepSummary:
    """Expand ``sweep`` (a :class:`Sweep` or a sweep file) and run it into ``out``; see :func:`run_jobs`."""
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep)
    expansion = expand(sweep)
    return run_jobs(
        expansion.jobs,
        out,
        imports=sweep.imports,
        prefailed=expansion.failed,
        duplicates=expansion.duplicates,
        **kwargs,
    )
