"""greedy, uniform and balanced on random format-v3 problems: every plan they return is valid (re-checked by
``evaluate`` and replayed) and never better than brute's optimum; uniform and balanced keep one config."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from checks import check_plan
from partitioner import solve
from strategies import small_v3_problems


@pytest.mark.parametrize("method", ["greedy", "uniform", "balanced"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problem=small_v3_problems())
def test_heuristics_return_valid_v3_plans(method, problem):
    oracle = solve(problem, "brute")
    result = solve(problem, method)
    if result.plan is None:
        assert result.status == "infeasible" and result.message
        return
    assert result.status == "feasible" and result.version == 3
    check_plan(problem, result)
    assert oracle.status == "optimal" and result.value >= oracle.value * (1 - 1e-9)
    if method in ("uniform", "balanced"):  # one config for every segment of every stage (Megatron-LM's one CP and EP)
        assert len({lay for s in result.plan.stages for _, lay in s.segment_configs(problem)}) == 1
