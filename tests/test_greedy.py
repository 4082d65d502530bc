"""The greedy baseline: valid plans, never better than the optimum, never claims optimality."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from partitioner import load_problem, solve
from partitioner.solvers.greedy import balance_cuts, grow_sizes
from checks import check_plan
from strategies import small_problems

import numpy as np


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_greedy_is_valid_and_never_beats_the_optimum(problem):
    greedy = solve(problem, "greedy")
    assert greedy.status in ("feasible", "infeasible")
    oracle = solve(problem, "dp")
    if greedy.status == "feasible":
        assert oracle.status == "optimal"
        assert greedy.value >= oracle.value * (1 - 1e-9)
        check_plan(problem, greedy)
    else:
        assert greedy.message


def test_lesson16_rebalancing(examples):
    r = solve(load_problem(examples / "seed_lesson16.json"), "greedy")
    assert r.status == "feasible" and r.value == 22.0


def test_balance_cuts_gives_exactly_the_stage_count():
    work = np.array([16.0] + [2.0] * 32 + [8.0])
    for parts in range(1, 35):
        cuts = balance_cuts(work, parts)
        assert len(cuts) == parts and cuts[0][0] == 0 and cuts[-1][1] == 33
        assert all(b + 1 == a for (_, b), (a, _) in zip(cuts, cuts[1:]))


def test_balance_cuts_covers_every_layer_despite_rounding():
    # sequential and pairwise sums of these works differ in the last bit: all layers must still be cut
    from benchmarks.synthetic import synthetic_problem
    from partitioner.solvers.greedy import layer_work

    for seed in range(12):
        work = layer_work(synthetic_problem(layers=12, nodes=2, gpus_per_node=4, layouts=2, seed=seed))
        for parts in range(1, 13):
            cuts = balance_cuts(work, parts)
            assert len(cuts) == parts and cuts[0][0] == 0 and cuts[-1][1] == 11


def test_grow_sizes_uses_every_device():
    assert sum(grow_sizes([5.0, 1.0, 1.0], (1, 2, 4, 8, 16), 16)) == 16
    assert grow_sizes([1.0] * 3, (1, 2, 4), 2) is None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_uniform_and_balanced_are_ordered_and_never_beat_the_optimum(problem):
    optimum = solve(problem, "dp")
    uniform = solve(problem, "uniform")
    balanced = solve(problem, "balanced")
    for r in (uniform, balanced):
        assert r.status in ("feasible", "infeasible"), r.message
        if r.status == "feasible":
            assert optimum.status == "optimal" and r.value >= optimum.value * (1 - 1e-9)
            check_plan(problem, r)
    # balanced optimizes the cuts (and placement) within uniform's meshes and layouts
    if uniform.status == "feasible":
        assert balanced.status == "feasible" and balanced.value <= uniform.value * (1 + 1e-9)


def test_uniform_is_megatrons_split(examples):
    problem = load_problem(examples / "seed_lesson16.json")
    r = solve(problem, "uniform")
    assert r.status == "feasible"
    assert r.plan.layers_per_stage() == [9, 9, 8, 8]  # 34 layers on 4 stages, remainder first
    assert r.value == pytest.approx(16 + 8 * 2.0)  # stage 0: the vit and 8 llm layers
    b = solve(problem, "balanced")
    assert b.value == 22.0  # one layout (dp1tp1) already allows the optimal cuts here


def test_balanced_out_of_time_is_an_error_not_infeasible(examples):
    # a deadline that has passed before the first recursion step: nothing is proven infeasible
    r = solve(load_problem(examples / "seed_lesson16.json"), "balanced", time_limit=1e-9)
    assert r.status == "error"
    assert "time limit" in r.message
