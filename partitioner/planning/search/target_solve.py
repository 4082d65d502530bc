"""The method's solves under ``plan --target``: every mesh and knob setting the target runs, cuts where it may.

:func:`solve_for_target` is :func:`~.knob_solve.solve_with_knobs` for a
target (:mod:`~partitioner.planning.targets`): for each uniform knob setting the target allows
(:func:`~.knobs.escalation` order; ``knob_solves="fast"`` stops at the first
with a plan) and each mesh (dp, tp) every layer runs in, the method solves
:func:`~partitioner.planning.targets.rules.single_layout`'s problem -- one config per module, the
layers a cut may not separate merged -- and the best plan, expanded to the
full problem and checked by :func:`~partitioner.plan.evaluate`, is kept. No
per-segment knob choice follows: the target sets one knob for all stages.

The result is ``optimal`` for the target's space (at its m and schedule) only
when every setting and mesh was solved and each solve was proven optimal
or infeasible; its bound is then the least value. Otherwise it is
``feasible``, and its message says why.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...core.deadline import Deadline
from ...plan import PlanError, SolveResult, evaluate
from ...plan.result import Status
from ...problem import Problem
from ...solvers import solve
from ..options import PlanOptions, solver_options
from ..records import KnobSolve, ScreenedCount
from ..results import iteration_of, simulate_plan
from ..targets.rules import FrameworkRules, Mesh, config_of, expand, layer_groups, layouts, settings, single_layout
from .knobs import escalation

__all__ = ["solve_for_target"]


@dataclass
class _Found:
    """The best plan so far, whether every solve so far was proven, and why not."""

    best: SolveResult | None = None
    proven: bool = True
    bound: float = math.inf
    why: list[str] = field(default_factory=list)
    last: SolveResult | None = None
    solves: int = 0

    def unproven(self, why: str) -> None:
        self.proven = False
        if why not in self.why:
            self.why.append(why)


def _solve_mesh(entry: ScreenedCount, rules: FrameworkRules, setting: str, mesh: Mesh, opts: PlanOptions,
                limit: float | None, found: _Found) -> None:
    """Solve the target's problem of one knob setting and mesh; keep its plan if it is the best so far."""
    problem = entry.problem
    configs = config_of(problem, rules, setting, mesh)
    groups = layer_groups(problem, rules)
    proj = single_layout(problem, groups, configs)
    if proj is None:
        return
    result = solve(proj, opts.method, objective=opts.objective, time_limit=limit, seed=opts.seed,
                   options=solver_options(opts))
    found.last, found.solves = result, found.solves + 1
    if result.status == "infeasible":
        return
    if result.status != "optimal":
        found.unproven(f"{opts.method} did not prove its plan of {_describe(mesh)}, knobs "
                       f"{setting or 'plain'} ({result.status}{': ' + result.message if result.message else ''})")
    found.bound = min(found.bound, result.bound if result.bound is not None else -math.inf)
    if result.plan is None:
        return
    plan = expand(result.plan, groups, problem, configs).with_device_ids()
    try:
        ev = evaluate(problem, plan, opts.objective)
    except PlanError as err:  # the merged problem's plans are plans of the full one: a bug if not
        found.unproven(f"internal error: a plan of the target's problem is invalid on the full problem: {err}")
        return
    if found.best is None or ev.value < found.best.value:  # type: ignore[operator]
        found.best = SolveResult(status="feasible", method=opts.method, objective=opts.objective, value=ev.value,
                                 solve_seconds=result.solve_seconds, plan=plan, evaluation=ev, version=problem.version)


def _describe(mesh: Mesh) -> str:
    """``dp 8 x tp 2`` and, when not 1, ``x cp C``, ``ep E``, ``etp F``."""
    dp, tp, cp, ep, etp = mesh
    return f"dp {dp} x tp {tp}" + "".join(f" x {n} {v}" for n, v in (("cp", cp), ("ep", ep), ("etp", etp)) if v != 1)


def _dominates(problem: Problem, a: str, b: str, configs_of) -> bool:
    """Whether uniform setting ``a`` is never worse than ``b``: every layer's entry of ``a`` has at most ``b``'s times and bytes.

    Then any plan in ``b`` is a plan in ``a`` (same cuts and meshes) that
    fits and is as fast, so ``b`` needs no solve of its own (ZeRO-1 over
    ZeRO-0 in the cost model). ``configs_of(setting, dp, tp)`` gives each module's config.
    """
    for mesh in layouts(problem):
        ca, cb = configs_of(a, mesh), configs_of(b, mesh)
        for layer in problem.layers:
            x, y = layer.costs.get(ca[layer.module]), layer.costs.get(cb[layer.module])
            if y is None:
                continue
            if x is None or x.fwd_ms > y.fwd_ms or x.bwd_ms > y.bwd_ms or x.weight_bytes > y.weight_bytes \
                    or x.act_bytes > y.act_bytes or any(u > w for u, w in zip(x.split(), y.split())):
                return False
    return True


