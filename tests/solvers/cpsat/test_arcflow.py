"""cpsat's arc-flow formulation (comm-free 1F1B problems): agreement with brute and dp, bounds, replays.

Random small problems are made comm-free (every ``out_bytes`` 0) so that the
arc-flow model is the one ``cpsat`` solves (checked through ``extra``); memory
is drawn tight, so the stash (stages from the end) decides what fits.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from checks import check_plan
from partitioner import Problem, evaluate, solve
from partitioner.solvers.cpsat.arcflow import arcflow_reason, build_graph, path_of_plan
from partitioner.solvers.slot.data import integer_times, slot_data
from strategies import draw_valid_plan, examples, small_problems
from tests.solvers.cpsat.test_cpsat import agree as agree_cpsat

REL = 1e-6
CPSAT = {"num_workers": 1}
SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def comm_free(problem: Problem, schedule: str | None = None) -> Problem:
    """The same problem with no bytes crossing any stage boundary (and, optionally, another schedule)."""
    doc = problem.to_dict()
    for layer in doc["layers"]:
        layer["out_bytes"] = 0
    if schedule is not None:
        doc["training"]["schedule"] = schedule
    return Problem.from_dict(doc)


@st.composite
def comm_free_problems(draw, objectives=("bottleneck", "iteration")):
    return comm_free(draw(small_problems(objectives=objectives)))


def agree(problem: Problem, objective: str, solver_seed: int = 0) -> None:
    """The problem goes to the arc-flow model, and test_cpsat's agreement checks hold (brute, dp,
    statuses, values, evaluate, replay, bound <= value within the gap)."""
    assert not arcflow_reason(problem, objective, slot_data(problem, objective))
    agree_cpsat(problem, objective, solver_seed)


@pytest.mark.slow
@seed(1301)
@SETTINGS
@given(comm_free_problems(objectives=("bottleneck",)), st.integers(0, 2))
def test_arcflow_matches_brute_and_dp_bottleneck(problem, solver_seed):
    agree(problem, "bottleneck", solver_seed=solver_seed)


@pytest.mark.slow
@seed(1302)
@SETTINGS
@given(comm_free_problems(objectives=("iteration",)), st.integers(0, 2))
def test_arcflow_matches_brute_and_dp_iteration(problem, solver_seed):
    agree(problem, "iteration", solver_seed=solver_seed)


@pytest.mark.slow
@seed(1303)
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(comm_free_problems())
def test_arcflow_without_a_hint_matches_brute(problem):
    oracle = solve(problem, "brute")
    result = solve(problem, "cpsat", options={**CPSAT, "hint": False})
    assert result.status == oracle.status, result.message
    if oracle.status == "optimal":
        assert result.extra["cpsat"]["model"] == "arc-flow"
        assert result.value == pytest.approx(oracle.value, rel=REL)
        assert oracle.value * (1 - REL) <= result.bound <= result.value
        check_plan(problem, result)


@pytest.mark.slow
@seed(1304)
@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(comm_free_problems(objectives=("bottleneck",)))
def test_arcflow_solves_zb_h1_bottleneck_like_1f1b(problem):
    """zb-h1's bottleneck and stash are 1F1B's: the same optimum, proven by the arc-flow model."""
    zb = comm_free(problem, "zb-h1")
    result = solve(zb, "cpsat", options=CPSAT)
    oracle = solve(problem, "brute")
    assert result.status == oracle.status
    if oracle.status == "optimal":
        assert result.extra["cpsat"]["model"] == "arc-flow"
        assert result.value == pytest.approx(oracle.value, rel=REL)
        assert result.bound <= result.value


@pytest.mark.slow
@seed(1305)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data(), comm_free_problems())
def test_every_valid_plan_is_a_path_no_faster_than_evaluate(data, problem):
    check_plan_is_a_path(data, problem)


def check_plan_is_a_path(data, problem: Problem) -> None:
    """Completeness: a random valid plan is a path of the graph, and its arcs' units are at most its
    stage times in units plus the model's error per stage (the least-units fitting config is taken)."""
    objective = problem.objective
    plan, _ = draw_valid_plan(data, problem)
    sd = slot_data(problem, objective)
    times = integer_times(sd)  # no ceiling: every plan is in the model
    graph = build_graph(sd, times)
    path = path_of_plan(graph, plan)
    assert path is not None
    ev = evaluate(problem, plan, objective)
    for i, stage in zip(path, reversed(ev.stages)):
        assert graph.arcs[i, 6] <= stage.time_ms * times.scale + times.stage_error


