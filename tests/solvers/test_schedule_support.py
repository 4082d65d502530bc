"""Exact methods never certify an optimum of another schedule's objective than the problem's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from partitioner import load_problem, solve
from partitioner.problem import Problem

TOY = Path(__file__).resolve().parents[2] / "examples" / "vla_toy_2x4.json"


def with_schedule(schedule: str) -> Problem:
    doc = load_problem(TOY).to_dict()
    doc["training"]["schedule"] = schedule
    return Problem.from_dict(doc)


@pytest.mark.parametrize("method", ["dp", "cpsat", "milp"])
def test_zb_h1_bottleneck_is_1f1b_bottleneck_and_agrees_with_brute(method):
    problem = with_schedule("zb-h1")
    oracle = solve(problem, "brute", objective="bottleneck")
    r = solve(problem, method, objective="bottleneck", seed=0)
    assert oracle.status == r.status == "optimal"
    assert r.value == pytest.approx(oracle.value, rel=1e-6)


def test_dp_optimises_zb_h1_iteration_exactly():
    problem = with_schedule("zb-h1")
    oracle = solve(problem, "brute", objective="iteration")
    r = solve(problem, "dp", objective="iteration")
    assert oracle.status == r.status == "optimal"
    assert r.value == pytest.approx(oracle.value, rel=1e-9)


def test_brute_solves_zb_h1_iteration_and_heuristics_never_beat_it():
    problem = with_schedule("zb-h1")
    oracle = solve(problem, "brute", objective="iteration")
    assert oracle.status == "optimal"
    for method in ("greedy", "uniform", "balanced"):
        r = solve(problem, method, objective="iteration")
        assert r.status in ("feasible", "infeasible", "optimal")
        if r.value is not None:
            assert r.value >= oracle.value * (1 - 1e-9)


@pytest.mark.parametrize("method", ["greedy", "uniform", "balanced"])
def test_gpipe_is_refused_by_every_method_but_brute_dp_cpsat_and_milp(method):
    r = solve(with_schedule("gpipe"), method, objective="bottleneck")
    assert r.status == "error" and "schedule 'gpipe'" in r.message


@pytest.mark.parametrize("objective", ["bottleneck", "iteration"])
def test_dp_optimises_gpipe_with_its_stash(objective):
    problem = with_schedule("gpipe")
    oracle = solve(problem, "brute", objective=objective)
    r = solve(problem, "dp", objective=objective)
    assert oracle.status == r.status
    if r.status == "optimal":
        assert r.value == pytest.approx(oracle.value, rel=1e-9)
        assert [s.stash for s in r.evaluation.stages] == [problem.microbatches] * r.plan.num_stages


@pytest.mark.parametrize("schedule", ["zb-h1", "gpipe"])
@pytest.mark.parametrize("objective", ["bottleneck", "iteration"])
@pytest.mark.parametrize("method", ["cpsat", "milp"])
def test_cpsat_and_milp_optimise_zb_h1_and_gpipe_and_agree_with_brute(method, objective, schedule):
    problem = with_schedule(schedule)
    r = solve(problem, method, objective=objective, seed=0)
    oracle = solve(problem, "brute", objective=objective)
    assert oracle.status == r.status == "optimal", r.message
    assert r.value == pytest.approx(oracle.value, rel=1e-6)
    assert r.bound <= oracle.value


@pytest.mark.slow
def test_cli_simulate_defaults_to_the_problems_schedule_and_refuses_a_mismatch(tmp_path):
    from conftest import run_cli

    problem = with_schedule("zb-h1")
    from partitioner.problem import dump_problem

    path = tmp_path / "zb.json"
    dump_problem(problem, path)
    result = tmp_path / "r.json"
    solved = run_cli("solve", path, "--method", "brute", "--json")
    assert solved.returncode == 0, solved.stderr
    result.write_text(solved.stdout)
    sim = run_cli("simulate", path, result, "--json")
    assert sim.returncode == 0, sim.stderr
    assert json.loads(sim.stdout)["schedule"] == "zb-h1"
    bad = run_cli("simulate", path, result, "--schedule", "interleaved")
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and "interleaved" in bad.stderr