def solve_for_target(entry: ScreenedCount, opts: PlanOptions, rules: FrameworkRules, deadline: Deadline | None = None,
                     cap: float | None = None) -> KnobSolve:
    """The method's best plan of ``entry.problem`` among the plans ``rules`` runs (see the module docstring).

    ``entry.problem`` is already restricted to the target's knobs
    (:func:`~partitioner.planning.targets.rules.restrict`). Each solve gets what ``deadline`` leaves, at
    most ``cap`` seconds; when it passes, the settings and meshes left are not
    solved and the deadline says so.
    """
    deadline = deadline or Deadline(None)
    problem, found = entry.problem, _Found()
    meshes = [mesh for mesh in layouts(problem) if rules.runs_mesh(mesh)]
    names = settings(problem, rules, escalation(problem.variants))
    solved: list[str] = []

    def configs_of(setting: str, mesh: Mesh) -> dict:
        return config_of(problem, rules, setting, mesh)

    for i, setting in enumerate(names):
        if any(_dominates(problem, done, setting, configs_of) for done in solved):
            continue  # a solved setting is never worse: this one cannot hold a better plan
        if opts.knob_solves == "fast" and found.best is not None:
            left = [v for v in names[i:] if not any(_dominates(problem, d, v, configs_of) for d in solved)]
            if left:
                found.unproven(f"knob_solves=fast: knob settings {', '.join(v or 'plain' for v in left)} not solved "
                               "(the first setting with a plan is kept; --knob-solves all solves them)")
            break
        solved.append(setting)
        for mesh in meshes:
            limit = deadline.solve_limit(cap)
            if limit is not None and limit <= 0 and found.best is None and not entry.bases and deadline.has_grace:
                # nothing found and no baseline to keep: the run's one grace solve, as plan_model's own solves have
                limit = deadline.grace()
                deadline.cut(f"{opts.method} solves for {rules.name} given only the {limit:g} s grace after the "
                             "deadline", f"m={problem.microbatches}")
            if limit is not None and limit <= 0:
                deadline.cut(f"{opts.method} solves for {rules.name} not started", f"m={problem.microbatches}")
                found.unproven("the time limit left settings or meshes unsolved")
                break
            _solve_mesh(entry, rules, setting, mesh, opts, limit, found)
        else:
            continue
        break
    return _result(entry, opts, rules, found)


def _result(entry: ScreenedCount, opts: PlanOptions, rules: FrameworkRules, found: _Found) -> KnobSolve:
    """The kept plan as a :class:`KnobSolve` (optimal with its bound when every solve was proven), or why there is none."""
    problem = entry.problem
    if found.best is None:
        status: Status = "infeasible" if found.proven and found.last is not None else "error"
        msg = (f"no plan {rules.name} runs fits" if status == "infeasible"
               else "; ".join(found.why[:3]) or f"{opts.method} found no plan {rules.name} runs")
        fail = SolveResult(status=status, method=opts.method, objective=opts.objective, message=msg)
        return KnobSolve(problem, fail, None, math.inf, "none", found.last or fail)
    best = found.best
    space = f"over the plans {rules.name} runs at m={problem.microbatches} under {problem.training.schedule}"
    if found.proven:
        bound = min(found.bound, best.value)  # type: ignore[type-var]
        result = SolveResult(status="optimal", method=opts.method, objective=opts.objective, value=best.value,
                             bound=bound, solve_seconds=best.solve_seconds, plan=best.plan, evaluation=best.evaluation,
                             message=f"optimal {space} (every mesh and knob setting solved)", version=best.version)
    else:
        result = SolveResult(status="feasible", method=opts.method, objective=opts.objective, value=best.value,
                             solve_seconds=best.solve_seconds, plan=best.plan, evaluation=best.evaluation,
                             message=f"feasible {space}: " + "; ".join(found.why[:3]), version=best.version)
    sim = simulate_plan(problem, result.plan, result.evaluation) if opts.simulate and result.plan is not None else None
    it, src = iteration_of(sim, result.evaluation) if result.evaluation is not None else (math.inf, "none")
    return KnobSolve(problem, result, sim, it, src, found.last, {})
