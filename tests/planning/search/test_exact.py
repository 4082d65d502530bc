"""plan's exact solve of the kept candidate (planning/search/exact.py): optimal with its bound, or why not."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from partitioner import plan_model, solve
from partitioner.core.deadline import Deadline
from partitioner.plan import Plan, SolveResult, Stage, evaluate
from partitioner.planning.options import PlanOptions
from partitioner.planning.records import KnobSolve
from partitioner.planning.search import exact
from partitioner.planning.search.exact import prove_kept
from partitioner.problem import Problem
from strategies import examples, small_v2_problems

OPTS = PlanOptions(nodes=1, global_batch=8, simulate=False)


def _kept(problem: Problem, method: str = "greedy") -> KnobSolve | None:
    """A screened candidate of ``problem``: ``method``'s plan, as plan_model would hand it over."""
    r = solve(problem, method)
    if r.plan is None or r.evaluation is None:
        return None
    r = replace(r, status="feasible", bound=None)
    return KnobSolve(problem, r, None, r.evaluation.iteration_ms, "estimate")


def _with_schedule(problem: Problem, schedule: str, **training) -> Problem:
    doc = problem.to_dict()
    doc["training"].update(schedule=schedule, **training)
    return Problem.from_dict(doc)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])
@given(problem=small_v2_problems(max_layers=5, objectives=("iteration",)))
def test_the_exact_solve_proves_brutes_optimum(problem):
    kept = _kept(problem)
    if kept is None:
        return
    out = prove_kept(kept, replace(OPTS, objective="iteration"), Deadline(None))
    oracle = solve(problem, "brute", objective="iteration")
    assert oracle.status == "optimal"
    r = out.result
    assert r.status == "optimal", r.message
    assert r.value == pytest.approx(oracle.value, rel=1e-6)
    assert r.bound is not None and r.bound <= r.value * (1 + 1e-9) and r.bound >= oracle.value * (1 - 1e-6)
    assert "optimal over its space at m=" in r.message
    assert r.extra["exact"]["space"] == {"microbatches": problem.microbatches, "schedule": "1f1b", "virtual_stages": 1}


def _tiny() -> Problem:
    doc = {
        "version": 2, "name": "tiny",
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu_memory_bytes": 200, "intra_node_GBps": 100.0,
                    "inter_node_GBps": 10.0},
        "training": {"microbatches": 4, "objective": "iteration"},
        "variants": {"zero1": "optimizer states sharded"},
        "layers": [{"name": f"l{i}", "module": "a" if i < 2 else "b", "out_bytes": 0,
                    "costs": {"dp1tp1": {"fwd_ms": 1.0 + i, "bwd_ms": 2.0, "weight_bytes": 40, "act_bytes": 5},
                              "dp1tp1/zero1": {"fwd_ms": 1.0 + i, "bwd_ms": 2.0, "weight_bytes": 30, "act_bytes": 5},
                              "dp2tp1": {"fwd_ms": 0.6 + i, "bwd_ms": 1.1, "weight_bytes": 40, "act_bytes": 3}}}
                   for i in range(4)],
    }
    return Problem.from_dict(doc)


def test_no_time_left_answers_feasible_naming_the_cut():
    kept = _kept(_tiny())
    clock = iter([0.0] + [10.0] * 100).__next__
    deadline = Deadline(1.0, clock=clock)
    out = prove_kept(kept, OPTS, deadline)
    assert out.result.status == "feasible" and out.result.bound is None
    assert "not proven optimal over its space at m=4, schedule 1f1b" in out.result.message
    assert "time limit left no time for the exact solve" in out.result.message
    assert any("exact solve not started" in c for c in deadline.cuts)


def test_a_solve_cut_short_answers_feasible_with_its_bound_and_reason(monkeypatch):
    kept = _kept(_tiny())

    def cut_short(problem, method, **kw):
        return SolveResult(status="feasible", method=method, objective="iteration", value=kept.result.value,
                           bound=1.0, plan=kept.result.plan, evaluation=kept.result.evaluation, timed_out=True)

    monkeypatch.setattr(exact, "solve", cut_short)
    deadline = Deadline(30.0)
    out = prove_kept(kept, OPTS, deadline).result
    assert out.status == "feasible" and out.bound == 1.0 and out.gap is not None and out.gap > 0
    assert "the exact dp solve was cut short by the time limit" in out.message
    assert any("exact solve stopped at the time limit" in c for c in deadline.cuts)
    out = prove_kept(kept, OPTS, Deadline(None)).result  # no --time-limit: the cap stopped it
    assert out.status == "feasible" and "cut short after" in out.message and "by the default budget" in out.message


def test_a_better_plan_of_the_exact_solve_replaces_the_screened_one():
    problem = _tiny()
    plan = Plan((Stage(0, 0, 1, 1, 1), Stage(1, 3, 1, 1, 1))).with_device_ids()  # layer 0 alone: unbalanced
    ev = evaluate(problem, plan)
    slow = SolveResult(status="feasible", method="dp", objective="iteration", value=ev.value, plan=plan, evaluation=ev)
    kept = KnobSolve(problem, slow, None, ev.iteration_ms, "estimate")
    best = solve(problem, "brute")
    assert best.value < slow.value
    out = prove_kept(kept, OPTS, Deadline(None))
    assert out.result.status == "optimal" and out.result.value == pytest.approx(best.value)
    assert out.result.extra["exact"]["plan_from_exact_solve"] is True
    assert out.iteration_ms < kept.iteration_ms


def test_interleaved_is_proven_and_heuristics_say_why_they_are_not():
    problem = _with_schedule(_tiny(), "interleaved", virtual_stages=2)
    kept = _kept(_tiny())
    kept = replace(kept, problem=problem)
    out = prove_kept(kept, OPTS, Deadline(None)).result  # dp searches the interleaved space (its cut search)
    assert out.status == "optimal" and out.value == pytest.approx(solve(problem, "brute").value, rel=1e-9)
    out = prove_kept(_kept(_tiny()), replace(OPTS, method="greedy"), Deadline(None)).result
    assert out.status == "feasible" and "greedy is a heuristic" in out.message


def test_the_default_plan_of_a_small_preset_is_optimal_with_its_bound():
    r = plan_model("seed-vla-8gpu", "dgx-a100-80g", nodes=1, global_batch=32)
    assert r.status == "optimal", r.message
    assert r.bound is not None and math.isfinite(r.bound) and r.bound <= r.value * (1 + 1e-12)
    assert r.bound >= r.value * (1 - 1e-9)
    assert f"optimal over its space at m={r.microbatches}, schedule {r.schedule['schedule']}" in r.message
    assert "screened, not proven" in r.message
    doc = r.to_dict()
    assert doc["status"] == "optimal" and doc["bound"] == r.bound and doc["message"] == r.message
    assert doc["exact"]["space"]["microbatches"] == r.microbatches
