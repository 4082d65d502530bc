"""The solver contract's records: every method's typed options and its capabilities.

A method registers (:func:`~partitioner.solvers.base.register`) an options
record -- a frozen dataclass whose fields are its options, each documented
where it is declared and checked in ``__post_init__`` -- and a
:class:`Capabilities` record saying what it can plan. :func:`~partitioner.solvers.solve`
turns the caller's mapping into the record (:func:`options_record`; the CLI's
``-o key=value`` text goes through :func:`options_from_text` first), so a bad
value is one :class:`~partitioner.solvers.errors.SolverError` (a
:class:`~partitioner.problem.ProblemError`) naming the option, before
anything runs; a method's code reads typed, valid values and checks none.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.options``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from .errors import SolverError

__all__ = [
    "MethodOptions",
    "NoOptions",
    "DpOptions",
    "CpsatOptions",
    "MilpOptions",
    "BruteOptions",
    "Capabilities",
    "MAX_THREADS",
    "MAX_MEMORY_BUDGET_GB",
    "MAX_COMBINATIONS_CAP",
    "MAX_SECONDS",
    "options_record",
    "options_from_text",
    "option_names",
]

# The most threads (dp's ``threads``, milp's ``threads``, cpsat's ``num_workers``) an option may ask for:
# more than the cores only adds overhead, and this bounds the pool a typo (``threads=10**9``) would start.
MAX_THREADS = 1024
# The largest dp table budget accepted: 1 PiB, the largest byte count any field accepts (core.limits.MAX_BYTES).
MAX_MEMORY_BUDGET_GB = 2.0**20
# The largest max_combinations accepted: the count is an int64 in the closed-form enumeration size.
MAX_COMBINATIONS_CAP = 2**62
# The longest enumeration brute's max_seconds may allow: a year.
MAX_SECONDS = 365 * 24 * 3600.0


# --------------------------------------------------------------------------- checks, each naming the option


def _fail(record: "MethodOptions", name: str, reason: str) -> SolverError:
    return SolverError(f"{reason} (method {record.method})", path=f"options.{name}")


def _integer(record: "MethodOptions", name: str, lo: int, hi: int, optional: bool = False) -> None:
    value = getattr(record, name)
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= int(value) <= hi:
        raise _fail(record, name, f"must be an integer in {lo}..{hi}{' or null' if optional else ''}, got {value!r}")
    object.__setattr__(record, name, int(value))


def _number(record: "MethodOptions", name: str, above: float, at_most: float, optional: bool = False,
            below: bool = False) -> None:
    """A finite real number in (above, at_most] (or (above, at_most) when ``below``)."""
    value = getattr(record, name)
    if value is None and optional:
        return
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    ok = ok and above < value and (value < at_most if below else value <= at_most)
    if not ok:
        bracket = ")" if below else "]"
        raise _fail(record, name, f"must be a finite number in ({above:.10g}, {at_most:.10g}{bracket}, got {value!r}")
    object.__setattr__(record, name, float(value))


def _flag(record: "MethodOptions", name: str) -> None:
    value = getattr(record, name)
    if not isinstance(value, bool):
        raise _fail(record, name, f"must be true or false, got {value!r}")


def _choice(record: "MethodOptions", name: str, choices: tuple[str, ...]) -> None:
    value = getattr(record, name)
    if not isinstance(value, str) or value.lower() not in choices:
        raise _fail(record, name, f"must be one of {', '.join(choices)}, got {value!r}")
    object.__setattr__(record, name, value.lower())


# --------------------------------------------------------------------------- the records


@dataclass(frozen=True)
class MethodOptions:
    """The options of a method that takes none; the base of every method's record.

    ``method`` (a class variable) names the method in error messages.
    """

    method: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """The options as a plain mapping (every field, defaults included)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class NoOptions(MethodOptions):
    """``greedy``, ``uniform`` and ``balanced``: no options."""


@dataclass(frozen=True)
class DpOptions(MethodOptions):
    """Options of ``dp`` (:mod:`partitioner.solvers.dp.method`)."""

    method: ClassVar[str] = "dp"

    placement: str = "auto"
    """``"auto"``: the placement mode the cluster needs (:mod:`partitioner.solvers.dp`, *Placement*); ``"bins"``:
    always the exact placement automaton."""
    memory_budget_gb: float = 3.0
    """GiB the DP tables may take, a finite number in (0, :data:`MAX_MEMORY_BUDGET_GB`]. Past it dp stops before
    allocating and returns its best known plan (docs/methods.md)."""
    threads: int | None = None
    """Threads a level's first layers are shared among, 1..:data:`MAX_THREADS`; None: ``PARTITIONER_DP_THREADS``
    or one per core (a batch sweep gives each job its share of the cores)."""

    def __post_init__(self) -> None:
        _choice(self, "placement", ("auto", "bins"))
        _number(self, "memory_budget_gb", 0.0, MAX_MEMORY_BUDGET_GB)
        _integer(self, "threads", 1, MAX_THREADS, optional=True)

    @property
    def memory_budget_bytes(self) -> float:
        return self.memory_budget_gb * 2**30


