"""Format v2 in the slot model (``cpsat`` and ``milp``): one config per
(stage, module run), reshards between a stage's segments, variants, memory
across segments; agreement with ``brute`` on random small v2
problems, completeness of both models, lesson 15."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import check_plan
from partitioner import Problem, evaluate, load_problem, solve
from partitioner.problem import Layout
from strategies import draw_valid_plan, examples, small_problems, small_v2_problems
from tests.solvers.cpsat.test_cpsat import assert_plan_is_a_model_solution as cpsat_model_holds
from tests.solvers.cpsat.test_cpsat import vla_like_problem
from tests.solvers.milp.test_milp import assert_plan_is_a_model_solution as milp_model_holds

REL = 1e-6
CPSAT = {"num_workers": 1}


# --------------------------------------------------------------------------- agreement with brute


def agree(problem: Problem, objective: str, method: str, options: dict, seed: int = 0) -> None:
    oracle = solve(problem, "brute", objective=objective)
    result = solve(problem, method, objective=objective, options=options, seed=seed)
    assert (oracle.status == "infeasible") == (result.status == "infeasible"), (oracle.message, result.message)
    if oracle.status == "infeasible":
        assert result.plan is None and result.message
        return
    assert oracle.status == result.status == "optimal", result.message
    assert result.value == pytest.approx(oracle.value, rel=REL)
    assert evaluate(problem, result.plan, objective).value == result.value
    check_plan(problem, result)
    assert result.bound <= result.value
    assert result.gap <= REL


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems(), st.integers(0, 3))
def test_cpsat_v2_matches_brute(problem, seed):
    agree(problem, problem.objective, "cpsat", CPSAT, seed)


@pytest.mark.slow
@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems())
def test_highs_v2_matches_brute(problem):
    agree(problem, problem.objective, "milp", {})


@pytest.mark.slow
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems())
def test_cbc_v2_matches_brute(problem):
    agree(problem, problem.objective, "milp", {"backend": "cbc"})


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems())
def test_v2_without_a_hint_matches_brute(problem):
    agree(problem, problem.objective, "cpsat", {**CPSAT, "hint": False})
    agree(problem, problem.objective, "milp", {"hint": False})


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_a_one_module_v2_problem_is_its_v1_twin(problem):
    """Format v2 with one module run per model changes nothing: same optimum as the v1 problem."""
    doc = problem.to_dict()
    doc["version"] = 2
    twin = Problem.from_dict(doc)
    for method, options in (("cpsat", CPSAT), ("milp", {})):
        v1, v2 = solve(problem, method, options=options), solve(twin, method, options=options)
        assert v1.status == v2.status
        if v1.status == "optimal":
            assert v2.value == pytest.approx(v1.value, rel=REL)


# --------------------------------------------------------------------------- completeness of both models (every valid v2 plan is a solution at its cost)


@pytest.mark.slow
@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data(), small_v2_problems())
def test_every_valid_v2_plan_is_a_cpsat_solution_at_its_cost(data, problem):
    plan, true_value = draw_valid_plan(data, problem)
    cpsat_model_holds(problem, plan, true_value)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # PuLP 3 announcing its 4.0 API
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data(), small_v2_problems())
def test_every_valid_v2_plan_is_a_milp_solution_at_its_cost(data, problem):
    plan, true_value = draw_valid_plan(data, problem)
    milp_model_holds(problem, plan, true_value)


# --------------------------------------------------------------------------- lesson 15


@pytest.mark.parametrize("method,options", [("cpsat", CPSAT), ("milp", {}), ("milp", {"backend": "cbc"})], ids=["cpsat", "highs", "cbc"])
def test_lesson15_colocated_meshes(examples, method, options):
    """One 8-GPU stage: vision at dp 8 x tp 1, then language at dp 2 x tp 4, with the reshard between."""
    problem = load_problem(examples / "colocated_1node.json")
    result = solve(problem, method, options=options)
    assert result.status == "optimal", (result.message, result.extra)
    assert result.value == pytest.approx(16.36371456, rel=1e-12)
    (stage,) = result.plan.stages
    assert stage.configs == (Layout(8, 1), Layout(2, 4))
    ev = result.evaluation.stages[0]
    out = problem.layers[ev.segments[0][1]].out_bytes
    assert ev.reshard_ms == pytest.approx(out * 3 / 32 / (problem.cluster.intra_node_GBps * 1e6), rel=1e-12)
    check_plan(problem, result)


def test_cpsat_v2_on_a_vla_problem_agrees_with_dp_and_is_deterministic():
    """16 layers in four module runs on 2 x 8 GPUs: beyond brute, checked against dp; same plan twice."""
    doc = vla_like_problem(16, 2, 8, seed=3, objective="bottleneck").to_dict()
    doc["version"] = 2
    problem = Problem.from_dict(doc)
    assert len(problem.segments(0, problem.num_layers - 1)) == 4
    exact = solve(problem, "dp")
    first = solve(problem, "cpsat", seed=7, options=CPSAT)
    second = solve(problem, "cpsat", seed=7, options=CPSAT)
    assert exact.status == first.status == "optimal", first.message
    assert first.value == pytest.approx(exact.value, rel=REL)
    assert first.plan == second.plan and first.value == second.value
    check_plan(problem, first)
