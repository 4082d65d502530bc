"""From a model preset to a plan: screening the microbatch counts, the solves, the schedule choice.

:func:`plan_model` builds the problem of every microbatch count with one
:class:`partitioner.costs.ProblemBuilder` (:func:`~partitioner.costs.build_problem`'s
problems; with the memory-knob variants of format v2 unless the options restrict
them) and the two baselines of :mod:`.baselines`. It solves with the chosen
method once per uniform knob setting (:func:`.knobs.uniform_projection`),
then lets each stage segment pick its own knobs for the solver's cuts and
meshes (:func:`.knobs.refine_knobs`), and keeps the plan with the shortest
iteration. It reports iteration time, tokens per second, MFU and the
speed-up over the *best* baseline that fits (named), and never reports a
plan slower than that baseline: it keeps the baseline plan instead and says so.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import replace
from typing import Any, Mapping

from ..costs import CostOptions, ProblemBuilder
from ..core.limits import MAX_NODES
from ..plan import Evaluation, Plan, SolveResult
from ..presets import ClusterSpec, ModelSpec, load_cluster, load_model
from ..problem import OBJECTIVES, Problem, ProblemError
from ..solvers import SolverError, solve
from .baselines import BASELINE_METHOD, BASELINES, FSDP_METHOD, StageSums, fsdp_baseline, megatron_baseline
from .knobs import _projections, refine_knobs, variant_at
from .schedule_choice import choose_schedule, schedule_keys
from .results import _NO_FIT, ModelPlan, _assemble, _finite, _iteration_ms, simulate_plan

__all__ = ["plan_model", "plan_options", "microbatch_candidates", "RESOLVE_MIN_SECONDS"]

# --------------------------------------------------------------------------- plan_model


def microbatch_candidates(global_batch: int, limit: int | None = None) -> list[int]:
    """Microbatch counts tried by ``microbatches="auto"``: the divisors of the global batch."""
    divs = [m for m in range(1, global_batch + 1) if global_batch % m == 0]
    return [m for m in divs if limit is None or m <= limit]


def plan_options(options: Mapping[str, Any] | CostOptions | None) -> CostOptions:
    """The cost options ``plan_model`` uses: every memory-knob variant unless the options fix or restrict them."""
    if isinstance(options, CostOptions):
        return options
    given = dict(options or {})
    if not {"variants", "recompute", "zero1"} & set(given):
        given["variants"] = ("all",)
    return CostOptions.from_mapping(given)


def _check_count(value: Any, name: str, maximum: int) -> None:
    """An argument that must be an integer in 1..maximum (the API door; ranges in partitioner.core.limits)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ProblemError(f"must be an integer in 1..{maximum}, got {value!r}", path=name)


