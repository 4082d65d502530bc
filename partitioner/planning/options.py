"""What ``plan`` is asked to do: :class:`PlanOptions`, every setting of :func:`~partitioner.planning.plan_model`.

:func:`~partitioner.planning.plan_model` takes these settings as keyword
arguments and gathers them here; :func:`~partitioner.planning.plan_model.run_plan`
takes a :class:`PlanOptions` directly. Each field says what it sets, where it
is declared. The Literal types name the closed sets of words the settings use.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, get_args

from ..costs import CostOptions
from ..problem import Objective
from .targets.rules import Target

__all__ = ["PlanOptions", "KnobSolves", "ScheduleChoice", "Precision", "SCHEDULE_CHOICES", "KNOB_SOLVES"]

KnobSolves = Literal["fast", "all"]
Precision = Literal["bf16", "fp8"]
ScheduleChoice = Literal["auto", "1f1b", "zb-h1", "gpipe", "interleaved"]
KNOB_SOLVES: tuple[KnobSolves, ...] = get_args(KnobSolves)
SCHEDULE_CHOICES: tuple[ScheduleChoice, ...] = get_args(ScheduleChoice)


@dataclass(frozen=True)
class PlanOptions:
    """The settings of one ``plan`` run (the keyword arguments of :func:`plan_model`)."""

    nodes: int
    """Nodes of the cluster preset to plan on (1..``partitioner.core.limits.MAX_NODES``)."""

    global_batch: int
    """Samples per iteration over all data-parallel replicas."""

    microbatches: int | Literal["auto"] = "auto"
    """Microbatches per iteration, m. ``auto`` screens every divisor of the global
    batch with the baselines and the ``greedy`` heuristic (both fast), solves the
    ``auto_solves`` most promising with ``method`` and keeps the shortest iteration."""

    method: str = "dp"
    """A registered solver (``dp``, ``greedy``, ``cpsat``, ...: :func:`partitioner.solvers.methods`)."""

    objective: Objective = "iteration"
    """What the solves minimise: the schedule's iteration estimate or the bottleneck stage time."""

    time_limit: float | None = None
    """Seconds for the whole run (:class:`~partitioner.planning.deadline.Deadline`):
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

    knob_solves: KnobSolves = "fast"
    """Which uniform knob settings ``method`` solves per screened microbatch count
    before each segment picks its own knobs (:func:`~partitioner.planning.refine_knobs`):
    ``fast`` the first with a plan in :data:`~partitioner.planning.knobs.ESCALATION`
    order (ZeRO-1, then recompute, then ZeRO-3); ``all`` every setting, keeping the
    best (slower; better when a setting that adds time allows better cuts). It
    steers the screening only: the kept candidate is then solved exactly once with
    every segment choosing its knobs inside the solve (:mod:`~partitioner.planning.exact`),
    whichever is set. With a ``target``, ``all`` is what proves the target's space
    (:mod:`~partitioner.planning.targets.solve`)."""

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
    its knobs, where it may cut); ``any``: every plan, and the result says per
    target the best candidate it runs (``targets``)."""

    precision: Precision | None = None
    """``bf16`` or ``fp8``: the GEMM precision of the transformer blocks
    (:mod:`partitioner.costs.precision`), merged into ``options`` as the cost
    option ``precision``. None: as ``options`` say (BF16 unless they set it)."""

    fp8_recipe: str | None = None
    """With ``fp8``: the scaling recipe (``tensorwise``, ``delayed``,
    ``blockwise``, ``mxfp8``, ``rowwise``: :data:`partitioner.costs.fp8.RECIPES`),
    merged into ``options`` as ``fp8_recipe``. None: as ``options`` say
    (``tensorwise`` unless they set it)."""

    @property
    def tries_schedules(self) -> bool:
        """Whether ``plan`` compares schedules at all: every one (``schedules`` and ``simulate``) or a pinned one."""
        return (self.schedules and self.simulate) or self.schedule != "auto"
