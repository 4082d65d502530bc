"""The threshold search behind dp's iteration walks: on staircases with known optima, and dp against
an exhaustive walk of every Pareto point and against brute on problems whose walks visit several points."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.synthetic import synthetic_problem
from checks import check_plan
from partitioner import solve
from partitioner.problem import Problem
from partitioner.solvers.dp.solver import DPModel
from partitioner.solvers.dp.walks import threshold_search
from strategies import examples, small_problems

INF = math.inf


class Staircase:
    """``minsum`` over a fixed set of plans (sum, max): the least sum under a threshold, and among the
    plans with that sum the one with the *largest* max (the least helpful tie a recursion may return)."""

    def __init__(self, plans):
        self.plans = list(plans)
        self.calls = []

    def __call__(self, T):
        self.calls.append(T)
        ok = [(f, -M) for f, M in self.plans if M <= T]
        if not ok:
            return INF, None, None
        f, negM = min(ok)
        return f, -negM, (f, -negM)

    def free(self):
        return self(INF)

    def optimum(self, coef):
        return min(f + coef * M for f, M in self.plans)


def continuous(x, strict):
    return x * (1 - 4e-12) if strict else x


def snapped(values):
    cand = np.unique(np.asarray(values, float))

    def below(x, strict):
        i = int(np.searchsorted(cand, x * (1 - 2e-12) if strict else x, side="right")) - 1
        return float(cand[i]) if i >= 0 else -INF

    return below


def test_a_staircase_whose_optimum_sits_between_the_descent_probes():
    # Pareto points (sum, max): free optimum (100, 50); the optimum of f + 3 M is (130, 21): 193
    plans = [(100, 50), (103, 45), (110, 40), (118, 30), (125, 25), (130, 21), (160, 20), (200, 19), (300, 18)]
    stairs = Staircase(plans)
    free = stairs.free()
    (value, payload), calls = threshold_search(stairs, 3.0, free, 18.0, snapped([M for _, M in plans]))
    assert value == 193 and payload == (130, 21)
    # the descent probes halfway to the lowest bottleneck: 34 -> the point (118, 30); then 24 -> (130, 21)
    # improves; then 19.5 -> (200, 19) does not; the gaps then need only the points above and below 21
    assert stairs.calls[1:4] == [30, 21, 19]
    assert calls == len(stairs.calls) - 1 < len(plans) - 1


def test_a_gap_is_closed_by_the_bound_without_a_probe():
    # after the free optimum (10, 100) and a probe giving (40, 5) [value 40 + 5 = 45], the gap (5, 100)
    # with sum >= 10 can hold a winner only below (45 - 10) / 1 = 35: the next probe is at 35, not at 100
    plans = [(10, 100), (12, 90), (20, 36), (30, 34), (40, 5)]
    stairs = Staircase(plans)
    (value, _), _ = threshold_search(stairs, 1.0, stairs.free(), 5.0, continuous)
    assert value == 45
    assert 90 * (1 - 4e-12) not in stairs.calls and all(T <= 52.5 for T in stairs.calls[1:])


def test_a_cap_stops_the_search_and_no_plan_means_none_found():
    plans = [(10, 100), (40, 5)]
    stairs = Staircase(plans)
    (value, _), calls = threshold_search(stairs, 1.0, stairs.free(), 5.0, continuous, cap=-INF)
    assert value == 110 and calls == 0 and stairs.calls == [INF]


def test_a_plan_at_exactly_the_lowest_bottleneck_is_found():
    # the descent stops at (46, 6) [76 > 75]; the gaps then meet (49, 4) [69]; the optimum (53, 1) [58] has
    # its max at the lowest bottleneck itself, below every probe so far: the bottom gap includes it
    plans = [(49.0, 4.0), (25.0, 21.0), (46.0, 6.0), (53.0, 1.0), (5.0, 14.0)]
    for below in (snapped([M for _, M in plans]), continuous):
        stairs = Staircase(plans)
        (value, payload), _ = threshold_search(stairs, 5.0, stairs.free(), 1.0, below)
        assert (value, payload) == (58.0, (53.0, 1.0))


@st.composite
def staircases(draw):
    n = draw(st.integers(1, 12))
    top = draw(st.sampled_from([8, 30, 60]))
    maxes = draw(st.lists(st.integers(1, top), min_size=n, max_size=n))
    sums = draw(st.lists(st.integers(0, 2 * top), min_size=n, max_size=n))
    return [(float(f), float(M)) for f, M in zip(sums, maxes)]


@pytest.mark.slow
@settings(max_examples=examples(600), deadline=None)
@given(staircases(), st.integers(0, 12), st.booleans(), st.integers(0, 3), st.sampled_from([None, 0.5, 1.0, 1.5]))
def test_threshold_search_finds_the_least_value_of_any_staircase(plans, coef, snap, slack, cap_ratio):
    stairs = Staircase(plans)
    free = stairs.free()
    lowest = min(M for _, M in plans) - slack  # the lowest bottleneck, or a lower bound on it
    below = snapped([M for _, M in plans]) if snap else continuous
    optimum = stairs.optimum(coef)
    cap = INF if cap_ratio is None else optimum * cap_ratio
    (value, payload), calls = threshold_search(stairs, coef, free, lowest, below, cap)
    assert value == payload[0] + coef * payload[1]  # a real plan's value
    assert payload in plans
    if optimum < cap or coef == 0:
        assert value == optimum
    else:
        assert value >= optimum
    assert calls == len(stairs.calls) - 1 <= 2 * len(plans) + 2


def test_the_search_lets_no_random_staircase_through():
    # a denser sweep than hypothesis's of the cases a wrong bound would miss: few plans, small integers
    rng = np.random.default_rng(7)
    for _ in range(4000):
        n = int(rng.integers(2, 7))
        plans = [(float(rng.integers(0, 61)), float(rng.integers(1, 31))) for _ in range(n)]
        coef = float(rng.integers(1, 6))
        for below in (snapped([M for _, M in plans]), continuous):
            stairs = Staircase(plans)
            (value, _), _ = threshold_search(stairs, coef, stairs.free(), min(M for _, M in plans), below)
            assert value == stairs.optimum(coef), (plans, coef)


# --------------------------------------------------------------------------- dp against an exhaustive walk


def exhaustive_walk(problem: Problem, kind: str = "none") -> tuple[float, int]:
    """The least ``sum + (m - 1) max`` over *every* Pareto point of the least-sum recursion (placement
    ``kind``; ``none``: without transfers), visited one by one from the free optimum down to
    infeasibility (no bound, no pruning), and the number of points visited."""
    model = DPModel(problem)
    model._budget = 2**31
    model.parts, model.spec, model.best_known = None, None, None
    model.prepare(None)
    auto = model._automaton_for(kind)
    X = model._transfer_table(auto) if kind != "none" else np.zeros((model.L, len(auto.categories)))
    coef = problem.microbatches - 1
    best, limit, points = INF, INF, 0
    while True:
        V = model.recursion(auto, X, "minsum", limit, None)
        total, arg = model._final(V, auto)
        if arg is None:
            return best, points
        points += 1
        _, _, times = next(model.reconstructions(V, auto, X, "minsum", limit, *arg))
        best = min(best, total + coef * max(times))
        limit = max(times) * (1 - 4e-12)  # below this point's max: the next step down


@pytest.mark.parametrize("layers,nodes,m,seed", [(24, 2, 8, 0), (40, 4, 8, 1), (32, 2, 16, 2), (20, 1, 4, 3)])
def test_walk_without_transfers_matches_an_exhaustive_walk(layers, nodes, m, seed):
    problem = synthetic_problem(layers, nodes, 8, transfers=False, seed=seed, microbatches=m)
    result = solve(problem, "dp")
    assert result.status == "optimal"
    best, points = exhaustive_walk(problem)
    assert points >= 3  # the instance has several Pareto points: stopping at the first would be a guess
    assert result.value == pytest.approx(best, rel=1e-12)
    check_plan(problem, result)


@pytest.mark.parametrize("layers,nodes,gpus,m,seed", [(10, 2, 4, 8, 0), (12, 1, 8, 6, 1)])
def test_walk_with_transfers_matches_an_exhaustive_walk(layers, nodes, gpus, m, seed):
    problem = synthetic_problem(layers, nodes, gpus, transfers=True, seed=seed, microbatches=m)
    result = solve(problem, "dp")
    assert result.status == "optimal"
    kind = result.extra["dp"]["placement"]
    assert kind != "none"
    assert result.value == pytest.approx(exhaustive_walk(problem, kind)[0], rel=1e-12)
    check_plan(problem, result)


# --------------------------------------------------------------------------- dp against brute


def _many_microbatches(problem: Problem, m: int, schedule: str, transfers: bool) -> Problem:
    """The problem with m microbatches (coef m - 1 pulls the optimum far from the free one) under a schedule."""
    doc = problem.to_dict()
    doc["training"].update(microbatches=m, schedule=schedule, objective="iteration")
    for n, layer in enumerate(doc["layers"]):
        layer["out_bytes"] = (layer["out_bytes"] or 100 * (n + 1)) if transfers else 0
    return Problem.from_dict(doc)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(objectives=("iteration",)), st.integers(2, 16), st.sampled_from(["1f1b", "zb-h1", "gpipe"]), st.booleans())
def test_walks_match_brute_with_many_microbatches(base, m, schedule, transfers):
    problem = _many_microbatches(base, m, schedule, transfers)
    oracle = solve(problem, "brute")
    if oracle.status == "error":
        assert "max_combinations" in oracle.message
        return
    result = solve(problem, "dp")
    assert result.status == oracle.status, (oracle.message, result.message)
    if oracle.status == "optimal":
        assert result.value == pytest.approx(oracle.value, rel=1e-9)
        assert result.bound == pytest.approx(result.value, rel=1e-9)
        check_plan(problem, result)
