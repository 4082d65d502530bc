"""milp (PuLP on HiGHS and CBC): agreement with brute and dp, exactness of the
linearised model, examples, infeasibility, time limits, planted optimum."""
from __future__ import annotations

import json

import pulp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import check_plan
from partitioner import Problem, SolverError, evaluate, load_problem, solve
from partitioner.plan import Plan, Stage
from partitioner.solvers.dp.method import explain_infeasible
from partitioner.solvers.milp.solver import build_milp, start_values
from partitioner.solvers.slot.data import decisions_of_plan, slot_data
from strategies import draw_valid_plan, examples, small_problems
from tests.solvers.cpsat.test_cpsat import memory_bound_infeasible, planted_problem, vla_like_problem

REL = 1e-6
CBC = {"backend": "cbc"}


def agree(problem: Problem, objective: str, options: dict | None = None) -> None:
    oracle = solve(problem, "brute", objective=objective)
    dp = solve(problem, "dp", objective=objective)
    result = solve(problem, "milp", objective=objective, options=options)
    assert (oracle.status == "infeasible") == (dp.status == "infeasible") == (result.status == "infeasible"), (
        oracle.message,
        result.message,
    )
    if oracle.status == "infeasible":
        assert result.plan is None and result.message
        return
    assert result.status == "optimal", result.message
    assert result.value == pytest.approx(oracle.value, rel=REL)
    assert dp.value == pytest.approx(oracle.value, rel=REL)
    assert evaluate(problem, result.plan, objective).value == result.value
    check_plan(problem, result)
    check_plan(problem, dp)
    assert result.bound <= result.value
    assert result.gap <= REL


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(objectives=("bottleneck",)))
def test_highs_matches_brute_and_dp_bottleneck(problem):
    agree(problem, "bottleneck")


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(objectives=("iteration",)))
def test_highs_matches_brute_and_dp_iteration(problem):
    agree(problem, "iteration")


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_cbc_matches_brute_and_dp(problem):
    agree(problem, problem.objective, CBC)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # PuLP 3 announcing its 4.0 API
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data(), small_problems())
def test_every_valid_plan_is_a_solution_of_the_milp_at_its_cost(data, problem):
    """Completeness: pinning the decisions to any valid plan is feasible and costs what evaluate says."""
    plan, true_value = draw_valid_plan(data, problem)
    assert_plan_is_a_model_solution(problem, plan, true_value)


def assert_plan_is_a_model_solution(problem: Problem, plan: Plan, true_value: float) -> None:
    """Pinning the MILP's decisions to the valid ``plan`` is feasible and costs ``true_value``."""
    slots = slot_data(problem, problem.objective)
    lp, var = build_milp(slots)
    values = start_values(var, slots, decisions_of_plan(slots, plan.with_device_ids()))
    for v, value in values.items():
        if v.cat == pulp.LpInteger:  # pin the decisions (binaries), let the times follow
            v.lowBound = v.upBound = value
    lp.solve(pulp.HiGHS(msg=False))
    assert pulp.LpStatus[lp.status] == "Optimal"
    assert pulp.value(lp.objective) == pytest.approx(true_value, rel=1e-7, abs=1e-9)


def test_shared_examples_on_both_backends(examples):
    lesson = load_problem(examples / "rebalance_4gpu.json")
    toy = load_problem(examples / "vla_toy_2x4.json")
    for options in ({}, CBC):
        r = solve(lesson, "milp", options=options)
        assert r.status == "optimal" and r.value == pytest.approx(22.0, rel=1e-12)
        r = solve(toy, "milp", options=options)
        assert r.status == "optimal" and r.value == pytest.approx(256.21445621333334, rel=1e-12)
        assert r.bound <= r.value and r.gap < 1e-6


def test_infeasible_problems_say_why():
    problem = memory_bound_infeasible()
    for options in ({}, CBC):
        result = solve(problem, "milp", options=options)
        assert result.status == "infeasible" and result.plan is None
        assert result.message == explain_infeasible(problem)


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, CBC], ids=["highs", "cbc"])
def test_time_limit_gives_a_feasible_plan_a_bound_and_a_gap(options):
    problem = vla_like_problem(64, 4, 8, seed=0)
    greedy = solve(problem, "greedy")
    result = solve(problem, "milp", time_limit=3.0, options=options)
    assert result.status == "feasible", result.message
    assert result.bound is not None and 0 < result.bound <= result.value
    assert result.gap is not None and 0 < result.gap < 1
    assert result.value <= greedy.value  # started from the greedy plan
    evaluate(problem, result.plan)


