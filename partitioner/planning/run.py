"""One ``plan`` run, resolved once: :class:`PlanRun`.

:func:`~partitioner.planning.plan_model.run_plan` turns its checked
:class:`~.options.PlanOptions` into one :class:`PlanRun` before it loads
anything, and every step after reads it: the target's rules (None for
``any``), the cost options the problems are built with, the schedule keys
to try, the microbatch counts to screen, the weight-memory count the run
charges, and the run's one :class:`~partitioner.core.deadline.Deadline`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ..core.deadline import Deadline
from ..core.limits import MAX_MICROBATCHES
from ..costs import CostOptions, ProblemBuilder, TermsStore
from ..frameworks import FrameworkRules
from ..problem import Problem, ProblemError
from .options import PlanOptions
from .schedules.choice import schedule_keys
from .targets.memory import MemoryCounts, memory_counts, target_costs
from .targets.rules import rules_for

__all__ = ["PlanRun", "CostTables", "plan_options", "with_precision", "microbatch_candidates", "divisors", "ScheduleKey"]

ScheduleKey = tuple[str, int]  # (schedule, v)
_ALL_ZERO = (0, 1, 3)  # the ZeRO stages of the cost model's knobs (--target any charges them all)


def plan_options(options: Mapping[str, Any] | CostOptions | None) -> CostOptions:
    """The cost options ``plan_model`` uses: every memory-knob variant unless the options fix or restrict them."""
    if isinstance(options, CostOptions):
        return options
    given = dict(options or {})
    every = {} if {"variants", "recompute", "zero1"} & set(given) else {"variants": ("all",)}
    return CostOptions.from_mapping({**given, **every})


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` >= 1 in increasing order, by trial division up to sqrt(n) (O(sqrt n) steps)."""
    small, large = [], []
    for d in range(1, math.isqrt(n) + 1):
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
    return small + large[::-1]


def microbatch_candidates(global_batch: int, limit: int | None = None) -> list[int]:
    """Microbatch counts tried by ``microbatches="auto"``: the divisors of the global batch, at most ``limit``
    and at most :data:`~partitioner.core.limits.MAX_MICROBATCHES` (a problem's range).

    A batch of at most :data:`~partitioner.core.limits.MAX_GLOBAL_BATCH` (the range
    :class:`~.options.PlanOptions` accepts) has at most a few hundred divisors
    (2^24 has 25; the most below it, 504), found in at most 4096 steps.
    """
    cap = MAX_MICROBATCHES if limit is None else min(limit, MAX_MICROBATCHES)
    return [m for m in divisors(global_batch) if m <= cap]


def with_precision(opts: PlanOptions) -> PlanOptions:
    """``opts`` with its ``precision`` and ``fp8_recipe`` merged into the cost options (validated there).

    A recipe alone asks for FP8. The options' own checks (a recipe with
    BF16, a value the cost options contradict) ran when they were made.
    """
    given = {k: v for k, v in (("precision", opts.precision), ("fp8_recipe", opts.fp8_recipe)) if v is not None}
    if not given:
        return opts
    base = opts.options
    doc = base.to_dict() if isinstance(base, CostOptions) else dict(base or {})
    if "fp8_recipe" in given and "precision" not in given and doc.get("precision") != "fp8":
        given = {**given, "precision": "fp8"}
    merged = {**doc, **given}
    costs = CostOptions.from_mapping(merged)  # a ProblemError naming options.<key> if bad
    return replace(opts, options=costs if isinstance(base, CostOptions) else merged, precision=None, fp8_recipe=None)


def _check_target_precision(rules: FrameworkRules | None, costs: CostOptions) -> None:
    """A target whose framework has no training path for the options' FP8 recipe is bad input (exit 2)."""
    if rules is None or not costs.fp8 or costs.fp8_recipe in rules.fp8_recipes:
        return
    if not rules.fp8_recipes:
        raise ProblemError(f"{rules.name} has no FP8 training path ({rules.fp8_note}); plan it in BF16",
                           path="precision")
    raise ProblemError(f"{rules.name} does not run the FP8 recipe {costs.fp8_recipe} (it runs "
                       f"{', '.join(rules.fp8_recipes)}: {rules.fp8_note})", path="fp8_recipe")


