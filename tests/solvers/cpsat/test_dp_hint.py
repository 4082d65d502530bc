"""cpsat's hint when the greedy heuristic finds no plan: dp's plan, so that CP-SAT starts from a plan (without one
it found none in 600 s on 32 layers x 256 GPUs with transfers, issue 34); the bound stays CP-SAT's own."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.synthetic import synthetic_problem
from checks import check_plan
from partitioner import load_problem, solve
from partitioner.solvers.base import Candidate
from partitioner.solvers.slot import run as slot_run

ROOT = Path(__file__).resolve().parents[3]


def test_cpsat_starts_from_dps_plan_when_greedy_has_none(monkeypatch):
    problem = load_problem(ROOT / "examples" / "vla_toy_2x4.json")
    monkeypatch.setattr(slot_run, "solve_greedy", lambda problem, request: Candidate("infeasible"))
    r = solve(problem, "cpsat", time_limit=60, options={"formulation": "slot"})
    assert r.status == "optimal" and r.extra["cpsat"]["hint"] == "dp"
    assert r.value == pytest.approx(solve(problem, "dp").value, rel=1e-9)
    check_plan(problem, r)


def test_without_the_hint_option_no_plan_is_given(monkeypatch):
    problem = load_problem(ROOT / "examples" / "vla_toy_2x4.json")
    monkeypatch.setattr(slot_run, "solve_greedy", lambda problem, request: Candidate("infeasible"))
    r = solve(problem, "cpsat", time_limit=60, options={"formulation": "slot", "hint": False})
    assert r.extra["cpsat"]["hint"] is None


@pytest.mark.slow
def test_a_problem_greedy_cannot_plan_gets_a_plan_from_cpsat_under_a_short_limit():
    problem = synthetic_problem(16, 16, 8, layouts=None, transfers=True, seed=0)
    assert solve(problem, "greedy").plan is None
    r = solve(problem, "cpsat", time_limit=30)
    assert r.plan is not None and r.extra["cpsat"]["hint"] == "dp"
    assert r.bound is not None and r.bound <= r.value
    check_plan(problem, r)
