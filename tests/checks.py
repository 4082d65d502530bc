"""What every test that gets a plan from a solver checks: evaluation and a replay under the problem's schedule;
and the one clock a test may bound: CPU seconds (:func:`cpu_seconds`)."""
from __future__ import annotations

import os

import pytest

from partitioner import evaluate, simulate
from partitioner.plan import SolveResult, group_times
from partitioner.plan.schedules import stash
from partitioner.problem import Problem


def check_plan(problem: Problem, result: SolveResult) -> None:
    """The plan is valid, its value is what ``evaluate`` says, and the simulator replays it within memory.

    The replay, under the problem's schedule, checks DESIGN's simulator facts:
    stage p holds the schedule's stash at its peak (1F1B and ZB-H1 min(m,
    P - p), GPipe m), every peak fits in the GPU, and the makespan lies
    between m times the busiest device (group) and m times the sum of stages
    (some op runs at every moment of a replay).
    """
    assert result.plan is not None, result.message
    ev = evaluate(problem, result.plan, result.objective)
    assert ev.value == pytest.approx(result.value, rel=1e-12)
    schedule, v = problem.training.schedule, problem.training.virtual_stages
    sim = simulate(problem, result.plan, schedule)
    m, P = problem.microbatches, result.plan.num_stages
    if schedule != "interleaved":
        assert list(sim.peak_inflight) == stash(schedule, P, m)
    assert all(peak <= problem.cluster.gpu_memory_bytes for peak in sim.peak_memory_bytes)
    times = ev.times_ms
    busiest = max(group_times(times, v if schedule == "interleaved" else 1))
    assert m * busiest * (1 - 1e-9) <= sim.makespan_ms <= m * sum(times) * (1 + 1e-9)


def check_no_random_plan_beats(data, problem: Problem, result: SolveResult, tries: int = 5, rel: float = 1e-9) -> None:
    """Draw ``tries`` random plans (rules 1-5 by construction); none that is valid beats ``result``.

    A valid draw also proves the problem feasible, so ``result`` must then be optimal.
    """
    from partitioner.plan import PlanError
    from strategies import random_plans

    for _ in range(tries):
        plan = data.draw(random_plans(problem))
        if plan is None:
            continue
        try:
            value = evaluate(problem, plan).value
        except PlanError as err:
            assert err.rule == 6, err  # random_plans satisfies rules 1-5 by construction
            continue
        assert result.status == "optimal", "a valid plan exists, so the exact method must find one"
        assert value >= result.value * (1 - rel)


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process, every thread included, and of the child processes it has
    waited for. A test bounds these, never wall-clock time: on a loaded machine (the suite runs at a load of 8
    on 2 cores) the wall clock of a correct run stretches without bound, its CPU time does not; a method that
    ignores its limit spends CPU past it. Speed targets in wall-clock time live in benchmarks/."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
