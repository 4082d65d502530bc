"""From a model preset to a plan: the baselines, the solve, the memory knobs, throughput.

:func:`plan_model` builds the problem with :func:`partitioner.costs.build_problem`
(with the memory-knob variants of format v2 unless the options restrict
them) and two baselines an engineer would otherwise run:

* ``megatron-uniform`` (:func:`megatron_baseline`): Megatron-LM / torchtitan's
  default pipeline -- vision and projector on stage 0, decoder layers split
  evenly, one layout (dp, tp) and one knob setting (recompute, ZeRO-0/1)
  for every stage;
* ``fsdp`` (:func:`fsdp_baseline`): no pipeline -- one stage of all N GPUs,
  dp = N, ZeRO-3 (FSDP full shard) with the better recompute choice, what
  OpenVLA and pi0 were trained with.

It solves with the chosen method once per uniform knob setting (the
problem with that variant's entries as plain keys, :func:`uniform_projection`,
so that solvers of format v1 apply), then lets each stage segment pick its
own knobs for the solver's cuts and meshes (:func:`refine_knobs`, exact for
fixed cuts and meshes: stage times and memory are separable), and keeps the
plan with the shortest iteration. It reports iteration time, tokens per
second, MFU and the speed-up over the *best* baseline that fits (named),
and never reports a plan slower than that baseline: it keeps the baseline
plan instead and says so.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from .costs import CostOptions, build_problem
from .costs.variants import parse_variant
from .limits import MAX_NODES
from .plan import Evaluation, Plan, PlanError, SolveResult, Stage, evaluate
from .presets import ClusterSpec, ModelSpec, load_cluster, load_model
from .problem import OBJECTIVES, Layout, Problem, ProblemError
from .schedules import stash as schedule_stash
from .solvers import SolverError, solve

__all__ = [
    "BASELINE_METHOD",
    "FSDP_METHOD",
    "BASELINES",
    "fsdp_baseline",
    "uniform_projection",
    "refine_knobs",
    "ModelPlan",
    "megatron_baseline",
    "megatron_baselines",
    "plan_model",
    "throughput",
    "simulate_plan",
    "layer_roles",
    "microbatch_candidates",
]

BASELINE_METHOD = "megatron-uniform"
FSDP_METHOD = "fsdp"
BASELINES = (BASELINE_METHOD, FSDP_METHOD)


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


def megatron_baseline(problem: Problem, objective: str | None = None,
                      variants: Sequence[str] | None = None) -> tuple[Plan, Evaluation] | None:
    """The best plan of the shape Megatron-LM / torchtitan give by default.

    The vision encoder and projector (and the embedding) sit on stage 0, the
    loss or action head on the last stage, the decoder layers are split
    evenly over P stages (Megatron's ``num_layers / pp``; when P does not
    divide them, the last stages take one more), and every stage has the
    same size, the same layout (dp, tp) and the same memory knobs, devices
    in order. The knobs are those Megatron offers -- activation recompute
    and the distributed optimizer (ZeRO-1) --: ``variants`` (default: every
    variant of the problem without ZeRO-3, and the plain key). Among the
    stage counts, layouts and knobs that fit in memory, the one with the
    best objective is returned; None when none fits.

    Under ``training.schedule: interleaved`` (v virtual stages) the split is
    Megatron-LM's with virtual stages: P groups (P >= 2, m a multiple of P),
    the same rule cutting the layers into P·v chunks, chunk c on group c mod P.
    """
    found = megatron_baselines(problem, objective, variants, keep=1)
    return found[0] if found else None


def megatron_baselines(problem: Problem, objective: str | None = None, variants: Sequence[str] | None = None,
                       keep: int = 1) -> list[tuple[Plan, Evaluation]]:
    """The ``keep`` best plans of :func:`megatron_baseline`'s shape (best objective first)."""
    objective = objective or problem.objective
    if variants is None:
        variants = [""] + [v for v in problem.variants if not v.startswith("zero3")]
    roles = layer_roles(problem)
    N = problem.num_devices
    allowed = problem.cluster.allowed_sizes()
    n_dec = sum(r == "decoder" for r in roles) or problem.num_layers
    v = problem.training.virtual_stages if problem.training.schedule == "interleaved" else 1
    found: list[tuple[float, int, Plan, Evaluation]] = []
    for P in range(problem.stages.min, problem.stages.max + 1):
        if N % P or N // P not in allowed or P * v > n_dec or (v > 1 and (P < 2 or problem.microbatches % P)):
            continue
        d = N // P
        cuts = _uniform_cuts(roles, P * v)
        if cuts is None:
            continue
        ids = [tuple(range(g * d, (g + 1) * d)) for g in range(P)]
        tp = 1
        while tp <= min(d, problem.cluster.gpus_per_node):
            if d % tp == 0:
                for var in variants:
                    plan = Plan(tuple(Stage(a, b, d, d // tp, tp, ids[c % P], variant=var) for c, (a, b) in enumerate(cuts)))
                    ev = _try(problem, plan, objective)
                    if ev is not None:
                        found.append((ev[1].value, len(found), *ev))
            tp *= 2
    found.sort(key=lambda f: f[:2])
    return [(plan, ev) for _, _, plan, ev in found[:keep]]


def fsdp_baseline(problem: Problem, objective: str | None = None) -> tuple[Plan, Evaluation] | None:
    """One stage of all N GPUs, dp = N, tp = 1, ZeRO-3 (FSDP full shard), the better recompute choice.

    None when the problem has no ZeRO-3 variant (``variants`` restricted),
    dp = N does not divide the microbatch, or nothing fits.
    """
    objective = objective or problem.objective
    N, L = problem.num_devices, problem.num_layers
    best: tuple[Plan, Evaluation] | None = None
    for v in (v for v in problem.variants if v.startswith("zero3")):
        found = _try(problem, Plan((Stage(0, L - 1, N, N, 1, variant=v),)), objective)
        if found is not None and (best is None or found[1].value < best[1].value):
            best = found
    return best


def _try(problem: Problem, plan: Plan, objective: str) -> tuple[Plan, Evaluation] | None:
    plan = plan.with_device_ids()
    try:
        return plan, evaluate(problem, plan, objective)
    except PlanError:
        return None


# --------------------------------------------------------------------------- memory knobs


def uniform_projection(problem: Problem, variant: str) -> Problem | None:
    """The format-v1 problem in which every layer's plain keys hold its ``variant`` entries.

    A mesh with one replica has no ZeRO variants (they equal their ZeRO-0
    twin there): it takes the twin's entry. A plan of the projection, each
    stage given :func:`variant_at` its mesh, is a plan of ``problem`` with
    the same value. None when some layer has no entry left.
    """
    if not variant and problem.version == 1:
        return problem
    doc = problem.to_dict()
    for layer, entry in zip(problem.layers, doc["layers"]):
        costs = {}
        for c in {Layout(c.dp, c.tp) for c in layer.costs}:
            cost = layer.costs.get(Layout(c.dp, c.tp, variant_at(problem, c.dp, variant)))
            if cost is not None:
                costs[c.key] = _cost_doc(cost)
        if not costs:
            return None
        entry["costs"] = dict(sorted(costs.items()))
    doc["version"] = 1
    doc.pop("variants", None)
    return Problem.from_dict(doc)


def variant_at(problem: Problem, dp: int, variant: str) -> str:
    """``variant`` at ``dp`` replicas: without its ZeRO part when dp = 1 (ZeRO shards over replicas)."""
    if dp > 1 or not variant.startswith("zero"):
        return variant
    return "+".join(variant.split("+")[1:])


def _cost_doc(cost: Any) -> dict[str, Any]:
    out = {"fwd_ms": cost.fwd_ms, "bwd_ms": cost.bwd_ms, "weight_bytes": cost.weight_bytes, "act_bytes": cost.act_bytes}
    if cost.bwd_input_ms is not None and cost.bwd_weight_ms is not None:
        out.update(bwd_input_ms=cost.bwd_input_ms, bwd_weight_ms=cost.bwd_weight_ms)
    return out


def refine_knobs(problem: Problem, plan: Plan, objective: str | None = None,
                 max_combinations: int = 4096) -> tuple[Plan, Evaluation] | None:
    """``plan`` with each segment's variant chosen to minimize its stage's time, memory permitting.

    Cuts, stage sizes, meshes and placement stay. A stage's time and memory
    depend only on its own segments' entries (the reshards and transfers
    only on meshes), so choosing each stage's variants alone minimizes
    every stage time, and with them both objectives: for the given cuts
    and meshes the result is optimal. Among equally fast choices the one
    needing the least memory wins (ZeRO-1 over ZeRO-0). Stages with more than
    ``max_combinations`` variant combinations pick one variant for all
    their segments. None when some stage fits with no combination.
    """
    objective = objective or problem.objective
    if not problem.variants:
        return _try(problem, plan, objective)
    if problem.training.schedule == "interleaved":  # a group's memory couples its v chunks: not separable
        return _try(problem, plan, objective)
    names = [""] + list(problem.variants)
    memory = problem.cluster.gpu_memory_bytes
    P, m = plan.num_stages, problem.microbatches
    stashes = schedule_stash(problem.training.schedule, P, m)  # 1F1B and ZB-H1: min(m, P - p); GPipe: m
    stages = []
    for p, stage in enumerate(plan.stages):
        stash = stashes[p]
        segs = stage.segment_configs(problem)
        options = []
        for (a, b), config in segs:
            per = {}
            for v in names:
                key = Layout(config.dp, config.tp, v)
                entries = [problem.layers[i].costs.get(key) for i in range(a, b + 1)]
                if all(e is not None for e in entries):
                    per[v] = (sum(e.fwd_ms + e.bwd_ms for e in entries), sum(e.weight_bytes for e in entries),
                              sum(e.act_bytes for e in entries))
            options.append(per)
        combos = math.prod(len(o) for o in options)
        choices = (itertools.product(*(list(o) for o in options)) if combos <= max_combinations
                   else ((v,) * len(options) for v in names if all(v in o for o in options)))
        best = None
        for combo in choices:
            time = sum(o[v][0] for o, v in zip(options, combo))
            need = sum(o[v][1] for o, v in zip(options, combo)) + stash * sum(o[v][2] for o, v in zip(options, combo))
            if need <= memory and (best is None or (time, need) < best[:2]):  # ties: the smaller memory
                best = (time, need, combo)
        if best is None:
            return None
        configs = [Layout(c.dp, c.tp, v) for ((_, c), v) in zip(segs, best[2])]
        stages.append(Stage.from_configs(stage.first_layer, stage.last_layer, stage.devices, configs, stage.device_ids))
    return _try(problem, Plan(tuple(stages)), objective)


# --------------------------------------------------------------------------- simulation and throughput


def simulate_plan(problem: Problem, plan: Plan, ev: Evaluation | None = None) -> dict[str, Any] | None:
    """Replay of ``plan`` under the problem's schedule (``partitioner.simulate``), or None when the simulator is not installed."""
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


def plan_options(options: Mapping[str, Any] | CostOptions | None) -> CostOptions:
    """The cost options ``plan_model`` uses: every memory-knob variant unless the options fix or restrict them."""
    if isinstance(options, CostOptions):
        return options
    given = dict(options or {})
    if not {"variants", "recompute", "zero1"} & set(given):
        given["variants"] = ("all",)
    return CostOptions.from_mapping(given)


def _check_count(value: Any, name: str, maximum: int) -> None:
    """An argument that must be an integer in 1..maximum (the API door; ranges in partitioner.limits)."""
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
        the least simulated iteration (:func:`partitioner.schedule_choice.choose_schedule`:
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
    from .schedule_choice import schedule_keys

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

    def build(m: int, o: CostOptions) -> Problem:
        return build_problem(spec, cl, nodes=nodes, global_batch=global_batch, microbatches=m, options=o,
                             objective=objective, profile=profile, max_stages=max_stages)

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
        entry: dict[str, Any] = {"m": m, "problem": problem, "base_problem": base_problem, "screen": math.inf, "bases": {}}
        for name, found in ((BASELINE_METHOD, megatron_baseline(base_problem, objective)),
                            (FSDP_METHOD, fsdp_baseline(base_problem, objective))):
            if found is None:
                continue
            sim = simulate_plan(base_problem, found[0], found[1]) if simulate else None
            it = _iteration_ms(sim, found[1])[0]
            entry["bases"][name] = {"plan": found[0], "ev": found[1], "sim": sim, "iteration_ms": it}
            entry["screen"] = min(entry["screen"], it)
        if len(candidates) > 1 and method != "greedy":
            for variant, proj in _projections(problem, "escalate")[:1]:
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
        from .schedule_choice import choose_schedule, schedule_keys

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


# Least time limit (seconds) of a re-solve under another schedule when the user set none (see plan_model).
RESOLVE_MIN_SECONDS = 10.0

_NO_FIT = {
    BASELINE_METHOD: "no Megatron-style uniform plan fits in memory",
    FSDP_METHOD: "FSDP (one stage, dp = all GPUs, ZeRO-3) does not fit or dp does not divide the microbatch",
}


# Uniform knob settings in the order "fast" solves them, stopping at the first that has a plan:
# ZeRO-1 costs no time over ZeRO-0 in this model and only saves memory (its projection dominates
# ZeRO-0's); recompute and ZeRO-3 add time to save memory. knob_solves="all" solves every setting.
ESCALATION = ("zero1", "zero1+recompute-selective", "zero1+recompute-full", "zero3", "zero3+recompute-selective",
              "zero3+recompute-full")


def _projections(problem: Problem, which: str = "all") -> list[tuple[str, Problem]]:
    """(variant, v1 problem) for the uniform knob settings of ``problem`` (just the problem for v1).

    ``which``: ``all`` (every setting), ``escalate`` (the :data:`ESCALATION`
    order, then the remaining settings).
    """
    if problem.version < 2 or not problem.variants:
        return [("", problem)]
    settings = ["", *problem.variants]
    if which == "escalate":
        settings = [v for v in ESCALATION if v in settings] + [v for v in settings if v not in ESCALATION]
    out = []
    for v in settings:
        proj = uniform_projection(problem, v)
        if proj is not None:
            out.append((v, proj))
    return out


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
        warm = None
        if megatron is not None and all(s.variant == variant_at(problem, s.dp, variant) for s in megatron["plan"].stages):
            warm = Plan(tuple(replace(s, variant="") for s in megatron["plan"].stages))
        result = solve(proj, method, objective=objective, time_limit=time_limit, seed=seed, warm_start=warm)
        last = result
        if result.plan is None:
            if result.message:
                messages.append(f"{variant or 'plain'}: {result.message}")
            continue
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


def _assemble(best: dict[str, Any], bests: dict[str, dict[str, Any]], tried: list, method: str,
              spec: ModelSpec, cl: ClusterSpec) -> SolveResult:
    messages: list[str] = []
    top = min(bests, key=lambda n: bests[n]["iteration_ms"]) if bests else None
    if top is not None and bests[top]["iteration_ms"] < best["iteration_ms"] * (1 - 1e-9):
        # the best baseline is faster than the best plan found: keep it
        b = bests[top]
        r = best["result"]
        messages.append(
            f"{r.method} at m={best['problem'].microbatches} ({best['iteration_ms']:.6g} ms) is slower than the "
            f"{top} baseline at m={b['entry']['m']} ({b['iteration_ms']:.6g} ms): kept the {top} baseline plan"
        )
        best = {
            "problem": b["entry"]["base_problem"],
            "result": SolveResult(status="feasible", method=r.method, objective=r.objective, value=b["ev"].value,
                                  solve_seconds=r.solve_seconds, plan=b["plan"], evaluation=b["ev"]),
            "sim": b["sim"],
            "iteration_ms": b["iteration_ms"],
            "iteration_source": _iteration_ms(b["sim"], b["ev"])[1],
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
    baselines: dict[str, Any] = {}
    for name in BASELINES:
        if name not in bests:
            baselines[name] = {"method": name, "value": None, "plan": None, "message": _NO_FIT[name]}
            continue
        b = bests[name]
        b_problem = b["entry"]["base_problem"]
        b_tput = throughput(b_problem, b["ev"], b["iteration_ms"])
        baselines[name] = {
            "method": name,
            "value": b["ev"].value,
            "plan": b["plan"].to_dict(b["ev"]),
            "microbatches": b_problem.microbatches,
            "schedule": b_problem.training.schedule,
            "virtual_stages": b_problem.training.virtual_stages,
            "iteration_ms": b_tput["iteration_ms"],
            "throughput": b_tput,
            "knobs": stage_knobs(b["ev"]),
        }
        if b["sim"] is not None:
            baselines[name]["simulation"] = b["sim"]
    extra["baselines"] = baselines
    if top is not None:
        extra["baseline"] = baselines[top]
        extra["speedup"] = baselines[top]["iteration_ms"] / tput["iteration_ms"] if tput["iteration_ms"] > 0 else None
    else:
        extra["baseline"] = {"method": None, "value": None, "plan": None, "message": "; ".join(_NO_FIT.values())}
        extra["speedup"] = None
    extra.update(
        model=spec.name,
        cluster=cl.name,
        nodes=problem.cluster.nodes,
        global_batch=problem.meta.get("global_batch"),
        microbatches=problem.microbatches,
        microbatches_tried=tried,
        knobs=stage_knobs(result.evaluation),
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


def stage_knobs(ev: Evaluation) -> list[dict[str, Any]]:
    """Per stage, the memory knobs of each segment: ``[{"layers": [a, b], "dp", "tp", "zero", "recompute"}, ...]``."""
    out = []
    for st in ev.stages:
        segs = st.segments or ((st.first_layer, st.last_layer),)
        configs = st.configs or (st.layout,)
        rows = []
        for (a, b), c in zip(segs, configs):
            knobs = parse_variant(c.variant)
            rows.append({"layers": [a, b], "dp": c.dp, "tp": c.tp, "zero": knobs.zero, "recompute": knobs.recompute})
        out.append({"stage": st.index, "segments": rows})
    return out
