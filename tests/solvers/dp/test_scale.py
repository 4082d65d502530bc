"""dp at scale (issue 34): what its tables keep, what it refuses before allocating, and the bound it proves when
its budget cuts the search -- the optimum of the problem without transfers, a lower bound because transfers only
add to every stage."""
from __future__ import annotations

import math

import pytest

from benchmarks.synthetic import synthetic_problem
from checks import check_plan
from partitioner import solve
from partitioner.core.limits import MAX_DEVICES, MAX_NODES
from partitioner.problem import Problem
from partitioner.solvers.dp.method import _without_transfers
from partitioner.solvers.dp.placement import automaton_bytes
from partitioner.solvers.dp.solver import DPModel


def roomy(problem: Problem, memory: int = 80 * 2**30) -> Problem:
    doc = problem.to_dict()
    doc["cluster"]["gpu_memory_bytes"] = memory
    return Problem.from_dict(doc)


def needs(problem: Problem, kind: str) -> int:
    model = DPModel(problem)
    model.prepare()
    return model.recursion_bytes(model._automaton_for(kind))


@pytest.mark.parametrize("objective", ["iteration", "bottleneck"])
@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "gpipe"])
def test_a_budget_too_small_for_the_placement_states_proves_the_bound_without_transfers(objective, schedule):
    doc = synthetic_problem(12, 4, 8, layouts=None, transfers=True, seed=3, microbatches=4, headroom=2.0).to_dict()
    doc["training"]["schedule"] = schedule
    problem = Problem.from_dict(doc)
    full, free = needs(problem, DPModel(problem).natural_placement()), needs(problem, "none")
    assert free < full
    budget = (free + full) / 2 / 2**30
    cut = solve(problem, "dp", objective=objective, options={"memory_budget_gb": budget}, time_limit=120)
    exact = solve(problem, "dp", objective=objective, time_limit=120)
    relaxed = solve(_without_transfers(problem), "dp", objective=objective, time_limit=120)
    assert exact.status == relaxed.status == "optimal" and cut.status in ("feasible", "optimal")
    check_plan(problem, cut)
    assert cut.bound is not None
    assert cut.bound >= relaxed.value * (1 - 1e-8)  # the relaxation's optimum is what the cut search proves ...
    assert cut.bound <= exact.value * (1 + 1e-9)  # ... and it is a lower bound of the real optimum
    assert cut.value >= exact.value * (1 - 1e-9)
    if cut.status == "feasible":
        assert "without transfers" in cut.message and "would need" in cut.message


def test_an_automaton_over_the_budget_is_refused_before_it_is_built():
    # 4,096 GPUs offering one layout per stage size: 515 sizes, whose automaton would hold about 515^2 transitions
    problem = roomy(synthetic_problem(4, 512, 8, layouts=1, transfers=True, seed=1, microbatches=2))
    model = DPModel(problem)
    assert automaton_bytes("run", model.sizes, model.G) > 0.01 * 2**30
    r = solve(problem, "dp", options={"memory_budget_gb": 0.01}, time_limit=120)
    assert r.status == "feasible" and r.plan is not None and r.bound is not None
    assert "placement automaton" in r.message
    check_plan(problem, r)


def test_clusters_up_to_the_largest_accepted_load():
    assert MAX_DEVICES == MAX_NODES == 131_072
    doc = synthetic_problem(2, 1, 8, layouts=1, transfers=False, seed=0).to_dict()
    doc["cluster"]["nodes"] = MAX_DEVICES // 8
    doc["layers"] = [dict(layer, costs={"dp131072tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 10,
                                                       "act_bytes": 10}}) for layer in doc["layers"]]
    problem = Problem.from_dict(doc)
    assert problem.num_devices == MAX_DEVICES
    r = solve(problem, "dp", time_limit=60)
    assert r.status == "optimal" and math.isclose(r.value, 3.0 * 2 + 7 * 3.0 * 2)  # one stage: 2 t + 7 t (m = 8)
