"""The greedy baseline: valid plans, never better than the optimum, never claims optimality."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from partitioner import load_problem, solve
from partitioner.solvers.greedy import balance_cuts, grow_sizes
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


def test_grow_sizes_uses_every_device():
    assert sum(grow_sizes([5.0, 1.0, 1.0], (1, 2, 4, 8, 16), 16)) == 16
    assert grow_sizes([1.0] * 3, (1, 2, 4), 2) is None