def plan_model(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    *,
    nodes: int,
    global_batch: int,
    microbatches: int | str = "auto",
    method: str = "dp",
    objective: str = "iteration",
    time_limit: float | None = None,
    options: Mapping[str, Any] | CostOptions | None = None,
    profile: Any = None,
    seed: int = 0,
    simulate: bool = True,
    auto_solves: int = 2,
    max_stages: int | None = None,
    knob_solves: str = "fast",
    schedules: bool = True,
    schedule: str = "auto",
    virtual_stages: int | None = None,
) -> "ModelPlan":
    """Plan the training of a model preset on a cluster preset.

    Parameters
    ----------
    model, cluster : str or spec
        Preset names, YAML paths or spec objects.
    nodes, global_batch : int
    microbatches : int or "auto"
        ``auto`` screens every divisor m of the global batch with the
        baselines and the ``greedy`` heuristic (both fast), solves the
        ``auto_solves`` most promising m with ``method``, and keeps the plan
        with the shortest iteration.
    method : str
        A registered solver (``dp`` by default; ``greedy``, ``cpsat``, ...).
    objective : {"iteration", "bottleneck"}
    time_limit : float, optional
        Seconds per solve. Without one, a re-solve under another schedule than
        1F1B is limited to the time the 1F1B solves took (at least
        ``RESOLVE_MIN_SECONDS``); cut short, it answers its best plan.
    options : mapping or CostOptions, optional
        Cost-model options (:func:`plan_options`: every memory-knob variant
        unless ``variants``, ``recompute`` or ``zero1`` is given).
    profile : path or records, optional
        Profiled per-layer times.
    simulate : bool
        Replay the plans in the 1F1B simulator (iteration time = makespan).
    auto_solves : int
        How many screened microbatch counts ``auto`` solves with ``method``.
    max_stages : int, optional
        Upper bound on the pipeline depth (default: the format's min(layers, GPUs)).
    knob_solves : {"fast", "all"}
        Which uniform knob settings ``method`` solves before the per-segment
        choice (:func:`refine_knobs`): ``fast`` the first with a plan in
        :data:`ESCALATION` order (ZeRO-1, which costs no time and only saves
        memory, then recompute, then ZeRO-3); ``all`` every setting, keeping
        the best (slower, and better when a setting that adds time allows
        better cuts).
    schedules : bool
        With ``simulate``, try every pipeline schedule and keep the plan with
        the least simulated iteration (:func:`partitioner.planning.schedule_choice.choose_schedule`:
        the kept plan replayed under 1F1B, ZB-H1 and GPipe, the method
        re-run under the schedules it models, the Megatron-style baselines
        under every schedule, interleaved 1F1B with v = 2, 3, 4 included);
        ``extra["schedules"]`` reports every candidate. False: 1F1B only.
    schedule : {"auto", "1f1b", "zb-h1", "gpipe", "interleaved"}
        ``auto`` tries every schedule; any other value pins it (only its
        candidates are tried, also without ``schedules``).
    virtual_stages : int, optional
        With ``schedule="interleaved"``, pins v (default: 2, 3 and 4 tried).

    Returns
    -------
    ModelPlan
        The result format plus ``baseline`` (the best baseline that fits:
        ``method`` names it, ``value``, ``plan``, ``microbatches``,
        ``iteration_ms``), ``baselines`` (each baseline's best, or why none
        fits), ``knobs`` (per stage: its segments' variants),
        ``throughput`` (``iteration_ms``, ``tokens_per_s``, ``mfu``),
        ``microbatches``, ``speedup`` (over the best baseline) and
        ``export_hints``, ``schedule`` (``{"schedule", "virtual_stages"}`` of
        the kept plan) and ``schedules`` (every schedule's candidates);
        ``result.problem`` is the problem of the kept plan and carries its
        schedule, so ``evaluate``, ``simulate`` and the exports agree with it.
    """
    if objective not in OBJECTIVES:
        raise SolverError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    if knob_solves not in ("fast", "all"):
        raise SolverError(f"knob_solves must be fast or all, got {knob_solves!r}")

    schedule_keys(schedule, virtual_stages)  # bad input fails before any work
    spec, cl = load_model(model), load_cluster(cluster)
    _check_count(nodes, "nodes", MAX_NODES)
    opts = plan_options(options)
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ProblemError(f"must be a positive integer, got {global_batch!r}", path="global_batch")
    if microbatches == "auto":
        candidates = microbatch_candidates(global_batch)
    elif isinstance(microbatches, int) and not isinstance(microbatches, bool):
        candidates = [microbatches]
    else:
        raise ProblemError(f"must be a positive integer or 'auto', got {microbatches!r}", path="microbatches")

    builders: dict[CostOptions, ProblemBuilder] = {}  # one per option set: what every m shares is worked out once

    def build(m: int, o: CostOptions) -> Problem:
        if o not in builders:
            builders[o] = ProblemBuilder(spec, cl, nodes=nodes, options=o, objective=objective, profile=profile,
                                         max_stages=max_stages)
        return builders[o].build(global_batch, m)

    # the baselines always see every knob (a user restricting the plan's knobs does not restrict FSDP's)
    base_opts = replace(opts, variants=("all",))
    screened: list[dict[str, Any]] = []
    skipped: list[str] = []
    for m in candidates:
        try:
            problem = build(m, opts)
            base_problem = problem if opts.variants == ("all",) else build(m, base_opts)
        except ProblemError as err:
            if len(candidates) == 1:
                raise
            skipped.append(f"m={m}: {err.reason}")
            continue
        # stage_sums: the baselines' floors on base_problem, kept for its other schedules (choose_schedule)
        entry: dict[str, Any] = {"m": m, "problem": problem, "base_problem": base_problem, "screen": math.inf, "bases": {},
                                 "stage_sums": StageSums()}
        for name, found in ((BASELINE_METHOD, megatron_baseline(base_problem, objective, sums=entry["stage_sums"])),
                            (FSDP_METHOD, fsdp_baseline(base_problem, objective))):
            if found is None:
                continue
            sim = simulate_plan(base_problem, found[0], found[1]) if simulate else None
            it = _iteration_ms(sim, found[1])[0]
            entry["bases"][name] = {"plan": found[0], "ev": found[1], "sim": sim, "iteration_ms": it}
            entry["screen"] = min(entry["screen"], it)
        if len(candidates) > 1 and method != "greedy":
            for variant, proj in itertools.islice(_projections(problem, "escalate"), 1):
                quick = solve(proj, "greedy", objective=objective)
                if quick.plan is not None:
                    entry["screen"] = min(entry["screen"], quick.evaluation.iteration_ms)
        screened.append(entry)
    if len(candidates) > 1:
        order = sorted((e for e in screened if math.isfinite(e["screen"])), key=lambda e: e["screen"])
        if not order:  # nothing fits anywhere: let the method try the smallest microbatches
            order = sorted(screened, key=lambda e: -e["m"])
        chosen = order[: max(1, auto_solves)] if method != "greedy" else order
    else:
        chosen = screened

    best: dict[str, Any] | None = None
    last: SolveResult | None = None
    began = time.perf_counter()
    for entry in chosen:
        done = _solve_with_knobs(entry, method, objective, time_limit, seed, simulate, knob_solves)
        last = done["last"]
        entry.update(solved=True, value=done["result"].value if done["result"] else None, iteration_ms=done["iteration_ms"])
        if done["result"] is not None and done["result"].plan is not None and (best is None or done["iteration_ms"] < best["iteration_ms"]):
            best = done
    tried = [
        {"microbatches": e["m"], "screen_ms": _finite(e["screen"]), "solved": bool(e.get("solved")),
         "value": e.get("value"), "iteration_ms": _finite(e.get("iteration_ms", math.inf))}
        for e in screened
    ]
    bests = {}
    for name in BASELINES:
        with_base = [e for e in screened if name in e["bases"]]
        if with_base:
            e = min(with_base, key=lambda e: e["bases"][name]["iteration_ms"])
            bests[name] = {"entry": e, **e["bases"][name]}
    if best is None:
        reason = (last.message if last is not None and last.message else "") or "; ".join(skipped[:3]) or "no plan fits"
        return ModelPlan(
            status="infeasible",
            method=method,
            objective=objective,
            message=f"no plan found: {reason}",
            extra={"microbatches_tried": tried, "baseline": {"method": None, "value": None, "plan": None},
                   "baselines": {name: {"value": None, "plan": None, "message": _NO_FIT[name]} for name in BASELINES}},
        )
    report = None
    if best["result"].plan is not None and ((schedules and simulate) or schedule != "auto"):

        # a re-solve under another schedule gets the user's limit, or as long as the 1F1B solves took
        # (at least RESOLVE_MIN_SECONDS): an exact method cut short answers its best plan, and the
        # schedules are compared by simulation anyway
        budget = time_limit if time_limit is not None else max(RESOLVE_MIN_SECONDS, time.perf_counter() - began)

        def resolve(entry: dict[str, Any]) -> dict[str, Any]:
            return _solve_with_knobs(entry, method, objective, budget, seed, simulate, knob_solves)

        chosen, schedule_bests, report = choose_schedule(
            best, screened, method=method, objective=objective, resolve=resolve,
            keys=schedule_keys(schedule, virtual_stages), simulate=simulate, pinned=schedule != "auto")
        if report["chosen"] is None:  # a pinned schedule nothing runs under: say so, never fall back to another
            why = "; ".join(dict.fromkeys(f"{r['plan_source']} under {r['schedule']}: {r['reason']}" for r in report["rows"]))
            return ModelPlan(status="infeasible", method=method, objective=objective,
                             message=f"no plan runs under the pinned schedule {schedule}: {why or 'no candidate'}",
                             extra={"microbatches_tried": tried, "schedules": report})
        best, bests = chosen, schedule_bests
    result = _assemble(best, bests, tried, method, spec, cl)
    training = result.problem.training
    extra = {**result.extra, "schedule": {"schedule": training.schedule, "virtual_stages": training.virtual_stages}}
    if report is not None:
        extra["schedules"] = report
    return replace(result, extra=extra)


