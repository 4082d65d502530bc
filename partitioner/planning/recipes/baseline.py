"""The user's recipe as ``plan``'s baseline: ``plan --baseline RECIPE``.

Contract: :func:`read_baseline` turns ``PlanOptions.baseline`` (a
:class:`~partitioner.frameworks.recipe.Recipe`, a recipe file, or
``published``: the recipe shipped with the model preset,
:mod:`partitioner.presets.recipes`) into a Recipe on the plan's job: a
recipe whose nodes or global batch contradict the plan's, or whose precision
is not the plan's, is a :class:`~partitioner.problem.ProblemError` naming
the field (exit 2), and a recipe without a global batch takes the plan's.
:func:`estimate_baseline` estimates it with :func:`~.estimate.estimate` on
the same model, cluster, nodes, global batch and cost options
(:class:`RecipeBaseline`).

More (the detail of this module): ``docs/internals/planning.md``, section ``partitioner.planning.recipes.baseline``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any

from ...costs import CostOptions
from ...frameworks.recipe import Recipe
from ...frameworks.recipe_files import read_recipe_file
from ...plan import Plan, SolveResult
from ...presets import ClusterSpec, ModelSpec
from ...presets.recipes import published_recipe
from ...problem import Problem, ProblemError
from ...simulate.engine import ReplaySummary
from ..options import PlanOptions
from ..records import KnobSolve, RecipeComparison
from ..results import iteration_of, simulate_plan
from .estimate import Estimate, estimate

__all__ = ["RecipeBaseline", "StatedRecipe", "read_baseline", "estimate_baseline", "with_recipe_axes",
           "recipe_solve", "keep_faster", "recipe_layout_text"]

# relative margin under which the recipe counts as faster than the solver's plan (the replays' rounding)
_FASTER = 1e-9


@dataclass(frozen=True)
class StatedRecipe:
    """A recipe on the plan's job and how to name it: ``your recipe launch.sh`` or ``the published recipe of M``."""

    recipe: Recipe
    name: str
    source: str | None = None  # the published recipe's URL


@dataclass(frozen=True)
class RecipeBaseline:
    """The recipe estimated on the plan's job: its :class:`~.estimate.Estimate` and replay.

    ``fits`` False: the recipe is over memory (its times are those of the
    same plan with the memory check lifted) and cannot be kept.
    """

    name: str
    layout: str
    estimate: Estimate
    source: str | None = None
    sim: ReplaySummary | None = None

    @property
    def iteration_ms(self) -> float:
        return self.estimate.iteration_ms

    @property
    def fits(self) -> bool:
        return self.estimate.fits

    def comparison(self, iteration_ms: float | None, problem: Problem | None, plan: Plan | None) -> RecipeComparison:
        """What the result reports: the speed-up of the returned plan (``iteration_ms``) over the recipe, and
        whether that plan is the recipe's own (the recipe's problem and stages)."""
        est = self.estimate
        kept = problem is est.problem and plan is not None and plan == est.plan
        return RecipeComparison(self.name, self.layout, self.iteration_ms, self.fits,
                                self.iteration_ms / iteration_ms if iteration_ms else None, kept, est.microbatches,
                                est.schedule, est.virtual_stages, est.throughput, est.recipe.to_dict(),
                                est.plan.to_dict(est.evaluation) if est.plan is not None else None, est.over_memory,
                                self.source)


def recipe_layout_text(est: Estimate) -> str:
    """``tp 2 x pp 4 x ep 8 (etp 1) x dp 2, mbs 1, m 32, ZeRO-1, 1F1B``: the recipe's layout in one phrase."""
    r = est.recipe
    axes = [f"{name} {getattr(r, name)}" for name in ("tp", "pp", "vpp", "cp", "ep") if getattr(r, name) != 1]
    if r.ep > 1:
        axes[-1] += f" (etp {r.expert_tp})"
    knobs = [f"ZeRO-{r.zero}"] + ([f"recompute {r.recompute}"] if r.recompute != "none" else [])
    schedule = est.schedule if est.virtual_stages <= 1 else f"{est.schedule} v{est.virtual_stages}"
    return f"{' x '.join(axes + [f'dp {est.dp}'])}, mbs {r.mbs}, m {est.microbatches}, {', '.join(knobs)}, {schedule}"


