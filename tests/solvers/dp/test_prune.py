"""The bound-and-prune passes of the iteration walks: 1F1B's (:meth:`.ThresholdWalks._comm_free_pass`) and
zb-h1's (:meth:`.ThresholdWalks._zb_comm_free`).

The pass walks the problem without transfers first and drops the stage counts
(levels) whose floor cannot beat the incumbent. It must never change an
answer: with the pass and without it dp gives the same status and value
(and, on problems small enough, brute's); its floors are lower bounds on
every plan of that many stages; and on the VLA shape it caps the levels.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.synthetic import vla_problem
from checks import check_plan
from partitioner import solve
from partitioner.problem import Problem
from partitioner.solvers.dp.solver import DPModel
from partitioner.solvers.dp.walks import _level_floors
from strategies import small_problems, small_v2_problems

REL = 1e-9
INF = math.inf


def with_transfers(problem: Problem, floor: int, m: int, schedule: str = "1f1b") -> Problem:
    """``problem`` under ``schedule`` with ``m`` microbatches and every boundary carrying at least ``floor`` x
    (its index + 1) bytes, so that the walk has placement states and the pass runs."""
    doc = problem.to_dict()
    for n, layer in enumerate(doc["layers"]):
        layer["out_bytes"] = max(layer["out_bytes"], floor * (n + 1))
    doc["training"]["schedule"] = schedule
    doc["training"]["microbatches"] = m
    doc["training"]["objective"] = "iteration"
    return Problem.from_dict(doc)


def unpruned(problem: Problem, **kwargs):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DPModel, "prune_levels", False)
        return solve(problem, "dp", **kwargs)


def same_answer(problem: Problem, **kwargs) -> None:
    pruned = solve(problem, "dp", **kwargs)
    plain = unpruned(problem, **kwargs)
    assert pruned.status == plain.status, (pruned.message, plain.message)
    if plain.status == "optimal":
        assert pruned.value == pytest.approx(plain.value, rel=REL)
        assert pruned.bound == pytest.approx(pruned.value, rel=REL)
        check_plan(problem, pruned)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), v2=st.booleans(), floor=st.integers(1, 3000), m=st.integers(2, 9))
def test_the_pass_never_changes_dp_s_answer(data, v2, floor, m):
    base = data.draw(small_v2_problems(max_layers=5) if v2 else small_problems(max_layers=7))
    same_answer(with_transfers(base, floor, m))


@pytest.mark.parametrize("schedule,top", [("1f1b", 3000), ("zb-h1", 30000)])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), m=st.integers(2, 9))
def test_the_pass_keeps_the_optimum_from_a_warm_start(schedule, top, data, m):
    # an optimal warm start: the pass may prove it optimal without the walk (no level can beat it; under
    # zb-h1 without any walk with transfers)
    floor = data.draw(st.integers(1, top), label="floor")
    problem = with_transfers(data.draw(small_problems(max_layers=6)), floor, m, schedule)
    plain = unpruned(problem)
    if plain.plan is None:
        return
    warm = solve(problem, "dp", warm_start=plain.plan)
    assert warm.status == plain.status == "optimal"
    assert warm.value == pytest.approx(plain.value, rel=REL)
    check_plan(problem, warm)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), floor=st.integers(1, 3000), m=st.integers(2, 9))
def test_the_pruned_answer_is_brute_s(data, floor, m):
    problem = with_transfers(data.draw(small_problems(max_layers=5)), floor, m)
    oracle = solve(problem, "brute")
    if oracle.status == "error":  # an enumeration too large for the oracle
        return
    result = solve(problem, "dp")
    assert result.status == oracle.status, (oracle.message, result.message)
    if oracle.status == "optimal":
        assert result.value == pytest.approx(oracle.value, rel=1e-6)


def test_level_floors_bound_each_interval_of_the_slowest_stage():
    # probes at T = 10, 20, 30: least sums per level; least slowest stage per level 4 (level 1), 12 (level 2)
    probes = [(20.0, {1: 50.0, 2: 40.0}), (10.0, {1: 80.0, 2: INF}), (30.0, {1: 45.0, 2: 35.0})]
    maxes = {1: 4.0, 2: 12.0}
    floors = _level_floors(probes, maxes, 2.0, 30.0)
    # level 1: [4, 10] 80 + 2*4 = 88; (10, 20] 50 + 2*10 = 70; (20, 30] 45 + 2*20 = 85
    # level 2: [12, 10] none; (10, 20] 40 + 2*12 = 64; (20, 30] 35 + 2*20 = 75
    assert floors == {1: 70.0, 2: 64.0}
    # a probe above the threshold the pass stops at is left out
    assert _level_floors(probes, maxes, 2.0, 20.0) == {1: 70.0, 2: 64.0}
    assert _level_floors(probes, maxes, 2.0, 10.0) == {1: 88.0, 2: INF}


def floors_hold(problem: Problem) -> int:
    """The pass's floor per stage count against the optimum with that count forced: no plan of P stages
    beats the floor, or else the best incumbent (the only value the floor is asked to decide against).
    Returns the number of stage counts checked."""
    model = DPModel(problem)
    model.prepare()
    model.best_known = model.proven_bound = None
    found = model._comm_free_pass(None, model.m - 1, INF, None)
    if not found.floors or found.value is None:
        return 0
    doc, checked = problem.to_dict(), 0
    doc.pop("stages", None)
    for P, floor in found.floors.items():
        doc["stages"] = {"min": P, "max": P} if P < model.K or not model.bucket else {"min": P}
        exact = solve(Problem.from_dict(doc), "dp")
        if exact.plan is not None:
            assert exact.value >= min(floor, found.value) * (1 - 1e-9), (P, exact.value, floor, found.value)
            checked += 1
    return checked


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), floor=st.integers(1, 30000), m=st.integers(2, 9))
def test_the_floors_bound_every_plan_of_their_stage_count(data, floor, m):
    # transfers up to far above the compute: the plan without them is often a poor incumbent, and the
    # floors of stage counts that beat it are checked against their optima
    base = data.draw(small_problems(max_layers=6))
    doc = base.to_dict()
    doc.pop("stages", None)  # every stage count open: the floors of all levels are checked
    floors_hold(with_transfers(Problem.from_dict(doc), floor, m))


def test_the_floors_bound_every_plan_of_the_vla_shape():
    assert floors_hold(vla_problem(4, 12, 4, nodes=2, gpus_per_node=4, microbatches=8)) >= 2


def test_the_vla_shape_drops_the_levels_no_winner_uses():
    # 32 layers on 4 x 8 GPUs, m = 16: the levels the walk fills shrink, the answer does not change
    problem = vla_problem(6, 20, 6, nodes=4, gpus_per_node=8, microbatches=16)
    pruned, plain = solve(problem, "dp"), unpruned(problem)
    assert pruned.status == plain.status == "optimal"
    assert pruned.value == pytest.approx(plain.value, rel=REL)
    assert pruned.extra["dp"]["levels"] < plain.extra["dp"]["levels"]
    assert pruned.extra["dp"]["comm_free_bound"] <= pruned.value * (1 + 1e-12)
    check_plan(problem, pruned)


# zb-h1: the walks without transfers, one per k, bound the walks with them (:meth:`.ThresholdWalks._zb_comm_free`)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), v2=st.booleans(), floor=st.integers(1, 30000), m=st.integers(2, 9), bins=st.booleans())
def test_the_zb_pass_never_changes_dp_s_answer(data, v2, floor, m, bins):
    # the pass runs with placement states (run, bins): bins forced on half the cases, whatever the cluster
    base = data.draw(small_v2_problems(max_layers=5) if v2 else small_problems(max_layers=7))
    same_answer(with_transfers(base, floor, m, "zb-h1"), options={"placement": "bins"} if bins else None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), floor=st.integers(1, 30000), m=st.integers(2, 9), bins=st.booleans())
def test_the_zb_pruned_answer_is_brute_s(data, floor, m, bins):
    problem = with_transfers(data.draw(small_problems(max_layers=5)), floor, m, "zb-h1")
    oracle = solve(problem, "brute")
    if oracle.status == "error":  # an enumeration too large for the oracle
        return
    result = solve(problem, "dp", options={"placement": "bins"} if bins else None)
    assert result.status == oracle.status, (oracle.message, result.message)
    if oracle.status == "optimal":
        assert result.value == pytest.approx(oracle.value, rel=1e-6)


def zb_floors_hold(problem: Problem) -> int:
    """The zb-h1 pass's floor per k against the optimum with every stage count of that k forced (k = m - P + 1
    for P < m, every P >= m for k = 1): no plan of that k beats the floor. Returns the ks checked."""
    model = DPModel(problem)
    model.parts = "uw"  # zb-h1's iteration estimate (as optimize sets it)
    model.prepare()
    model.best_known = model.proven_bound = None
    ks = sorted({max(model.m - level + 1, 1) for level in range(1, model.K + 1) if model._level_ok(level)})
    floors, _, _ = model._zb_comm_free(ks, None, model.least_u_sum(), (INF, None, "none"))
    whole = solve(problem, "dp")
    if whole.value is not None:  # the pass's bound (kept for a solve the time limit cuts) is at most the optimum
        assert model.proven_bound is not None and model.proven_bound <= whole.value * (1 + 1e-9)
    doc, checked = problem.to_dict(), 0
    doc.pop("stages", None)
    for k, floor in floors.items():
        doc["stages"] = {"min": model.m} if k == 1 else {"min": model.m - k + 1, "max": model.m - k + 1}
        if doc["stages"].get("max", INF) > problem.num_layers:
            continue
        exact = solve(Problem.from_dict(doc), "dp")
        if exact.plan is not None:
            assert exact.value >= floor * (1 - 1e-9), (k, exact.value, floor)
            checked += 1
    return checked


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), floor=st.integers(1, 30000), m=st.integers(2, 6))
def test_the_zb_floors_bound_every_plan_of_their_k(data, floor, m):
    base = data.draw(small_problems(max_layers=6))
    doc = base.to_dict()
    doc.pop("stages", None)
    zb_floors_hold(with_transfers(Problem.from_dict(doc), floor, m, "zb-h1"))


def test_the_zb_floors_bound_every_plan_of_the_vla_shape():
    doc = vla_problem(4, 12, 4, nodes=2, gpus_per_node=4, microbatches=8).to_dict()
    doc["training"]["schedule"] = "zb-h1"
    assert zb_floors_hold(Problem.from_dict(doc)) >= 2


def test_the_zb_pass_keeps_the_vla_answer():
    doc = vla_problem(6, 20, 6, nodes=4, gpus_per_node=8, microbatches=16).to_dict()
    doc["training"]["schedule"] = "zb-h1"
    problem = Problem.from_dict(doc)
    pruned, plain = solve(problem, "dp"), unpruned(problem)
    assert pruned.status == plain.status == "optimal"
    assert pruned.value == pytest.approx(plain.value, rel=REL)
    assert pruned.extra["dp"]["comm_free_bound"] <= pruned.value * (1 + 1e-12)
    assert pruned.extra["dp"]["recursions"] <= plain.extra["dp"]["recursions"] + pruned.extra["dp"]["comm_free_recursions"]
    check_plan(problem, pruned)
