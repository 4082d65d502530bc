"""What ``plan`` is asked to do: :class:`PlanOptions`, every setting of :func:`~partitioner.planning.plan_model`.

:func:`~partitioner.planning.plan_model` takes these settings as keyword
arguments and gathers them here; :func:`~partitioner.planning.plan_model.run_plan`
takes a :class:`PlanOptions` directly. Each field says what it sets, where it
is declared. The Literal types name the closed sets of words the settings use.

The options check themselves when made (:meth:`PlanOptions.__post_init__`):
a value out of its type or range is a :class:`~partitioner.problem.ProblemError`
naming the field, before any work; nothing after the door checks them again.
"""
from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, Literal, Mapping, get_args

from ..core.limits import MAX_GLOBAL_BATCH, MAX_NODES
from ..costs import CostOptions
from ..costs.compute.fp8 import FP8_RECIPES, PRECISIONS
from ..frameworks.recipe import Recipe
from ..problem import OBJECTIVES, Objective, ProblemError
from ..solvers import methods
from ..solvers.base import method_options
from ..solvers.options import MAX_MEMORY_BUDGET_GB
from .targets.rules import TARGETS, Target, rules_for

__all__ = ["PlanOptions", "KnobSolves", "ScheduleChoice", "Precision", "SCHEDULE_CHOICES", "KNOB_SOLVES",
           "solver_options"]

KnobSolves = Literal["fast", "all"]
Precision = Literal["bf16", "fp8"]
ScheduleChoice = Literal["auto", "1f1b", "zb-h1", "gpipe", "interleaved"]
KNOB_SOLVES: tuple[KnobSolves, ...] = get_args(KnobSolves)
SCHEDULE_CHOICES: tuple[ScheduleChoice, ...] = get_args(ScheduleChoice)


