"""From a model preset to a plan: the Megatron-style baseline, the solve, throughput.

:func:`plan_model` builds the problem with :func:`partitioner.costs.build_problem`,
builds the baseline a Megatron-LM / torchtitan user gets by default
(:func:`megatron_baseline`), solves with the chosen method warm-started
from it, and reports iteration time, tokens per second and MFU. It never
reports a plan worse than the baseline: if the method returns a worse plan
(a time-limited heuristic), the baseline plan is kept and the message says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from .costs import CostOptions, build_problem
from .plan import Evaluation, Plan, PlanError, SolveResult, Stage, evaluate
from .presets import ClusterSpec, ModelSpec, load_cluster, load_model
from .problem import OBJECTIVES, Problem, ProblemError
from .solvers import SolverError, solve

__all__ = [
    "BASELINE_METHOD",
    "ModelPlan",
    "megatron_baseline",
    "plan_model",
    "throughput",
    "simulate_plan",
    "layer_roles",
    "microbatch_candidates",
]

BASELINE_METHOD = "megatron-uniform"


@dataclass(frozen=True)
class ModelPlan(SolveResult):
    """A :class:`SolveResult` that also keeps the problem it was solved on (not in the JSON)."""

    problem: Problem | None = field(default=None, compare=False, repr=False)


def layer_roles(problem: Problem) -> list[str]:
    """The role of each layer: from ``meta.layers`` when the cost model built the
    problem, else guessed from the module label (vision / projector / action / decoder)."""
    hints = problem.meta.get("layers") if problem.meta else None
    if hints and len(hints) == problem.num_layers:
        return [str(h.get("role", "decoder")) for h in hints]
    roles = []
    for layer in problem.layers:
        label = f"{layer.module} {layer.name}".lower()
        if "vision" in label or "vit" in label:
            roles.append("vision")
        elif "projector" in label:
            roles.append("projector")
        elif "action" in label:
            roles.append("action")
        else:
            roles.append("decoder")
    return roles


# --------------------------------------------------------------------------- baseline


def _even_counts(n: int, parts: int) -> list[int] | None:
    if parts > n:
        return None
    base, extra = divmod(n, parts)
    # Megatron needs num_layers % pp == 0; when it is not, the extra layers go to the last stages
    return [base + (1 if p >= parts - extra else 0) for p in range(parts)]


def _uniform_cuts(roles: Sequence[str], parts: int) -> list[tuple[int, int]] | None:
    decoders = [i for i, r in enumerate(roles) if r == "decoder"]
    L = len(roles)
    if not decoders:  # no language model: split every layer evenly
        counts = _even_counts(L, parts)
        if counts is None:
            return None
        cuts, start = [], 0
        for c in counts:
            cuts.append((start, start + c - 1))
            start += c
        return cuts
    counts = _even_counts(len(decoders), parts)
    if counts is None:
        return None
    cuts, k = [], 0
    for p, c in enumerate(counts):
        first = 0 if p == 0 else decoders[k]
        k += c
        last = L - 1 if p == parts - 1 else decoders[k - 1]
        cuts.append((first, last))
    return cuts


def megatron_baseline(problem: Problem, objective: str | None = None) -> tuple[Plan, Evaluation] | None:
    """The best plan of the shape Megatron-LM / torchtitan give by default.

    The vision encoder and projector (and the embedding) sit on stage 0, the
    loss or action head on the last stage, the decoder layers are split
    evenly over P stages (Megatron's ``num_layers / pp``; when P does not
    divide them, the last stages take one more), and every stage has the
    same size and the same layout (dp, tp), devices in order. Among the
    stage counts and layouts that fit in memory, the one with the best
    objective is returned; None when none fits.
    """
    objective = objective or problem.objective
    roles = layer_roles(problem)
    N = problem.num_devices
    allowed = problem.cluster.allowed_sizes()
    n_dec = sum(r == "decoder" for r in roles) or problem.num_layers
    best: tuple[float, Plan, Evaluation] | None = None
    for P in range(problem.stages.min, problem.stages.max + 1):
        if N % P or N // P not in allowed or P > n_dec:
            continue
        d = N // P
        cuts = _uniform_cuts(roles, P)
        if cuts is None:
            continue
        tp = 1
        while tp <= min(d, problem.cluster.gpus_per_node):
            if d % tp == 0:
                plan = Plan(tuple(Stage(a, b, d, d // tp, tp) for a, b in cuts)).with_device_ids()
                try:
                    ev = evaluate(problem, plan, objective)
                except PlanError:
                    ev = None
                if ev is not None and (best is None or ev.value < best[0]):
                    best = (ev.value, plan, ev)
            tp *= 2
    return None if best is None else (best[1], best[2])


# --------------------------------------------------------------------------- simulation and throughput


def simulate_plan(problem: Problem, plan: Plan, ev: Evaluation | None = None) -> dict[str, Any] | None:
    """1F1B replay of ``plan`` (``partitioner.simulate``), or None when the simulator is not installed."""
    try:
        from .simulate import replay_check  # type: ignore[attr-defined]
    except ImportError:
        return None
    ev = ev or evaluate(problem, plan)
    report = replay_check(problem, plan, ev)
    return dict(report) if isinstance(report, Mapping) else {"report": report}


def throughput(problem: Problem, ev: Evaluation, iteration_ms: float | None = None) -> dict[str, float]:
    """``{"iteration_ms", "tokens_per_s", "mfu"}`` of a plan on a cost-model problem.

    ``iteration_ms`` defaults to the 1F1B estimate ``sum t_p + (m - 1) max t_p``;
    MFU = model FLOPs per iteration / (iteration time x GPUs x peak) [PaLM, App. B].
    """
    meta = problem.meta or {}
    it = ev.iteration_ms if iteration_ms is None else iteration_ms
    seconds = it / 1e3
    tokens = float(meta.get("global_batch", 0)) * float(meta.get("llm_tokens_per_sample", 0))
    flops = float(meta.get("model_flops_per_iteration", 0.0))
    peak = float(meta.get("peak_flops_per_gpu", 0.0))
    mfu = flops / (seconds * problem.num_devices * peak) if seconds > 0 and peak > 0 else float("nan")
    return {"iteration_ms": it, "tokens_per_s": tokens / seconds if seconds > 0 else float("nan"), "mfu": mfu}


def _iteration_ms(sim: Mapping[str, Any] | None, ev: Evaluation) -> tuple[float, str]:
    if sim and isinstance(sim.get("makespan_ms"), (int, float)) and math.isfinite(sim["makespan_ms"]):
        return float(sim["makespan_ms"]), "simulator"
    return ev.iteration_ms, "estimate"


# --------------------------------------------------------------------------- plan_model


def microbatch_candidates(global_batch: int, limit: int | None = None) -> list[int]:
    """Microbatch counts tried by ``microbatches="auto"``: the divisors of the global batch."""
    divs = [m for m in range(1, global_batch + 1) if global_batch % m == 0]
    return [m for m in divs if limit is None or m <= limit]


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
    schedules: bool = True,
) -> "ModelPlan":
    """Plan the training of a model preset on a cluster preset.

    Parameters
    ----------
    model, cluster : str or spec
        Preset names, YAML paths or spec objects.
    nodes, global_batch : int
    microbatches : int or "auto"
        ``auto`` screens every divisor m of the global batch with the
        baseline and the ``greedy`` heuristic (both fast), solves the
        ``auto_solves`` most promising m with ``method``, and keeps the plan
        with the shortest iteration.
    method : str
        A registered solver (``dp`` by default; ``greedy``, ``cpsat``, ...).
    objective : {"iteration", "bottleneck"}
    time_limit : float, optional
        Seconds per solve.
    options : mapping or CostOptions, optional
        Cost-model options.
    profile : path or records, optional
        Profiled per-layer times.
    simulate : bool
        Replay the plans in the 1F1B simulator (iteration time = makespan).
    auto_solves : int
        How many screened microbatch counts ``auto`` solves with ``method``.
    max_stages : int, optional
        Upper bound on the pipeline depth (default: the format's min(layers, GPUs)).
    schedules : bool
        With ``simulate``, also replay the kept plan under every schedule and
        the uniform split under interleaved 1F1B (``extra["schedules"]``,
        :func:`partitioner.schedule_search.compare_schedules`).

    Returns
    -------
    ModelPlan
        Result format v1 plus ``baseline`` (``method``, ``value``, ``plan``,
        ``microbatches``, ``iteration_ms``), ``throughput`` (``iteration_ms``,
        ``tokens_per_s``, ``mfu``), ``microbatches``, ``speedup`` and
        ``export_hints``; ``result.problem`` is the problem of the kept plan.
    """
    if objective not in OBJECTIVES:
        raise SolverError(f"unknown objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    spec, cl = load_model(model), load_cluster(cluster)
    if isinstance(global_batch, bool) or not isinstance(global_batch, int) or global_batch < 1:
        raise ProblemError(f"must be a positive integer, got {global_batch!r}", path="global_batch")
    if microbatches == "auto":
        candidates = microbatch_candidates(global_batch)
    elif isinstance(microbatches, int) and not isinstance(microbatches, bool):
        candidates = [microbatches]
    else:
        raise ProblemError(f"must be a positive integer or 'auto', got {microbatches!r}", path="microbatches")

    def build(m: int) -> Problem:
        return build_problem(spec, cl, nodes=nodes, global_batch=global_batch, microbatches=m, options=options,
                             objective=objective, profile=profile, max_stages=max_stages)

    # screen: every candidate m gets its baseline (and, for auto, a greedy plan)
    screened: list[dict[str, Any]] = []
    skipped: list[str] = []
    for m in candidates:
        try:
            problem = build(m)
        except ProblemError as err:
            if len(candidates) == 1:
                raise
            skipped.append(f"m={m}: {err.reason}")
            continue
        base = megatron_baseline(problem, objective)
        entry: dict[str, Any] = {"m": m, "problem": problem, "base": base, "screen": math.inf}
        if base is not None:
            entry["base_sim"] = simulate_plan(problem, base[0], base[1]) if simulate else None
            entry["base_iteration_ms"] = _iteration_ms(entry["base_sim"], base[1])[0]
            entry["screen"] = entry["base_iteration_ms"]
        if len(candidates) > 1 and method != "greedy":
            quick = solve(problem, "greedy", objective=objective)
            if quick.plan is not None:
                entry["screen"] = min(entry["screen"], quick.evaluation.iteration_ms)
        screened.append(entry)
    if len(candidates) > 1:
        order = sorted((e for e in screened if math.isfinite(e["screen"])), key=lambda e: e["screen"])
        if not order:  # neither the baseline nor greedy fits anywhere: let the method try the smallest microbatches
            order = sorted(screened, key=lambda e: -e["m"])
        chosen = order[: max(1, auto_solves)] if method != "greedy" else order
    else:
        chosen = screened

    best: dict[str, Any] | None = None
    last: SolveResult | None = None
    for entry in chosen:
        result = solve(entry["problem"], method, objective=objective, time_limit=time_limit, seed=seed,
                       warm_start=entry["base"][0] if entry["base"] else None)
        last = result
        done = _finish_candidate(entry["problem"], result, entry["base"], simulate)
        entry.update(solved=True, value=done["result"].value, iteration_ms=done["iteration_ms"])
        if done["result"].plan is not None and (best is None or done["iteration_ms"] < best["iteration_ms"]):
            best = done
    tried = [
        {"microbatches": e["m"], "screen_ms": _finite(e["screen"]), "solved": bool(e.get("solved")),
         "value": e.get("value"), "iteration_ms": _finite(e.get("iteration_ms", math.inf))}
        for e in screened
    ]
    with_base = [e for e in screened if e["base"] is not None]
    best_base = min(with_base, key=lambda e: e["base_iteration_ms"]) if with_base else None
    if best is None:
        reason = (last.message if last is not None and last.message else "") or "; ".join(skipped[:3]) or "no plan fits"
        return ModelPlan(
            status="infeasible",
            method=method,
            objective=objective,
            message=f"no plan found: {reason}",
            extra={"microbatches_tried": tried, "baseline": {"method": BASELINE_METHOD, "value": None, "plan": None}},
        )
    result = _assemble(best, best_base, tried, method, spec, cl)
    if schedules and simulate and result.plan is not None:
        from .schedule_search import compare_schedules

        # the baseline at the kept plan's m (cost entries, and so layouts, depend on m)
        same_m = next((e["base"] for e in screened if e["m"] == result.problem.microbatches and e["base"]), None)
        base_plan = same_m[0] if same_m is not None else None
        result = replace(result, extra={**result.extra, "schedules": compare_schedules(result.problem, result.plan, baseline=base_plan)})
    return result


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


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


def _assemble(best: dict[str, Any], best_base: dict[str, Any] | None, tried: list, method: str,
              spec: ModelSpec, cl: ClusterSpec) -> SolveResult:
    messages: list[str] = []
    if best_base is not None and best_base["base_iteration_ms"] < best["iteration_ms"] * (1 - 1e-9):
        # the baseline at another microbatch count is faster than the best plan found: keep it
        b_plan, b_ev = best_base["base"]
        r = best["result"]
        messages.append(
            f"{r.method} at m={best['problem'].microbatches} ({best['iteration_ms']:.6g} ms) is slower than the "
            f"{BASELINE_METHOD} baseline at m={best_base['problem'].microbatches}: kept the baseline plan"
        )
        best = {
            "problem": best_base["problem"],
            "result": SolveResult(status="feasible", method=r.method, objective=r.objective, value=b_ev.value,
                                  solve_seconds=r.solve_seconds, plan=b_plan, evaluation=b_ev),
            "sim": best_base.get("base_sim"),
            "iteration_ms": best_base["base_iteration_ms"],
            "iteration_source": _iteration_ms(best_base.get("base_sim"), b_ev)[1],
        }
    problem: Problem = best["problem"]
    result: SolveResult = best["result"]
    extra = dict(result.extra)
    if best["sim"] is not None:
        extra["simulation"] = best["sim"]
    tput = throughput(problem, result.evaluation, best["iteration_ms"])
    tput["iteration_source"] = best["iteration_source"]
    extra["throughput"] = tput
    if result.message:
        messages.insert(0, result.message)
    if best_base is not None:
        b_plan, b_ev = best_base["base"]
        b_problem = best_base["problem"]
        b_tput = throughput(b_problem, b_ev, best_base["base_iteration_ms"])
        extra["baseline"] = {
            "method": BASELINE_METHOD,
            "value": b_ev.value,
            "plan": b_plan.to_dict(b_ev),
            "microbatches": b_problem.microbatches,
            "iteration_ms": b_tput["iteration_ms"],
            "throughput": b_tput,
        }
        if best_base["base_sim"] is not None:
            extra["baseline"]["simulation"] = best_base["base_sim"]
        extra["speedup"] = b_tput["iteration_ms"] / tput["iteration_ms"] if tput["iteration_ms"] > 0 else None
    else:
        extra["baseline"] = {"method": BASELINE_METHOD, "value": None, "plan": None, "message": "no Megatron-style uniform plan fits in memory"}
        extra["speedup"] = None
    extra.update(
        model=spec.name,
        cluster=cl.name,
        nodes=problem.cluster.nodes,
        global_batch=problem.meta.get("global_batch"),
        microbatches=problem.microbatches,
        microbatches_tried=tried,
        export_hints={"model": spec.name, "layers": [dict(h) for h in problem.meta.get("layers", [])]},
    )
    return ModelPlan(
        status=result.status,
        method=result.method,
        objective=result.objective,
        value=result.value,
        bound=result.bound,
        solve_seconds=result.solve_seconds,
        message="; ".join(messages),
        plan=result.plan,
        evaluation=result.evaluation,
        extra=extra,
        problem=problem,
    )