@dataclass(frozen=True)
class CpsatOptions(MethodOptions):
    """Options of ``cpsat`` (:mod:`partitioner.solvers.cpsat.solver`)."""

    method: ClassVar[str] = "cpsat"

    num_workers: int | None = None
    """CP-SAT search workers, 1..:data:`MAX_THREADS`; None: one per core. One worker and a fixed seed are
    deterministic."""
    hint: bool = True
    """Give the greedy plan as a hint (and its value as an upper bound) when no ``warm_start`` is given; where
    greedy finds none, ``dp``'s plan (:func:`partitioner.solvers.cpsat.solver._dp_hint`)."""
    resolution: float | None = None
    """Target relative accuracy of the integer time scale, in (0, 1); None: 1e-7, or 1e-6 for the zb-h1
    iteration estimate (:data:`partitioner.solvers.slot.times.RESOLUTION_ZB_H1` says why)."""
    log: bool = False
    """Print CP-SAT's search log on stderr."""
    parameters: Mapping[str, Any] = field(default_factory=dict)
    """Further CP-SAT parameters by name (``SatParameters`` fields), over the method's defaults; each name and
    value is tried on a ``SatParameters`` message here, so a bad one is refused before the solve."""
    formulation: str = "auto"
    """``"auto"``: the arc-flow model when the problem fits it, else the slot model; ``"slot"``: always the
    slot model (:mod:`partitioner.solvers.cpsat.solver`)."""

    def __post_init__(self) -> None:
        _integer(self, "num_workers", 1, MAX_THREADS, optional=True)
        _flag(self, "hint")
        _number(self, "resolution", 0.0, 1.0, optional=True, below=True)
        _flag(self, "log")
        _choice(self, "formulation", ("auto", "slot"))
        if not isinstance(self.parameters, Mapping) or not all(isinstance(k, str) for k in self.parameters):
            raise _fail(self, "parameters", f"must map CP-SAT parameter names to values, got {self.parameters!r}")
        object.__setattr__(self, "parameters", types.MappingProxyType(dict(self.parameters)))
        if self.parameters:
            _check_sat_parameters(self)


def _check_sat_parameters(record: CpsatOptions) -> None:
    """Every entry of ``parameters`` set on a fresh ``SatParameters`` (OR-Tools loads here, only when some are given)."""
    from ortools.sat import sat_parameters_pb2

    probe = sat_parameters_pb2.SatParameters()
    for key, value in record.parameters.items():
        try:
            setattr(probe, key, value)
        except (AttributeError, TypeError, ValueError) as err:
            raise _fail(record, f"parameters.{key}", f"not a CP-SAT parameter value ({err})") from None


@dataclass(frozen=True)
class MilpOptions(MethodOptions):
    """Options of ``milp`` (:mod:`partitioner.solvers.milp.solver`)."""

    method: ClassVar[str] = "milp"

    backend: str = "highs"
    """The MILP solver: ``"highs"`` (highspy) or ``"cbc"`` (PuLP's CBC command)."""
    threads: int = 1
    """Solver threads, 1..:data:`MAX_THREADS` (1 keeps runs reproducible)."""
    hint: bool = True
    """Start from the greedy plan when no ``warm_start`` is given."""
    log: bool = False
    """Print the solver's log (CBC's on stderr; HiGHS writes its own to stdout)."""
    presolve: bool = False
    """Run HiGHS's presolve. Off by default: HiGHS 1.16's presolve certified wrong optima and wrong infeasibility
    on format-v2 slot models that brute, CBC and HiGHS without presolve solve correctly (CBC always presolves)."""

    def __post_init__(self) -> None:
        _choice(self, "backend", ("highs", "cbc"))
        _integer(self, "threads", 1, MAX_THREADS)
        _flag(self, "hint")
        _flag(self, "log")
        _flag(self, "presolve")


@dataclass(frozen=True)
class BruteOptions(MethodOptions):
    """Options of ``brute`` (:mod:`partitioner.solvers.brute`)."""

    method: ClassVar[str] = "brute"

    max_combinations: int = 2_000_000
    """The most cut x size combinations the enumeration accepts, 1..:data:`MAX_COMBINATIONS_CAP` (roughly 12
    layers on 16 GPUs by default)."""
    max_seconds: float = 3600.0
    """Without a time limit, the longest enumeration brute starts, in seconds as estimated from its rate bounds
    (:func:`partitioner.solvers.brute.enumeration_work`), a finite number in (0, :data:`MAX_SECONDS`]; under a
    time limit the limit bounds it."""

    def __post_init__(self) -> None:
        _integer(self, "max_combinations", 1, MAX_COMBINATIONS_CAP)
        _number(self, "max_seconds", 0.0, MAX_SECONDS)


