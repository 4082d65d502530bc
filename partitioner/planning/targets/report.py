"""``targets`` of ``plan --target any``: per framework, the fastest candidate of the run it runs, and its speed-up.

The run searched every plan; this section tells the user what running its
best plan in each framework would take: the kept plan when the target runs
it (:func:`~.rules.runs` says why not otherwise), else the fastest other
candidate the run weighed (the plans and baselines under every schedule of
the schedule choice) that it runs. It is a report over the run's candidates,
not a search: ``plan --target T`` searches T's space exactly and may find a
faster plan.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

from ...plan import Plan
from ...problem import Problem
from ..records import BaselineRun, BaselineSummary, TargetSummary
from ..results import ModelPlan
from ..schedules.report import ScheduleReport
from .memory import MemoryCounts, default_counts
from .rules import RULES, runs

__all__ = ["target_summaries"]

# (iteration ms, problem carrying the schedule, plan, where it comes from, method)
_Candidate = tuple[float, Problem, Plan, str, str]


def _pool(result: ModelPlan, report: ScheduleReport | None, bests: Mapping[str, BaselineRun]) -> list[_Candidate]:
    """The kept plan first, then every candidate that runs, then the best baselines."""
    assert result.problem is not None and result.plan is not None and result.throughput is not None
    out: list[_Candidate] = [(result.throughput.iteration_ms, result.problem, result.plan, "kept", result.method)]
    for c in (report.candidates if report is not None else ()):
        if c.problem is not None and c.plan is not None:
            out.append((c.iteration_ms, c.problem, c.plan, c.source, c.method))
    out += [(b.iteration_ms, b.problem, b.plan, "baseline", name) for name, b in bests.items()]
    return out


def _shape(c: _Candidate) -> dict:
    it, problem, plan, source, method = c
    configs = [cfg for s in plan.stages for _, cfg in s.segment_configs(problem)]
    t = problem.training
    return {"source": source, "method": method, "schedule": t.schedule, "virtual_stages": t.virtual_stages,
            "microbatches": problem.microbatches, "stages": len(plan.stages),
            "meshes": sorted({f"dp {c.dp} x tp {c.tp}" for c in configs}),
            "knobs": sorted({c.variant or "plain" for c in configs})}


def _fastest(pool: Iterable[_Candidate]) -> _Candidate | None:
    best = None
    for c in pool:
        if best is None or c[0] < best[0] * (1 - 1e-9):
            best = c
    return best


def target_summaries(result: ModelPlan, report: ScheduleReport | None, bests: Mapping[str, BaselineRun],
                     memory: MemoryCounts | None = None) -> dict[str, TargetSummary]:
    """Per target of :data:`~.rules.RULES`, its :class:`TargetSummary` for the result of a ``--target any`` run.

    Every candidate was costed with the run's count ``memory`` (default:
    Megatron-LM's, :func:`~.memory.default_counts`), whatever the target;
    each summary says so (``memory``), restricted to the target's ZeRO stages.
    """
    pool = _pool(result, report, bests)
    memory = memory or default_counts("any")
    base = result.baseline.iteration_ms if isinstance(result.baseline, BaselineSummary) else None
    out = {}
    for name, rules in RULES.items():
        counted = replace(memory, counts={z: c for z, c in memory.counts.items() if z in rules.zero}).to_dict()
        kept_reasons = runs(rules, pool[0][1], pool[0][2])
        best = _fastest(c for c in pool if not runs(rules, c[1], c[2]))
        if best is None:
            out[name] = TargetSummary(name, None, None, None, tuple(kept_reasons), counted)
            continue
        speedup = base / best[0] if base is not None and best[0] > 0 else None
        out[name] = TargetSummary(name, best[0], speedup, _shape(best), tuple(kept_reasons), counted)
    return out