@pytest.mark.slow
def test_planted_optimum():
    problem, optimum = planted_problem(30, 4, [8, 16, 8])
    result = solve(problem, "milp")
    assert result.status == "optimal" and result.value == pytest.approx(optimum, rel=REL)


def test_warm_start_unknown_backend_and_topology(examples):
    toy = load_problem(examples / "vla_toy_2x4.json")
    best = solve(toy, "brute")
    used = solve(toy, "milp", warm_start=best)
    assert used.extra["milp"]["hint"] == "warm_start"
    assert used.value == pytest.approx(best.value, rel=REL)
    ignored = solve(toy, "milp", warm_start=Plan((Stage(0, toy.num_layers - 1, 3, 3, 1),)))
    assert ignored.extra["warm_start"].startswith("ignored: rule")
    with pytest.raises(SolverError, match="backend"):
        solve(toy, "milp", options={"backend": "gurobi"})
    doc = toy.to_dict()
    doc["cluster"]["topology"] = {"edges": [[i, i + 1, 10.0] for i in range(7)]}
    refused = solve(Problem.from_dict(doc), "milp")
    assert refused.status == "error" and "custom cluster topologies" in refused.message


@pytest.mark.slow
def test_cli_json_is_not_polluted_by_the_solver(cli, examples):
    for backend in ("highs", "cbc"):
        out = cli("solve", examples / "rebalance_4gpu.json", "--method", "milp", "--json", "-o", f"backend={backend}")
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc["status"] == "optimal" and doc["value"] == pytest.approx(22.0, rel=1e-12)
    out = cli("solve", examples / "rebalance_4gpu.json", "--method", "milp", "-o", "backend=gurobi")
    # the solver contract's door: one line naming the option and what it accepts
    assert out.returncode == 2 and "options.backend" in out.stderr and "gurobi" in out.stderr, out.stderr


@pytest.mark.parametrize("method", ["milp", "cpsat"])
def test_time_limit_covers_building_the_model(examples, method):
    # building a large slot model takes minutes; the time limit must stop it, not only the search. The solve then
    # answers greedy's plan (greedy always tries its first stage count), saying the build was cut short
    r = solve(load_problem(examples / "rebalance_4gpu.json"), method, time_limit=1e-6)
    assert r.status == "feasible" and r.extra.get("fallback") == "greedy"
    assert "while building the model" in r.message


class _Event:
    def __init__(self):
        self.interrupted = False

    def interrupt(self):
        self.interrupted = True


def _polls(stop: float, times: list[float]) -> list[bool]:
    """Which of the polls at ``times`` (the solver started at 0) a PollingStop interrupts."""
    from partitioner.solvers.milp.backends import PollingStop

    clock = iter(times)
    stopper = PollingStop(stop, 0.0, clock=lambda: next(clock))
    out = []
    for _ in times:
        event = _Event()
        stopper(event)
        out.append(event.interrupted)
    return out


def test_polling_stop_interrupts_at_the_last_poll_before_the_deadline():
    """HiGHS polls seconds apart within a MIP: stop when the next poll, one gap away, would be late."""
    # polls 5 s apart, deadline 12: the poll at 10 expects the next at 15 > 12, so it stops there
    assert _polls(12.0, [5.0, 10.0, 15.0]) == [False, True, True]
    # frequent polls run on up to the deadline
    ticks = [0.1 * i for i in range(1, 120)]
    stops = _polls(10.0, ticks)
    first = stops.index(True)
    assert 9.8 < ticks[first] <= 10.0 and all(stops[first:])
    # a gap that shrinks lets the search go on: the estimate is the last gap, not the widest
    assert _polls(12.0, [7.0, 8.0, 9.0]) == [True, False, False]
    assert _polls(20.0, [7.0, 8.0, 9.0]) == [False, False, False]


def test_a_start_a_rounding_error_outside_its_bounds_is_clamped():
    """A start computed in floating point (-6e-08 under a lower bound of 0) is a hint: PuLP refused it with a
    ValueError and the interleaved milp failed on it (found by hypothesis on a format-v3 problem)."""
    import pulp

    from partitioner.solvers.milp.backends import set_starts

    low, both = pulp.LpVariable("low", lowBound=0), pulp.LpVariable("both", lowBound=0, upBound=1)
    set_starts({low: -5.960464477539063e-08, both: 1 + 1e-9})
    assert low.varValue == 0 and both.varValue == 1