# Least time limit (seconds) of a re-solve under another schedule when the user set none (see plan_model):
# the re-solves are candidates the plans are then simulated against, and on the nine presets of the issue-13
# benchmark a 2 s floor keeps exactly the plans a 10 s one kept (DESIGN.md, "How plan picks the schedule").
RESOLVE_MIN_SECONDS = 2.0

def _solve_with_knobs(entry: dict[str, Any], method: str, objective: str, time_limit: float | None, seed: int,
                      simulate: bool, knob_solves: str = "fast") -> dict[str, Any]:
    """Solve every uniform knob setting of the entry's problem, refine each plan's knobs per segment, keep the best."""
    problem: Problem = entry["problem"]
    megatron = entry["bases"].get(BASELINE_METHOD)
    best: tuple[float, SolveResult] | None = None
    last: SolveResult | None = None
    messages: list[str] = []
    for variant, proj in _projections(problem, "all" if knob_solves == "all" else "escalate"):
        if knob_solves == "fast" and best is not None:
            break  # the first setting with a plan; its knobs are then refined per segment
        # a warm start: the plan this setting got under another schedule (a re-solve), else the Megatron baseline's
        warm = entry.get("warm", {}).get(variant)
        if warm is None and megatron is not None and all(s.variant == variant_at(problem, s.dp, variant)
                                                         for s in megatron["plan"].stages):
            warm = Plan(tuple(replace(s, variant="") for s in megatron["plan"].stages))
        result = solve(proj, method, objective=objective, time_limit=time_limit, seed=seed, warm_start=warm)
        last = result
        if result.plan is None:
            if result.message:
                messages.append(f"{variant or 'plain'}: {result.message}")
            continue
        entry.setdefault("solved_plans", {})[variant] = result.plan  # a re-solve's warm start
        lifted = Plan(tuple(replace(s, variant=variant_at(problem, s.dp, variant), configs=None) for s in result.plan.stages))
        refined = refine_knobs(problem, lifted, objective)
        if refined is None:
            continue
        value = refined[1].value
        if best is None or value < best[0]:
            best = (value, replace(result, value=value, plan=refined[0], evaluation=refined[1]))
    kept = _fastest_baseline(entry)
    if best is None and kept is None:
        fail = SolveResult(status="infeasible" if last is None or last.status != "error" else "error", method=method,
                           objective=objective, message="; ".join(messages[:3]) or "no plan fits")
        return {"problem": problem, "result": fail, "sim": None, "iteration_ms": math.inf, "iteration_source": "none",
                "last": fail}
    if kept is not None and (best is None or best[0] > kept[1]["ev"].value * (1 + 1e-9)):
        # never worse than a baseline: keep the faster baseline's plan (on the problem it was built on)
        name, b = kept
        r = last if best is None else best[1]
        why = "found no plan" if best is None else f"returned {best[0]:.6g} ms > {name} baseline {b['ev'].value:.6g} ms"
        message = "; ".join(filter(None, [*messages[:3], f"{method} {why}: kept the {name} baseline plan"]))
        result = SolveResult(status="feasible", method=method, objective=objective, value=b["ev"].value,
                             solve_seconds=r.solve_seconds if r is not None else 0.0, message=message, plan=b["plan"],
                             evaluation=b["ev"])
        it, src = _iteration_ms(b["sim"], b["ev"])
        return {"problem": entry["base_problem"], "result": result, "sim": b["sim"], "iteration_ms": it,
                "iteration_source": src, "last": last}
    result = best[1]
    if problem.version >= 2 and problem.variants:
        note = f"{method} solved uniform knob settings (knob_solves={knob_solves}); knobs then chosen per segment"
        result = replace(result, status="feasible" if result.status == "optimal" else result.status, bound=None,
                         message="; ".join(filter(None, [result.message, note])))
    done = _finish_candidate(problem, result, None, simulate)
    done["last"] = last
    return done