@dataclass(frozen=True)
class PlanOptions:
    """The settings of one ``plan`` run (the keyword arguments of :func:`~.plan_model.plan_model`)."""

    nodes: int
    """Nodes of the cluster preset to plan on (1..``partitioner.core.limits.MAX_NODES``)."""

    global_batch: int
    """Samples per iteration over all data-parallel replicas (1..``partitioner.core.limits.MAX_GLOBAL_BATCH``)."""

    microbatches: int | Literal["auto"] = "auto"
    """Microbatches per iteration, m. ``auto`` screens every divisor of the global
    batch with the baselines and the ``greedy`` heuristic (both fast), solves the
    ``auto_solves`` most promising with ``method`` and keeps the shortest iteration."""

    method: str = "dp"
    """A registered solver (``dp``, ``greedy``, ``cpsat``, ...: :func:`partitioner.solvers.methods`)."""

    objective: Objective = "iteration"
    """What the solves minimise: the schedule's iteration estimate or the bottleneck stage time."""

    time_limit: float | None = None
    """Seconds for the whole run (:class:`~partitioner.core.deadline.Deadline`):
    each solve gets what is left, and a re-solve under another schedule than 1F1B
    at most the time the 1F1B solves took (at least
    :data:`~partitioner.planning.plan_model.RESOLVE_MIN_SECONDS`). Once it has
    passed, the run returns its best plan so far, ``feasible``, its message
    naming what was cut short."""

    options: Mapping[str, Any] | CostOptions | None = None
    """Cost-model options (:func:`~partitioner.planning.plan_options`: every
    memory-knob variant unless ``variants``, ``recompute`` or ``zero1`` is given)."""

    profile: Any = None
    """Profiled per-layer times (a path or records) replacing the analytic ones."""

    seed: int = 0
    """Seed of the methods that search at random."""

    simulate: bool = True
    """Replay the plans in the simulator (iteration time = the replay's makespan)."""

    auto_solves: int = 2
    """How many screened microbatch counts ``microbatches="auto"`` solves with ``method``."""

    max_stages: int | None = None
    """Upper bound on the pipeline depth (default: the format's min(layers, GPUs))."""

    gpus: int | None = None
    """GPUs the job uses (default: every GPU of the ``nodes``): all of the first nodes and part or all of the
    last (64 of a GB200 NVL72 rack's 72). With it, stage sizes inside a node follow the cluster preset's
    ``stage_sizes`` (:func:`~partitioner.costs.build.job_cluster_fields`; DESIGN.md "Partial racks")."""

    knob_solves: KnobSolves = "fast"
    """Which uniform knob settings ``method`` solves per screened microbatch count
    before each segment picks its own knobs (:func:`~partitioner.planning.refine_knobs`):
    ``fast`` the first with a plan in :data:`~partitioner.planning.search.knobs.ESCALATION`
    order (ZeRO-1, then recompute, then ZeRO-3); ``all`` every setting, keeping the
    best (slower; better when a setting that adds time allows better cuts). It
    steers the screening only: the kept candidate is then solved exactly once with
    every segment choosing its knobs inside the solve (:mod:`~partitioner.planning.search.exact`),
    whichever is set. With a ``target``, ``all`` is what proves the target's space
    (:mod:`~partitioner.planning.search.target_solve`)."""

    schedules: bool = True
    """With ``simulate``, try every pipeline schedule and keep the plan with the
    least simulated iteration (:mod:`partitioner.planning.schedules.choice`). False: 1F1B only."""

    schedule: ScheduleChoice = "auto"
    """``auto`` tries every schedule; any other value pins it (only its candidates
    are tried, also without ``schedules``)."""

    virtual_stages: int | None = None
    """With ``schedule="interleaved"``, pins v (default: 2, 3 and 4 are tried)."""

    target: Target = "any"
    """``megatron``, ``torchtitan`` or ``deepspeed``: search only the plans that
    framework runs (:mod:`partitioner.planning.targets.rules`: its schedules, one mesh,
    its knobs, where it may cut); ``any``: every plan, and (with ``per_target``)
    per target the plan ``target=T`` returns (``targets``)."""

    per_target: bool = True
    """With ``target="any"``: after the search over every plan, run ``plan`` once per
    framework with ``target=T`` and the same options (:mod:`~partitioner.planning.targets.report`),
    so each ``targets`` entry is what ``plan --target T`` answers; with a ``time_limit``
    the search over every plan gets :data:`~partitioner.planning.plan_model.MAIN_SHARE`
    of it and the targets share the rest. False: no ``targets`` section."""

    precision: Precision | None = None
    """``bf16`` or ``fp8``: the GEMM precision of the transformer blocks
    (:mod:`partitioner.costs.compute.precision`), merged into ``options`` as the cost
    option ``precision``. None: as ``options`` say (BF16 unless they set it)."""

    fp8_recipe: str | None = None
    """With ``fp8``: the scaling recipe (``tensorwise``, ``delayed``,
    ``blockwise``, ``mxfp8``, ``rowwise``: :data:`partitioner.costs.compute.fp8.RECIPES`),
    merged into ``options`` as ``fp8_recipe``. None: as ``options`` say
    (``tensorwise`` unless they set it)."""

    memory_budget_gb: float | None = None
    """GiB the ``dp`` tables of each solve may take (dp's option ``memory_budget_gb``; default its own, 3);
    a finite number in (0, :data:`~partitioner.solvers.options.MAX_MEMORY_BUDGET_GB`]. Methods without that
    option ignore it (:func:`solver_options`)."""

    baseline: Any = None
    """The user's recipe to compare with (:mod:`~partitioner.planning.recipes.baseline`): a
    :class:`~partitioner.frameworks.recipe.Recipe`, the path of a recipe file (a Megatron-LM argument
    list, a Megatron-Bridge config, a torchtitan TOML), or ``"published"`` (the recipe shipped with the
    model preset, :mod:`partitioner.presets.recipes`). It is estimated on the same model, cluster, nodes
    and global batch; the speed-up is then over it, and a recipe faster than the solver's plan is kept.
    None: the speed-up is over the best baseline."""

    def __post_init__(self) -> None:
        _check(self)

    @property
    def tries_schedules(self) -> bool:
        """Whether ``plan`` compares schedules at all: every one (``schedules`` and ``simulate``) or a pinned one."""
        return (self.schedules and self.simulate) or self.schedule != "auto"


def solver_options(opts: PlanOptions) -> dict[str, Any] | None:
    """The method options every solve of the run passes: the memory budget, where the method has one."""
    if opts.memory_budget_gb is None or "memory_budget_gb" not in method_options(opts.method):
        return None
    return {"memory_budget_gb": opts.memory_budget_gb}


# --------------------------------------------------------------------------- the checks (ProblemError at the field)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _choice(value: Any, choices: tuple[str, ...], field: str) -> None:
    if value not in choices:
        raise ProblemError(f"must be one of {', '.join(choices)}, got {value!r}", path=field)


def _counts(o: PlanOptions) -> None:
    """The sizes: nodes, batch, m, the stage bound, the solves of ``auto``, the seed."""
    if not _is_int(o.nodes) or not 1 <= o.nodes <= MAX_NODES:
        raise ProblemError(f"must be an integer in 1..{MAX_NODES}, got {o.nodes!r}", path="nodes")
    if not _is_int(o.global_batch) or not 1 <= o.global_batch <= MAX_GLOBAL_BATCH:
        raise ProblemError(f"must be an integer in 1..{MAX_GLOBAL_BATCH}, got {o.global_batch!r}", path="global_batch")
    if o.microbatches != "auto" and (not _is_int(o.microbatches) or o.microbatches < 1):
        raise ProblemError(f"must be a positive integer or 'auto', got {o.microbatches!r}", path="microbatches")
    if o.max_stages is not None and (not _is_int(o.max_stages) or o.max_stages < 1):
        raise ProblemError(f"must be a positive integer, got {o.max_stages!r}", path="max_stages")
    if o.gpus is not None and (not _is_int(o.gpus) or o.gpus < 1):  # its range needs the cluster: job_cluster_fields
        raise ProblemError(f"must be a positive integer, got {o.gpus!r}", path="gpus")
    if not _is_int(o.auto_solves) or o.auto_solves < 1:
        raise ProblemError(f"must be a positive integer, got {o.auto_solves!r}", path="auto_solves")
    if not _is_int(o.seed) or o.seed < 0:
        raise ProblemError(f"must be a non-negative integer, got {o.seed!r}", path="seed")


