"""Network levels in the solvers (DESIGN.md "Network levels"): ``dp`` against ``brute`` on the graph.

``brute`` prices every boundary by the max-flow of the levels graph (networkx), ``dp`` by the closed
form of :mod:`partitioner.cluster.levels` through its ``offsets`` placement automaton; on random small
hierarchical clusters (2-8 nodes x 1-4 GPUs, 1-3 levels, random bandwidths and oversubscriptions)
they agree, and every plan passes ``evaluate`` and the simulator; ``greedy``'s plans are valid and no
better than the optimum. The methods that do not plan levels say so.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import check_plan
from conftest import ROOT, run_cli
from partitioner import Problem, solve
from strategies import examples, small_levels_problems

REL = 1e-6
_SLOW = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


def _agree(problem: Problem) -> None:
    oracle = solve(problem, "brute")
    result = solve(problem, "dp")
    assert oracle.status in ("optimal", "infeasible"), oracle.message
    assert result.status == oracle.status, (oracle.message, result.message)
    if oracle.status == "optimal":
        assert result.value == pytest.approx(oracle.value, rel=REL)
        check_plan(problem, result)
        check_plan(problem, oracle)
        offset = 0
        for ids in result.plan.device_ids():
            assert tuple(ids) == tuple(range(offset, offset + len(ids)))
            offset += len(ids)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=_SLOW)
@given(small_levels_problems())
def test_dp_equals_brute_on_the_levels_graph(problem):
    _agree(problem)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=_SLOW)
@given(small_levels_problems(schedules=("zb-h1", "gpipe")))
def test_dp_equals_brute_on_the_levels_graph_other_schedules(problem):
    _agree(problem)


def _doc(levels) -> dict:
    costs = {f"dp{d}tp1": {"fwd_ms": 4.0 / d, "bwd_ms": 4.0 / d, "weight_bytes": 1, "act_bytes": 1} for d in (1, 2, 3, 4)}
    return {"version": 1, "cluster": {"nodes": 4, "gpus_per_node": 1, "gpu_memory_bytes": 10**9,
                                      "intra_node_GBps": 100.0, "inter_node_GBps": 50.0, "levels": levels},
            "training": {"microbatches": 4}, "stages": 2,
            "layers": [{"name": f"l{i}", "module": "m", "out_bytes": 10**8, "costs": costs} for i in range(4)]}


def test_the_boundary_moves_inside_a_leaf_when_the_spine_is_slow():
    """Sizes 1 + 3 put the boundary inside leaf 0 (nodes 0, 1: one GPU at 50 GB/s, 2 ms); 2 + 2 across
    the 4:1 spine (two GPUs at 12.5 GB/s, 4 ms). Stages of 8 + 2 and 8 + 2 ms beat 8 + 4; without the
    oversubscription 2 + 2 crosses at 100 GB/s (1 ms) and wins, 9 against 10 ms."""
    levels = [{"name": "leaf", "nodes": 2, "GBps": 50.0}, {"name": "spine", "GBps": 50.0, "oversubscription": 4}]
    p = Problem.from_dict(_doc(levels))
    for method in ("brute", "dp"):
        r = solve(p, method)
        assert r.status == "optimal", r.message
        assert [s.devices for s in r.plan.stages] in ([1, 3], [3, 1]), (method, r.plan)
    fast = Problem.from_dict(_doc([{"name": "leaf", "nodes": 2, "GBps": 50.0}, {"name": "spine", "GBps": 50.0}]))
    assert [s.devices for s in solve(fast, "dp").plan.stages] == [2, 2]


@settings(max_examples=examples(60), deadline=None, suppress_health_check=_SLOW)
@given(small_levels_problems(schedules=("1f1b", "zb-h1", "gpipe"), racks=True))
def test_dp_equals_brute_on_levels_with_partial_racks(problem):
    """Levels with ``stage_sizes`` (sizes that need not divide the node) and ``devices`` (a partly used
    last node): consecutive stages need no packing, so the same automaton is exact."""
    _agree(problem)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=_SLOW)
@given(st.booleans().flatmap(lambda racks: small_levels_problems(schedules=("1f1b", "zb-h1"), racks=racks)))
def test_greedy_plans_levels_validly(problem):
    best = solve(problem, "brute")
    r = solve(problem, "greedy")
    assert r.status in ("feasible", "infeasible"), r.message
    if r.plan is not None:
        check_plan(problem, r)
        assert best.status == "optimal" and r.value >= best.value * (1 - REL)


@pytest.mark.parametrize("method", ["cpsat", "milp", "uniform", "balanced"])
def test_methods_without_levels_say_so(method):
    p = Problem.from_dict(_doc([{"name": "leaf", "nodes": 2, "GBps": 50.0}, {"name": "spine", "GBps": 50.0}]))
    r = solve(p, method)
    assert r.status == "error" and "network levels" in r.message and "brute" in r.message and "dp" in r.message


def test_interleaved_is_refused_on_levels():
    doc = _doc([{"name": "leaf", "nodes": 2, "GBps": 50.0}, {"name": "spine", "GBps": 50.0}])
    doc["training"]["schedule"] = "interleaved"
    doc["training"]["virtual_stages"] = 2
    p = Problem.from_dict(doc)
    for method in ("brute", "dp"):
        r = solve(p, method)
        assert r.status == "error" and "interleaved" in r.message and "network levels" in r.message


def test_the_levels_example_from_the_command_line(tmp_path):
    """examples/levels_leaf_spine.json (its optimum worked in examples/README.md): dp and brute answer
    10.0 ms with the boundary inside leaf 0; cpsat says it does not plan levels; a bad level is one line,
    exit 2."""
    example = ROOT / "examples" / "levels_leaf_spine.json"
    for method in ("dp", "brute"):
        r = run_cli("solve", example, "--method", method, "--json")
        assert r.returncode == 0, r.stderr
        result = json.loads(r.stdout)
        assert result["status"] == "optimal" and result["value"] == pytest.approx(10.0, rel=1e-12)
        assert [s["device_ids"] for s in result["plan"]["stages"]] == [[0], [1, 2, 3]]
    r = run_cli("solve", example, "--method", "cpsat", "--json")
    assert r.returncode == 1 and "network levels" in json.loads(r.stdout)["message"]
    doc = json.loads(example.read_text())
    doc["cluster"]["levels"][1]["oversubscription"] = 0.5
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    r = run_cli("solve", bad)
    assert r.returncode == 2 and "cluster.levels[1].oversubscription" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
