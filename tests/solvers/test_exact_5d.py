"""Format v3 in every exact method: dp, cpsat and milp prove brute's optimum on random v3 problems.

The problems (``strategies.small_v3_problems``) carry context parallelism
(cp keys whose activation bytes fall with C), MoE-like layers with ep/etp
keys next to dense layers of the same module carrying the same ep keys,
tight memory, transfers and free ones, variants, and tied weights (the
last layer tied to the first). Every returned plan is re-evaluated and
replayed (``checks.check_plan``); CP-SAT runs with one worker and a fixed
seed. The schedules 1F1B, ZB-H1 and GPipe are drawn; the interleaved
schedule has its own test over the interleaved space.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import check_plan
from partitioner import evaluate, solve
from partitioner.problem import Problem
from strategies import small_v3_problems

REL = 1e-6
OPTIONS = {"dp": {}, "cpsat": {"num_workers": 1}, "milp": {}}


def agree(problem: Problem, method: str, objective: str | None = None) -> None:
    """``method`` finds brute's optimum (or infeasibility) and its plan checks out."""
    objective = objective or problem.objective
    oracle = solve(problem, "brute", objective=objective)
    result = solve(problem, method, objective=objective, options=OPTIONS[method], seed=3)
    assert (oracle.status == "infeasible") == (result.status == "infeasible"), (oracle.message, result.message)
    if oracle.status == "infeasible":
        assert result.plan is None and result.message
        return
    assert oracle.status == "optimal" and result.status == "optimal", result.message
    assert result.version == 3
    assert result.value == pytest.approx(oracle.value, rel=REL)
    assert evaluate(problem, result.plan, objective).value == pytest.approx(result.value, rel=1e-12)
    check_plan(problem, result)
    check_plan(problem, oracle)


def with_schedule(problem: Problem, schedule: str) -> Problem:
    doc = problem.to_dict()
    doc["training"]["schedule"] = schedule
    return Problem.from_dict(doc)


@pytest.mark.parametrize("method", ["dp", "cpsat", "milp"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problem=small_v3_problems(), schedule=st.sampled_from(["1f1b", "1f1b", "zb-h1", "gpipe"]))
def test_exact_methods_match_brute_on_v3(method, problem, schedule):
    agree(with_schedule(problem, schedule), method)


@pytest.mark.parametrize("method", ["dp", "cpsat", "milp"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problem=small_v3_problems(ties=False), objective=st.sampled_from(["bottleneck", "iteration"]))
def test_exact_methods_match_brute_on_v3_without_ties(method, problem, objective):
    agree(problem, method, objective)


def interleaved(problem: Problem) -> Problem | None:
    doc = problem.to_dict()
    if len(doc["layers"]) < 4:
        return None
    doc["training"].update(schedule="interleaved", virtual_stages=2, microbatches=4)
    doc.pop("stages", None)
    return Problem.from_dict(doc)


@pytest.mark.parametrize("method", ["cpsat", "milp", "dp"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problem=small_v3_problems(max_layers=6))
def test_interleaved_methods_match_brute_on_v3(method, problem):
    from hypothesis import assume

    twin = interleaved(problem)
    assume(twin is not None)
    agree(twin, method)
    result = solve(twin, "brute")
    if result.plan is not None:  # one (dp, tp, cp) per device group
        P = len(result.plan.stages) // 2
        for g in range(P):
            chunks = result.plan.stages[g::P]
            assert len({lay.mesh for s in chunks for _, lay in s.segment_configs(twin)}) == 1