def _time_limit(value: Any) -> None:
    """None, or a finite number of seconds > 0."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ProblemError(f"must be a number of seconds, got {value!r}", path="time_limit")
    if not math.isfinite(float(value)) or float(value) <= 0:
        raise ProblemError(f"must be > 0 seconds and finite, got {value!r}", path="time_limit")


def _schedule(o: PlanOptions) -> None:
    """The schedule, its v, and the target's: a pinned schedule the target does not run is refused."""
    _choice(o.schedule, SCHEDULE_CHOICES, "schedule")
    if o.virtual_stages is not None:
        if o.schedule != "interleaved":
            raise ProblemError(f"virtual stages are for schedule 'interleaved' only (schedule is {o.schedule!r})",
                               path="virtual_stages")
        if not _is_int(o.virtual_stages) or o.virtual_stages < 2:
            raise ProblemError(f"the interleaved schedule needs virtual_stages >= 2, got {o.virtual_stages!r}",
                               path="virtual_stages")
    _choice(o.target, TARGETS, "target")
    rules = rules_for(o.target)
    if rules is not None and o.schedule != "auto" and o.schedule not in rules.schedules:
        raise ProblemError(f"{rules.name} does not run schedule {o.schedule} (it runs {', '.join(rules.schedules)})",
                           path="schedule")


def _memory_budget(value: Any) -> None:
    """None, or a finite number of GiB in (0, MAX_MEMORY_BUDGET_GB]."""
    if value is None:
        return
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(float(value))
    if not ok or not 0 < float(value) <= MAX_MEMORY_BUDGET_GB:
        raise ProblemError(f"must be a positive finite number of GiB (at most {MAX_MEMORY_BUDGET_GB:.10g}), "
                           f"got {value!r}", path="memory_budget_gb")


def _precision(o: PlanOptions) -> None:
    """``precision`` and ``fp8_recipe``: their words, a recipe only with FP8, and no contradiction of the cost options."""
    if o.precision is not None:
        _choice(o.precision, PRECISIONS, "precision")
    if o.fp8_recipe is not None:
        _choice(o.fp8_recipe, FP8_RECIPES, "fp8_recipe")
    if o.precision == "bf16" and o.fp8_recipe is not None:
        raise ProblemError("an FP8 recipe needs precision fp8", path="fp8_recipe")
    doc = o.options.to_dict() if isinstance(o.options, CostOptions) else dict(o.options or {})
    for key, value in (("precision", o.precision), ("fp8_recipe", o.fp8_recipe)):  # one setting, one meaning
        if value is not None and key in doc and doc[key] != value:
            raise ProblemError(f"{value!r} contradicts the cost option {key}={doc[key]!r}", path=key)


def _baseline(value: Any) -> None:
    """None, a Recipe, a path (str or PathLike) or ``published``; what it says is checked when the run reads it."""
    if value is None or isinstance(value, (Recipe, str, os.PathLike)):
        if isinstance(value, str) and not value:
            raise ProblemError("must be a recipe file, 'published' or a Recipe, got ''", path="baseline")
        return
    raise ProblemError(f"must be a recipe file, 'published' or a Recipe, got {type(value).__name__}", path="baseline")


def _check(o: PlanOptions) -> None:
    """Every field in its type and range (:class:`ProblemError` naming the first that is not)."""
    _counts(o)
    _choice(o.method, methods(), "method")
    _choice(o.objective, OBJECTIVES, "objective")
    _time_limit(o.time_limit)
    _memory_budget(o.memory_budget_gb)
    if o.options is not None and not isinstance(o.options, (Mapping, CostOptions)):
        raise ProblemError(f"must be a mapping of cost options, got {type(o.options).__name__}", path="options")
    _choice(o.knob_solves, KNOB_SOLVES, "knob_solves")
    for name in ("simulate", "schedules", "per_target"):
        if not isinstance(getattr(o, name), bool):
            raise ProblemError(f"must be true or false, got {getattr(o, name)!r}", path=name)
    _schedule(o)
    _precision(o)
    _baseline(o.baseline)
