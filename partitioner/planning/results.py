"""What ``plan`` reports: the result type, replays, throughput and the assembled result."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..costs.variants import parse_variant
from ..export.common import moe_export_hints
from ..plan import Evaluation, Plan, SolveResult, evaluate
from ..presets import ClusterSpec, ModelSpec
from ..problem import Problem
from ..simulate.engine import replay_check
from .baselines import BASELINE_METHOD, BASELINES, FSDP_METHOD

__all__ = ["ModelPlan", "simulate_plan", "throughput", "stage_knobs"]

@dataclass(frozen=True)
class ModelPlan(SolveResult):
    """A :class:`SolveResult` that also keeps the problem it was solved on (not in the JSON)."""

    problem: Problem | None = field(default=None, compare=False, repr=False)

# --------------------------------------------------------------------------- simulation and throughput


def simulate_plan(problem: Problem, plan: Plan, ev: Evaluation | None = None) -> dict[str, Any] | None:
    """Replay of ``plan`` under the problem's schedule (:func:`partitioner.simulate.engine.replay_check`)."""
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


_NO_FIT = {
    BASELINE_METHOD: "no Megatron-style uniform plan fits in memory",
    FSDP_METHOD: "FSDP (one stage, dp = all GPUs, ZeRO-3) does not fit or dp does not divide the microbatch",
}

def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None

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
        export_hints={"model": spec.name, "layers": [dict(h) for h in problem.meta.get("layers", [])],
                      **({"moe": moe} if (moe := moe_export_hints(spec)) else {})},
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