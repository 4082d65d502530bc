"""A method stopped by its time limit says so with ``Candidate.timed_out``; ``solve`` falls back to greedy on that flag alone."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from partitioner import evaluate, load_problem, solve
from partitioner.solvers.base import Candidate, SolveRequest, _cut_short
from partitioner.solvers.slot.run import build_timeout_candidate
from tests.solvers.cpsat.test_cpsat import vla_like_problem

TOY = Path(__file__).resolve().parents[2] / "examples" / "vla_toy_2x4.json"


def test_the_flag_not_the_words_marks_a_time_out():
    request = SolveRequest("iteration", time_limit=5.0)
    worded = Candidate("error", message="dp: time limit reached before the recursion finished")
    assert not _cut_short(worded, request)
    assert _cut_short(replace(worded, timed_out=True), request)
    assert not _cut_short(replace(worded, timed_out=True), SolveRequest("iteration"))  # no limit, no time-out


def test_a_build_cut_short_without_a_start_is_a_time_out():
    problem = load_problem(TOY)
    found = build_timeout_candidate("milp", problem, SolveRequest("iteration", time_limit=1.0), None, None, {})
    assert found.status == "error" and found.plan is None and found.timed_out


@pytest.mark.parametrize("method, layers", [("cpsat", 256), ("milp", 128)])
def test_a_model_refused_for_the_time_left_falls_back_to_greedy(method, layers):
    problem = vla_like_problem(layers, 4, 8, seed=0)
    result = solve(problem, method, time_limit=1.0)  # building would take 1.7 s (cpsat) or 3.2 s (milp): refused
    assert result.status == "feasible" and result.plan is not None, result.message
    assert result.extra["fallback"] == "greedy" and "would run out while building" in result.message
    evaluate(problem, result.plan)


def test_greedy_answers_its_first_stage_count_even_past_the_deadline():
    """A heuristic whose set-up outlasts the limit (the 100k-layer model under load) still returns a plan:
    the first stage count is always tried, the next ones only within the limit."""
    problem = load_problem(TOY)
    result = solve(problem, "greedy", time_limit=1e-9)
    assert result.plan is not None and result.status == "feasible", result.message
    evaluate(problem, result.plan)


def test_no_greedy_fallback_where_greedy_cannot_plan_the_schedule(monkeypatch):
    """An exact method cut short under interleaved answers its own result: greedy (1F1B stash) is not run there."""
    from partitioner.planning.schedules.search import with_schedule
    from partitioner.solvers import base

    problem = with_schedule(load_problem(TOY), "interleaved", 2)
    spec = base.method_spec("dp")
    monkeypatch.setitem(base._METHODS, "dp", replace(spec, run=lambda p, r: Candidate(
        "error", message="dp: time limit reached", timed_out=True)))
    result = solve(problem, "dp", time_limit=1.0)
    assert result.status == "error" and result.plan is None and "fallback" not in result.extra
