"""cpsat's arc-flow model on format-v2 problems of several module segments (comm-free 1F1B).

Random small v2 problems (:func:`strategies.small_v2_problems`: 2-4 module
runs, variants, tight memory) are made comm-free, so that ``cpsat`` answers
them on the arc-flow model (checked through ``extra``). An arc's units must be
those of a real fitting config tuple (one config per segment, exact-prefix
units per segment plus reshard units) and the least such units: both are
checked against an enumeration of every tuple written here, independently of
:class:`~partitioner.solvers.cpsat.arcflow.UnitCosts`.
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from checks import check_plan
from partitioner import evaluate, solve
from partitioner.solvers.cpsat.arcflow import arcflow_reason, build_graph
from partitioner.solvers.slot.data import integer_times, slot_data
from strategies import examples, small_v2_problems
from tests.solvers.cpsat.test_arcflow import check_plan_is_a_path, comm_free

REL = 1e-6
CPSAT = {"num_workers": 1}
SETTINGS = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@st.composite
def comm_free_v2(draw, objectives=("bottleneck", "iteration"), schedule=None):
    return comm_free(draw(small_v2_problems(objectives=objectives)), schedule)


def agree_with_brute(problem, objective: str, solver_seed: int = 0, hint: bool = True) -> None:
    """brute and cpsat agree; cpsat answered on the arc-flow model; the plan is evaluated and replayed."""
    data = slot_data(problem, objective)
    assert data.multi and not arcflow_reason(problem, objective, data)
    oracle = solve(problem, "brute", objective=objective)
    result = solve(problem, "cpsat", objective=objective, seed=solver_seed, options={**CPSAT, "hint": hint})
    assert result.status == oracle.status, (result.message, oracle.message)
    if oracle.status == "infeasible":
        assert result.plan is None and result.message
        return
    assert result.extra["cpsat"]["model"] == "arc-flow", result.extra
    assert oracle.status == result.status == "optimal", result.message
    assert result.value == pytest.approx(oracle.value, rel=REL)
    assert evaluate(problem, result.plan, objective).value == result.value
    assert oracle.value * (1 - REL) <= result.bound <= result.value
    check_plan(problem, result)


@pytest.mark.slow
@seed(1311)
@SETTINGS
@given(comm_free_v2(objectives=("bottleneck",)), st.integers(0, 2))
def test_arcflow_v2_matches_brute_bottleneck(problem, solver_seed):
    agree_with_brute(problem, "bottleneck", solver_seed)


@pytest.mark.slow
@seed(1312)
@SETTINGS
@given(comm_free_v2(objectives=("iteration",)), st.integers(0, 2))
def test_arcflow_v2_matches_brute_iteration(problem, solver_seed):
    agree_with_brute(problem, "iteration", solver_seed)


@seed(1313)
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(comm_free_v2())
def test_arcflow_v2_without_a_hint_matches_brute(problem):
    agree_with_brute(problem, problem.objective, hint=False)


@seed(1314)
@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(comm_free_v2(objectives=("bottleneck",), schedule="zb-h1"))
def test_arcflow_v2_solves_zb_h1_bottleneck(problem):
    agree_with_brute(problem, "bottleneck")


def _tuples(data, a: int, b: int, devices: int, stash: int):
    """Every fitting config tuple (layout index per segment) of stage a..b: ``(tuple, segments)``."""
    problem = data.problem
    segments = problem.segments(a, b)
    choices = []
    for s, t in segments:
        choices.append([k for k, lay in enumerate(data.layouts) if lay.devices == devices and all(data.present[k][s : t + 1])])
    cap = problem.cluster.gpu_memory_bytes
    for combo in itertools.product(*choices):
        need = sum(data.weight[k][i] + stash * data.act[k][i] for (s, t), k in zip(segments, combo) for i in range(s, t + 1))
        if need <= cap:
            yield combo, segments


def _units(data, times, combo, segments) -> int:
    """The slot model's units of a tuple: exact-prefix units per segment plus the reshard units between them."""
    ends = {last: g for g, (_, last) in enumerate(data.groups)}
    total = 0
    for n, ((s, t), k) in enumerate(zip(segments, combo)):
        total += times.time_prefix[k][t + 1] - times.time_prefix[k][s]
        if n:
            pair = (data.mesh_index[combo[n - 1]], data.mesh_index[k])
            total += 0 if pair[0] == pair[1] else times.reshard[ends[s - 1]].get(pair, 0)
    return total


@seed(1315)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(small_v2_problems())
def test_every_arc_has_the_least_units_of_a_real_fitting_tuple(problem):
    """Each arc's units are the least over the stage's fitting config tuples (enumerated here), and
    its configs (:meth:`ArcGraph.stage_configs`) are such a tuple, with exactly those units.

    The problems keep their bytes: comm-free ones have no reshards (r is proportional to the
    out_bytes of a segment's last layer), and the stage tables must count them all the same.
    """
    data = slot_data(problem, problem.objective)
    times = integer_times(data)  # no ceiling
    graph = build_graph(data, times)
    seen = {}
    for i, (_, _, a, b, d, s, units) in enumerate(graph.arcs.tolist()):
        key = (a, b, d, s)
        if key not in seen:
            seen[key] = min((_units(data, times, combo, segs) for combo, segs in _tuples(data, a, b, d, s)), default=None)
        assert seen[key] == units
        configs = graph.stage_configs(i)
        chosen = tuple(k for k in configs if k >= 0)
        segments = problem.segments(a, b)
        assert len(chosen) == len(segments)
        covered = [g for g, (first, last) in enumerate(data.groups) if first <= b and last >= a]
        assert [g for g, k in enumerate(configs) if k >= 0] == covered
        assert chosen in {combo for combo, _ in _tuples(data, a, b, d, s)}
        assert _units(data, times, chosen, segments) == units


@pytest.mark.slow
@seed(1316)
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data(), comm_free_v2())
def test_every_valid_v2_plan_is_a_path_no_slower_than_evaluate(data, problem):
    check_plan_is_a_path(data, problem)


@pytest.mark.parametrize("objective", ["bottleneck", "iteration"])
@pytest.mark.parametrize("shape", [(16, 1, 8, 0), (24, 2, 4, 1)])
def test_synthetic_v2_problems_match_dp(objective, shape):
    """Benchmark-shaped v2 problems (4 modules, 3 variants): the arc-flow optimum is dp's."""
    from benchmarks.synthetic import synthetic_v2_problem

    layers, nodes, gpus, seed_ = shape
    problem = synthetic_v2_problem(layers, nodes, gpus, None, False, seed=seed_, microbatches=8, objective=objective)
    assert slot_data(problem, objective).multi
    dp = solve(problem, "dp")
    result = solve(problem, "cpsat", options=CPSAT)
    assert result.extra["cpsat"]["model"] == "arc-flow"
    assert result.status == dp.status == "optimal", result.message
    assert result.value == pytest.approx(dp.value, rel=REL)
    assert result.bound <= result.value
    check_plan(problem, result)