@dataclass(frozen=True)
class Capabilities:
    """What a method can plan; :func:`~partitioner.solvers.solve` checks a problem against it before dispatch.

    Attributes
    ----------
    schedules : mapping of str to frozenset of str
        Per ``training.schedule``, the objectives the method optimises (exact methods) or plans validly
        (heuristics) under it; a schedule not listed is not supported.
    why_not : mapping of str to str
        Per unsupported schedule, why the method cannot model it (when "not yet" would mislead).
    topology : bool
        Whether it plans on a user's ``cluster.topology`` graph (else only on the default cluster graph).
    formats : frozenset of int
        The problem format versions it reads.
    tied_weights : bool
        Whether it counts format v3's tied weights (``tied_to``) in rule 6.
    exact : bool
        Whether it proves optimality (cut short by its time limit without a plan, it falls back to greedy).
    partial_racks : bool
        Whether it plans clusters with ``stage_sizes`` or ``devices`` (DESIGN.md "Partial
        racks"): in-node sizes that need not divide the node and a partly used last node.
    levels : bool
        Whether it plans clusters with network ``levels`` (DESIGN.md "Network levels"): stages on
        consecutive devices, each boundary priced on the levels it crosses.
    """

    schedules: Mapping[str, frozenset[str]]
    why_not: Mapping[str, str] = field(default_factory=dict)
    topology: bool = False
    formats: frozenset[int] = frozenset({1, 2, 3})
    tied_weights: bool = True
    exact: bool = False
    partial_racks: bool = False
    levels: bool = False

    def supports(self, schedule: str, objective: str) -> bool:
        return objective in self.schedules.get(schedule, frozenset())


# --------------------------------------------------------------------------- from a mapping or from text


def option_names(record_type: type[MethodOptions]) -> tuple[str, ...]:
    """The options a record declares, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(record_type))


def options_record(record_type: type[MethodOptions], method: str, given: Any) -> MethodOptions:
    """``given`` (None, a mapping of option name to value, or a ``record_type`` itself) as a checked record.

    Raises
    ------
    SolverError
        ``given`` is not a mapping, names an option ``method`` does not have, or a value is out of range
        (the error names the option).
    """
    if isinstance(given, record_type):
        return given
    if given is None:
        given = {}
    if isinstance(given, MethodOptions):
        raise SolverError(f"options for method {method} must be a mapping or {record_type.__name__}, "
                          f"got {type(given).__name__}", path="options")
    if not isinstance(given, Mapping):
        raise SolverError(f"must be a mapping of option name to value, got {type(given).__name__}", path="options")
    names = option_names(record_type)
    for key in given:
        if key not in names:
            allowed = ", ".join(names) or "none"
            raise SolverError(f"method {method} has no option {key!r} (options: {allowed})", path=f"options.{key}")
    return record_type(**dict(given))


def options_from_text(record_type: type[MethodOptions], method: str, pairs: Mapping[str, str]) -> MethodOptions:
    """The record from ``-o key=value`` text: each value parsed as its field's type declares, then checked.

    ``bool``: true/false, yes/no, on/off, 1/0; ``int``/``float``: a number (``null`` for an optional one);
    ``str``: the text; a mapping: a JSON object. A value that does not parse is a :class:`SolverError`
    naming the option.
    """
    names = option_names(record_type)
    hints = typing.get_type_hints(record_type)
    values: dict[str, Any] = {}
    for key, raw in pairs.items():
        if key not in names:
            allowed = ", ".join(names) or "none"
            raise SolverError(f"method {method} has no option {key!r} (options: {allowed})", path=f"options.{key}")
        values[key] = _parse_text(hints[key], raw, key, method)
    return options_record(record_type, method, values)


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def _parse_text(hint: Any, raw: str, key: str, method: str) -> Any:
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = typing.get_args(hint) if union else (hint,)
    optional = type(None) in args
    kinds = [a for a in args if a is not type(None)]
    kind = typing.get_origin(kinds[0]) or kinds[0]
    text = raw.strip()
    if optional and text.lower() in ("null", "none"):
        return None
    try:
        if kind is bool:
            if text.lower() in _TRUE + _FALSE:
                return text.lower() in _TRUE
            raise ValueError
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is str:
            return text
        return json.loads(text)
    except ValueError:
        wanted = {bool: "true or false", int: "an integer", float: "a number"}.get(kind, "a JSON value")
        raise SolverError(f"must be {wanted}, got {raw!r} (method {method})", path=f"options.{key}") from None


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value