def _fastest_baseline(entry: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(name, baseline) of the entry's baseline with the best objective value, or None."""
    if not entry["bases"]:
        return None
    name = min(entry["bases"], key=lambda n: entry["bases"][n]["ev"].value)
    return name, entry["bases"][name]


def _finish_candidate(problem: Problem, result: SolveResult, base: tuple[Plan, Evaluation] | None, simulate: bool) -> dict[str, Any]:
    """Apply the never-worse-than-baseline rule and attach simulations."""
    notes = []
    if base is not None:
        b_plan, b_ev = base
        worse = result.plan is None or result.value is None or result.value > b_ev.value * (1 + 1e-9)
        if worse:
            why = "found no plan" if result.plan is None else f"returned {result.value:.6g} ms > baseline {b_ev.value:.6g} ms"
            notes.append(f"{result.method} {why}: kept the {BASELINE_METHOD} baseline plan")
            result = SolveResult(
                status="feasible",
                method=result.method,
                objective=result.objective,
                value=b_ev.value,
                bound=result.bound,
                solve_seconds=result.solve_seconds,
                message="; ".join(filter(None, [result.message, *notes])),
                plan=b_plan,
                evaluation=b_ev,
                extra=dict(result.extra),
            )
    sim = simulate_plan(problem, result.plan, result.evaluation) if (simulate and result.plan is not None) else None
    it, src = _iteration_ms(sim, result.evaluation) if result.evaluation is not None else (math.inf, "none")
    return {"problem": problem, "result": result, "sim": sim, "iteration_ms": it, "iteration_source": src}

