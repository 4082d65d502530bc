"""``dp`` under ``training.schedule: interleaved``: its cut search, its parts, and a MoE preset.

The search (``partitioner/solvers/interleaved/search.py``) must find brute's
optimum on random small problems (the exact branch and bound ends there),
its relaxation must never exceed that optimum (it is reported as a proven
bound on large problems), a group's exact choice must be the best of every
product of its chunks' options, and on a MoE preset the plan it returns
must be valid, replay, and use expert parallelism with v > 1.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from checks import check_plan
from partitioner import evaluate, plan_model, simulate, solve
from partitioner.costs import CostOptions, ProblemBuilder
from partitioner.presets import load_cluster, load_model
from partitioner.problem import Problem
from partitioner.solvers.interleaved.bound import relaxed_bound
from partitioner.solvers.interleaved.cuts import GroupSpace
from partitioner.solvers.interleaved.groups import best_group
from partitioner.solvers.interleaved.space import group_counts
from solvers.interleaved.test_exact_methods import assert_in_space, interleaved_problems
from strategies import examples


def _agrees_with_brute(problem: Problem) -> None:
    oracle = solve(problem, "brute")
    r = solve(problem, "dp")
    assert r.status == oracle.status, (r.status, r.message, oracle.status, oracle.message)
    if r.status != "optimal":
        return
    check_plan(problem, r)  # evaluate and the interleaved replay
    assert_in_space(problem, r)
    assert r.value == pytest.approx(oracle.value, rel=1e-6)
    assert r.bound is not None and r.bound <= oracle.value * (1 + 1e-9)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_problems(version=1))
def test_v1_search_finds_the_optimum(problem):
    _agrees_with_brute(problem)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_problems(version=2))
def test_v2_search_finds_the_optimum(problem):
    _agrees_with_brute(problem)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_problems(version=2))
def test_the_relaxation_never_exceeds_the_optimum(problem):
    oracle = solve(problem, "brute")
    for P in group_counts(problem):
        bound = relaxed_bound(problem, problem.objective, P)
        assert bound is not None
        best = solve(replace(problem, stages=replace(problem.stages, min=P, max=P)), "brute")
        if best.status == "optimal":
            assert bound <= best.value * (1 + 1e-9), (P, bound, best.value)
        else:  # no plan with P groups: the relaxation may say so, or not
            assert best.status == "infeasible"
    if oracle.status == "infeasible":
        assert solve(problem, "dp").status == "infeasible"


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(interleaved_problems(version=2))
def test_a_groups_exact_choice_is_the_best_product(problem):
    for P in group_counts(problem):
        space = GroupSpace(problem, P, problem.objective)
        bounds = space.uniform_bounds() or space.balanced_bounds([1.0] * problem.num_layers)
        for g in range(P):
            ranges = space.ranges(bounds, g)
            got = best_group(space.tables, ranges, space.rows[g], space.capacity)
            best = math.inf
            for mesh in space.tables.meshes:
                options = [space.tables.options(a, b, mesh) for a, b in ranges]
                for combo in itertools.product(*options):
                    if all(sum(o.weight_bytes + n[j] * o.act_bytes for j, o in enumerate(combo)) <= space.capacity
                           for n in space.rows[g]):
                        best = min(best, sum(o.compute_ms for o in combo))
            if best == math.inf:
                assert got is None
            else:
                assert got is not None and got.proven and got.compute_ms == pytest.approx(best, rel=1e-12)
            quick = best_group(space.tables, ranges, space.rows[g], space.capacity, exact=False)
            if quick is not None:  # the greedy choice fits and is no better than the best
                assert quick.compute_ms >= best * (1 - 1e-12)


def test_a_time_limit_returns_the_best_plan_with_a_proven_bound():
    problem = _moe_problem(virtual_stages=2)
    r = solve(problem, "dp", time_limit=5)
    assert r.status in ("optimal", "feasible") and r.plan is not None
    assert r.bound is not None and r.bound <= r.value * (1 + 1e-12)
    check_plan(problem, r)


def _moe_problem(virtual_stages: int) -> Problem:
    """Qwen3-VL-30B-A3B (48 MoE decoder layers, 128 experts) on one DGX-H100 node, 8 microbatches,
    interleaved, with the knobs of NVIDIA's recipes (the distributed optimizer, recompute or not)."""
    builder = ProblemBuilder(load_model("qwen3-vl-30b-a3b"), load_cluster("dgx-h100"), nodes=1,
                             options=CostOptions.from_mapping({"variants": ("zero1", "zero1+recompute-full")}), objective="iteration")
    problem = builder.build(64, 8)
    return replace(problem, training=replace(problem.training, schedule="interleaved", virtual_stages=virtual_stages))


def test_a_moe_preset_gets_an_interleaved_plan_with_expert_parallelism():
    problem = _moe_problem(virtual_stages=2)
    r = solve(problem, "dp", time_limit=10)  # a limit keeps a loaded CI machine bounded; no timing is asserted
    assert r.plan is not None and r.status in ("optimal", "feasible")
    check_plan(problem, r)
    assert len(r.plan.stages) % 2 == 0 and len(r.plan.stages) // 2 >= 2  # P >= 2 groups of v = 2 chunks
    configs = [lay for s in r.plan.stages for _, lay in s.segment_configs(problem)]
    assert max(lay.ep for lay in configs) > 1
    ev = evaluate(problem, r.plan)
    sim = simulate(problem, r.plan)
    assert list(sim.peak_memory_bytes) == list(ev.peak_memory_bytes)


@pytest.mark.slow
def test_plan_pins_the_interleaved_schedule_on_a_moe_preset():
    r = plan_model("qwen3-vl-30b-a3b", "dgx-h100", nodes=1, global_batch=64, microbatches=8,
                   schedule="interleaved", virtual_stages=2, time_limit=20)
    assert r.plan is not None and r.problem is not None
    assert r.problem.training.schedule == "interleaved" and r.problem.training.virtual_stages == 2
    evaluate(r.problem, r.plan)
