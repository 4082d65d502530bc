"""The oracle: brute force is the true optimum and agrees with evaluate."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import check_no_random_plan_beats
from partitioner import load_problem, solve
from partitioner.plan import evaluate
from strategies import examples, small_problems

REL = 1e-9


@pytest.mark.slow
@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), problem=small_problems())
def test_brute_equals_evaluate_and_no_random_plan_beats_it(data, problem):
    result = solve(problem, "brute")
    assert result.status in ("optimal", "infeasible"), result.message
    if result.status == "optimal":
        assert result.value == pytest.approx(evaluate(problem, result.plan).value, rel=REL)
        assert result.bound == result.value and result.gap == 0.0
    else:
        assert result.message
    check_no_random_plan_beats(data, problem, result, tries=5, rel=REL)


def test_shared_examples(examples):
    lesson = solve(load_problem(examples / "rebalance_4gpu.json"), "brute")
    assert lesson.status == "optimal" and lesson.value == 22.0
    assert lesson.plan.layers_per_stage() == [4, 11, 11, 8]  # 1+3, 11, 11, 7+1
    toy = solve(load_problem(examples / "vla_toy_2x4.json"), "brute")
    assert toy.status == "optimal"
    assert toy.value == pytest.approx(256.21445621333334, rel=1e-12)
    # the two 1-GPU tail stages share node 0 with stage 0
    nodes = [s.nodes for s in toy.evaluation.stages]
    assert nodes[0] == nodes[-1] == nodes[-2] and nodes[-1] != nodes[1]


def test_brute_refuses_large_problems(examples):
    result = solve(load_problem(examples / "rebalance_4gpu.json"), "brute", options={"max_combinations": 100})
    assert result.status == "error" and "max_combinations" in result.message and result.plan is None


def test_brute_time_limit_is_honest(examples):
    result = solve(load_problem(examples / "rebalance_4gpu.json"), "brute", time_limit=1e-4)
    assert result.status in ("feasible", "error")
    assert result.status != "optimal"