def read_baseline(value: Any, spec: ModelSpec, cluster: ClusterSpec, opts: PlanOptions,
                  costs: CostOptions) -> StatedRecipe:
    """The recipe of ``value`` (a Recipe, a recipe file, ``published``) on the plan's job, or a ProblemError.

    Its nodes (when stated) must be the plan's, its global batch (when
    stated) the plan's, its precision (when stated) the cost options'; a
    recipe without a global batch takes the plan's [1]_.

    References
    ----------
    .. [1] NVIDIA Megatron-LM, ``megatron/training/arguments.py``: the world is
       ``--nnodes`` x GPUs per node and ``--global-batch-size`` the samples of
       one iteration; a recipe for another world or batch is another job.
    """
    if isinstance(value, Recipe):
        stated = StatedRecipe(value, "your recipe")
    elif isinstance(value, str) and value == "published":
        found = published_recipe(spec.name, cluster.name, opts.nodes)
        recipe = Recipe.from_fields(found.fields, origin={k: f"{found.path}: recipe.{k}" for k in found.fields})
        stated = StatedRecipe(recipe, f"the published recipe {found.title}", found.url)
    elif isinstance(value, (str, os.PathLike)):
        stated = StatedRecipe(read_recipe_file(os.fspath(value)), f"your recipe {os.fspath(value)}")
    else:
        raise ProblemError(f"must be a recipe file, 'published' or a Recipe, got {type(value).__name__}",
                           path="baseline")
    recipe = stated.recipe
    if recipe.nodes is not None and recipe.nodes != opts.nodes:
        raise ProblemError(f"the recipe runs on {recipe.nodes} nodes ({recipe.nodes * cluster.gpus_per_node} GPUs), "
                           f"the plan on {opts.nodes} ({opts.nodes * cluster.gpus_per_node} GPUs): compare plans of "
                           f"one job", path=recipe.where("nodes"))
    if recipe.gbs is not None and recipe.gbs != opts.global_batch:
        raise ProblemError(f"the recipe's global batch is {recipe.gbs}, the plan's {opts.global_batch}: compare "
                           f"plans of one job", path=recipe.where("gbs"))
    wanted = "fp8" if recipe.precision == "fp8" or recipe.fp8_recipe is not None else recipe.precision
    if wanted is not None and wanted != costs.precision:
        raise ProblemError(f"the recipe trains in {wanted}, the plan in {costs.precision}: plan with --precision "
                           f"{wanted} (and its --fp8-recipe) to compare", path=recipe.where("precision"))
    if recipe.gbs is None:
        recipe = replace(recipe, gbs=opts.global_batch)
    return replace(stated, recipe=recipe)


def estimate_baseline(stated: StatedRecipe, spec: ModelSpec, cluster: ClusterSpec, opts: PlanOptions) -> RecipeBaseline:
    """The recipe estimated on the plan's model, cluster, nodes and cost options, with its replay."""
    given = opts.options
    options = given.to_dict() if isinstance(given, CostOptions) else dict(given or {})
    est = estimate(spec, cluster, stated.recipe, nodes=opts.nodes, options=options, objective=opts.objective)
    sim = None
    if opts.simulate and est.problem is not None and est.plan is not None and est.evaluation is not None and est.fits:
        sim = simulate_plan(est.problem, est.plan, est.evaluation)
    return RecipeBaseline(stated.name, recipe_layout_text(est), est, stated.source, sim=sim)


def with_recipe_axes(costs: CostOptions, recipe: Recipe, gpus_per_node: int) -> CostOptions:
    """``costs`` widened so the plan's problem offers the recipe's keys: its cp, ep and etp degrees, its knobs.

    ep joins ``ep_degrees`` (the builder's default, powers of two up to a
    node, when none is set), etp ``etp_degrees``, cp ``cp_degrees`` with
    ``cp_min_tokens`` 1 (the recipe states cp whatever the sequence); the
    recipe's knob variant joins ``variants`` when they are a list (``all``
    offers every ZeRO stage and recompute setting the cost model prices).
    """
    axes = costs.axes
    if recipe.ep > 1:
        default = tuple(1 << i for i in range(1, gpus_per_node.bit_length()) if 1 << i <= gpus_per_node)
        axes = replace(axes, ep_degrees=tuple(sorted(set(axes.ep_degrees or default) | {recipe.ep})),
                       etp_degrees=tuple(sorted(set(axes.etp_degrees or (1,)) | {1, recipe.expert_tp})))
    if recipe.cp > 1:
        axes = replace(axes, cp_degrees=tuple(sorted(set(axes.cp_degrees or (1,)) | {1, recipe.cp})), cp_min_tokens=1)
    name, variants = recipe.knobs.name, costs.variants
    if name and variants not in (("all",), ("none",)) and name not in variants:
        variants = (*variants, name)
    return replace(costs, axes=axes, variants=variants)


def recipe_solve(base: RecipeBaseline, method: str, objective: str, solve_seconds: float) -> KnobSolve | None:
    """The recipe's plan as a kept candidate (:class:`~.records.KnobSolve`); None when it does not fit."""
    est = base.estimate
    if not est.fits or est.problem is None or est.plan is None or est.evaluation is None:
        return None
    iteration, source = iteration_of(base.sim, est.evaluation)
    result = SolveResult(status="feasible", method=method, objective=objective, value=est.evaluation.value,
                         solve_seconds=solve_seconds, plan=est.plan, evaluation=est.evaluation)
    return KnobSolve(est.problem, result, base.sim, iteration, source)


def keep_faster(best: KnobSolve | None, base: RecipeBaseline, method: str, objective: str,
                admits: Any = None) -> tuple[KnobSolve | None, str | None]:
    """``best``, or the recipe's plan when it fits and is faster (simulated); the message saying so.

    ``admits(problem, plan)`` -- the target's reasons not to run a plan -- keeps
    out a recipe plan the target does not run.
    """
    found = recipe_solve(base, method, objective, best.result.solve_seconds if best is not None else 0.0)
    if found is None or found.result.plan is None:
        return best, None
    if admits is not None and admits(found.problem, found.result.plan):
        return best, None
    if best is not None and not found.iteration_ms < best.iteration_ms * (1 - _FASTER):
        return best, None
    what = "no plan" if best is None else f"the {method} plan ({best.iteration_ms:.6g} ms)"
    return found, (f"{what} is not faster than {base.name} ({found.iteration_ms:.6g} ms simulated): kept the "
                   f"recipe's plan")