def test_transfers_and_other_schedules_fall_back_to_the_slot_model():
    from partitioner.solvers.slot.data import slot_data as data_of

    doc = {
        "version": 1,
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu_memory_bytes": 100, "intra_node_GBps": 1.0, "inter_node_GBps": 1.0},
        "training": {"microbatches": 4},
        "layers": [{"out_bytes": 10**6, "costs": {"dp1tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 1, "act_bytes": 1}}} for _ in range(3)],
    }
    problem = Problem.from_dict(doc)
    assert arcflow_reason(problem, "iteration", data_of(problem, "iteration"))
    result = solve(problem, "cpsat", options=CPSAT)
    assert result.extra["cpsat"].get("model") != "arc-flow"
    free = comm_free(problem)
    assert not arcflow_reason(free, "iteration", data_of(free, "iteration"))
    for schedule in ("gpipe",):
        other = comm_free(problem, schedule)
        assert arcflow_reason(other, "iteration", data_of(other, "iteration"))


@pytest.mark.parametrize("objective", ["bottleneck", "iteration"])
@pytest.mark.parametrize("shape", [(16, 1, 8, 1), (20, 2, 4, 0), (24, 2, 4, 1)])
def test_memory_bound_synthetic_problems_match_dp(objective, shape):
    """Benchmark-shaped comm-free problems whose memory binds (the stash changes stage times):
    the arc-flow optimum is dp's, and the slot model finds nothing better."""
    from benchmarks.synthetic import synthetic_problem

    layers, nodes, gpus, seed_ = shape
    problem = synthetic_problem(layers, nodes, gpus, None, False, seed=seed_, microbatches=8, objective=objective)
    dp = solve(problem, "dp")
    result = solve(problem, "cpsat", options=CPSAT)
    assert result.extra["cpsat"]["model"] == "arc-flow"
    assert result.extra["cpsat"]["stash_levels"] > 1  # memory depends on the stash here
    assert result.status == dp.status == "optimal", result.message
    assert result.value == pytest.approx(dp.value, rel=REL)
    assert result.bound <= result.value
    check_plan(problem, result)
    slot = solve(problem, "cpsat", options={**CPSAT, "formulation": "slot"}, time_limit=20)
    assert "model" not in slot.extra["cpsat"]
    assert slot.value >= result.value * (1 - REL)


def test_time_limit_cut_answers_feasible_with_a_valid_bound():
    from benchmarks.synthetic import synthetic_problem

    problem = synthetic_problem(64, 4, 8, None, False, seed=2, microbatches=8, objective="iteration")
    result = solve(problem, "cpsat", options=CPSAT, time_limit=1.5)
    assert result.status in ("feasible", "optimal"), result.message
    assert result.bound <= result.value
    dp = solve(problem, "dp")
    assert result.bound <= dp.value * (1 + 1e-12)
    check_plan(problem, result)


def test_a_graph_past_the_arc_cap_falls_back_to_the_slot_model(monkeypatch):
    from benchmarks.synthetic import synthetic_problem
    from partitioner.solvers.cpsat import arcflow

    problem = synthetic_problem(16, 1, 8, None, False, seed=1, microbatches=8, objective="iteration")
    monkeypatch.setattr(arcflow, "MAX_ARCS", 3)
    result = solve(problem, "cpsat", options=CPSAT, time_limit=20)
    assert "model" not in result.extra["cpsat"] and "arcs" in result.extra["arcflow"]
    assert result.status == "optimal"
    assert result.value == pytest.approx(solve(problem, "dp").value, rel=REL)


def test_formulation_option_is_checked():
    from partitioner import SolverError

    problem = comm_free(Problem.from_dict({
        "version": 1,
        "cluster": {"nodes": 1, "gpus_per_node": 1, "gpu_memory_bytes": 100, "intra_node_GBps": 1.0, "inter_node_GBps": 1.0},
        "training": {"microbatches": 2},
        "layers": [{"costs": {"dp1tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 1, "act_bytes": 1}}}],
    }))
    with pytest.raises(SolverError, match="formulation"):
        solve(problem, "cpsat", options={**CPSAT, "formulation": "arcs"})


def test_a_limit_that_runs_out_while_the_flow_model_is_built_returns_the_hint(monkeypatch):
    """Building the flow model of 150,000 arcs takes seconds: it checks the deadline as it goes, and a limit
    that runs out there answers the greedy hint (feasible, the analytic bound), not a late search."""
    from benchmarks.synthetic import synthetic_problem
    from partitioner.solvers.cpsat import arcflow_run
    from partitioner.solvers.slot.run import BuildTimeout

    calls = []

    def expired(deadline):
        def check():
            calls.append(deadline)
            raise BuildTimeout

        return check

    monkeypatch.setattr(arcflow_run, "build_guard", expired)
    problem = synthetic_problem(16, 1, 8, None, False, seed=1, microbatches=8, objective="iteration")
    greedy = solve(problem, "greedy")
    result = solve(problem, "cpsat", options=CPSAT, time_limit=30)
    assert calls and calls[0] is not None  # the flow model checked the solve's deadline
    assert result.status == "feasible" and "ran out while building the model" in result.message
    assert result.value == pytest.approx(greedy.value, rel=1e-12)
    assert 0 < result.bound <= result.value
    check_plan(problem, result)