@dataclass
class CostTables:
    """The problems one ``plan`` command builds, shared by its runs: the search over every plan and each target's.

    Every run of one command has the same model, cluster, nodes, objective,
    profile, stage bound and GPUs (only the target and the time limit
    differ), so a :class:`~partitioner.costs.ProblemBuilder` is keyed by its
    cost options alone and a problem by its options and microbatch count.
    Problems are immutable (their cost tables are read-only mappings), so a
    run that finds one here gets exactly what it would have built. A
    problem's key is its options, m and the ZeRO stage of a partial problem
    (None: the whole problem; :meth:`~partitioner.costs.ProblemBuilder.build`);
    ``terms``: the compute terms every builder shares (made by the first).
    """

    builders: dict[CostOptions, ProblemBuilder] = field(default_factory=dict)
    problems: dict[tuple[CostOptions, int, int | None], Problem] = field(default_factory=dict)
    terms: TermsStore | None = None


@dataclass(frozen=True)
class PlanRun:
    """A ``plan`` run: its options and what they resolve to, worked out once (:meth:`start`).

    Parameters
    ----------
    options : PlanOptions
        The run's checked options, ``precision`` and ``fp8_recipe`` merged into
        the cost options (:func:`with_precision`).
    rules : FrameworkRules or None
        The target's rules (:mod:`partitioner.frameworks`); None for ``--target any``.
    costs : CostOptions
        The cost options the problems are built with (:func:`plan_options`).
    schedule_keys : tuple of (str, int)
        The ``(schedule, v)`` pairs to try, only the target's schedules with a target.
    counts : tuple of int
        The microbatch counts to screen (every divisor of the batch for ``auto``).
    memory : MemoryCounts
        Which bytes-per-parameter count the run's problems charge, per ZeRO stage.
    deadline : Deadline
        The run's one time limit, started with the run.
    tables : CostTables
        The problems built so far, shared with the command's other runs (:class:`CostTables`).
    first_counts : tuple of int
        Counts of ``counts`` to screen before the others (:attr:`screen_order`): a target's run in the default
        ``plan`` screens the counts the search over every plan found fastest first, so that its share of the
        time reaches a launchable plan before the counts where nothing fits. The order changes what is
        screened before a deadline, never an answer: the screened counts are read in ``counts`` order.
    screening : Deadline or None
        When it has passed and a screened count has a plan, no further count is screened
        (:func:`~.search.screening.screen_counts`): the part of a target's share the screens may take.
    """

    options: PlanOptions
    rules: FrameworkRules | None
    costs: CostOptions
    schedule_keys: tuple[ScheduleKey, ...]
    counts: tuple[int, ...]
    memory: MemoryCounts
    deadline: Deadline
    tables: CostTables = field(default_factory=CostTables, compare=False, repr=False)
    first_counts: tuple[int, ...] = ()
    screening: Deadline | None = field(default=None, compare=False)

    @property
    def screen_order(self) -> tuple[int, ...]:
        """``counts`` in the order they are screened: those of ``first_counts`` first (in its order), then the rest."""
        first = tuple(dict.fromkeys(m for m in self.first_counts if m in self.counts))
        return first + tuple(m for m in self.counts if m not in first)

    @classmethod
    def start(cls, options: PlanOptions, deadline: Deadline | None = None,
              tables: CostTables | None = None, first_counts: tuple[int, ...] = (),
              screening: Deadline | None = None) -> "PlanRun":
        """The run of ``options`` (cost options are checked here: ProblemError at ``options``).

        Its deadline is ``deadline`` (the command line's, counted from the process's start; or a share of it,
        ``plan --target any``'s search over every plan) or, by default, ``options.time_limit`` started now: one
        limit for the whole run. ``tables``: the problems another run of the same command built (a new, empty
        store when None); ``first_counts``: the counts screened first (:attr:`screen_order`); ``screening``:
        when the screens stop once one count has a plan.
        """
        deadline = deadline if deadline is not None else Deadline(options.time_limit)
        options = with_precision(options)
        rules = rules_for(options.target)
        keys = schedule_keys(options.schedule, options.virtual_stages)
        if rules is not None:
            keys = [k for k in keys if k[0] in rules.schedules]
        m = options.microbatches
        counts = microbatch_candidates(options.global_batch) if m == "auto" else [m]
        costs = target_costs(rules, options.options, plan_options(options.options))
        _check_target_precision(rules, costs)
        memory = memory_counts(options.target, rules.zero if rules else _ALL_ZERO, options.options, costs)
        return cls(options, rules, costs, tuple(keys), tuple(counts), memory, deadline, tables or CostTables(),
                   tuple(first_counts), screening)
