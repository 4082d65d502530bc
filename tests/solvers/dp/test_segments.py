"""The exact DP on format v2: per-segment configs, variants, intra-stage reshards; and its limits.

Two oracles: ``brute`` (the project's, on ``strategies.small_v2_problems``)
and one deliberately naive here: every plan (stage count, cuts, sizes,
placement pattern, one config per segment of every stage) is built and
priced by :func:`partitioner.plan.evaluate` itself, so nothing of any
solver's reasoning (frontiers, "fastest fitting configs per stage") is reused.
"""
from __future__ import annotations

import itertools
import json
import math
import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from checks import check_plan
from partitioner import Problem, evaluate, load_problem, solve
from partitioner.cluster.placement import node_assignment_ids, size_sequences
from partitioner.cluster.reshard import stage_reshard_ms
from partitioner.plan import Plan, PlanError, Stage
from partitioner.problem import Layout
from partitioner.solvers.brute import placement_patterns
from partitioner.solvers.dp.solver import DPModel
from partitioner.solvers.dp.stage import StageCosts
from partitioner.solvers.feasibility import feasible_stage_counts
from strategies import examples, small_v2_problems

ROOT = Path(__file__).resolve().parents[3]
REL = 1e-6
SHAPES = [(1, 1), (1, 2), (2, 1), (1, 4), (2, 2), (4, 1)]
VARIANTS = ("", "r", "z")  # plain; recompute (less activation, more time); sharded weights (less weight, more time)


def _meshes(nodes: int, gpus: int) -> list[tuple[int, int]]:
    sizes = [d for d in (1, 2, 4, 8) if d <= nodes * gpus and (d <= gpus and gpus % d == 0 or d % gpus == 0)]
    return [(d // tp, tp) for d in sizes for tp in (1, 2, 4, 8) if d % tp == 0 and tp <= gpus]


@st.composite
def small_v2(draw, max_layers: int = 5, objectives=("bottleneck", "iteration")) -> Problem:
    """Random small v2 problems: 1-3 modules (runs may repeat a module), variants, tight memory, transfers."""
    nodes, gpus = draw(st.sampled_from(SHAPES))
    n_layers = draw(st.integers(1, max_layers))
    modules = draw(st.lists(st.sampled_from("abc"), min_size=n_layers, max_size=n_layers))
    meshes = _meshes(nodes, gpus)
    variants = draw(st.sampled_from([("",), ("", "r"), ("", "r", "z"), ("r", "z")]))
    shared = [(dp, tp, v) for dp, tp in meshes for v in variants]
    layers = []
    for i in range(n_layers):
        keys = shared if draw(st.integers(0, 9)) < 8 else draw(
            st.lists(st.sampled_from(shared), min_size=1, max_size=len(shared), unique=True)
        )
        base = draw(st.integers(1, 40))
        w0, a0 = draw(st.integers(0, 60)), draw(st.integers(0, 24))
        costs = {}
        for dp, tp, v in keys:
            d = dp * tp
            fwd = round(base / (draw(st.floats(0.3, 1.2)) * d), 3)
            bwd = round(fwd * draw(st.floats(0.0, 2.5)), 3)
            weight, act = w0 // tp, a0 // d
            if v == "r":
                bwd, act = round(bwd + fwd, 3), act // 4
            elif v == "z":
                fwd, weight = round(fwd * 1.3 + 0.1, 3), weight // dp
            costs[f"dp{dp}tp{tp}" + (f"/{v}" if v else "")] = {
                "fwd_ms": fwd, "bwd_ms": bwd, "weight_bytes": weight, "act_bytes": act,
            }
        layers.append({"name": f"{modules[i]}{i}", "module": modules[i],
                       "out_bytes": draw(st.sampled_from([0, 1, 1, 1])) * draw(st.integers(0, 4000)), "costs": costs})
    limit = min(n_layers, nodes * gpus)
    lo = draw(st.integers(1, limit))
    hi = draw(st.integers(lo, limit))
    doc = {
        "version": 2,
        "name": "random-v2",
        "cluster": {
            "nodes": nodes, "gpus_per_node": gpus,
            "gpu_memory_bytes": draw(st.integers(20, 200)),
            "intra_node_GBps": draw(st.sampled_from([1.0, 2.0, 8.0])) * 1e-3,
            "inter_node_GBps": draw(st.sampled_from([0.5, 1.0, 4.0])) * 1e-3,
        },
        "training": {"microbatches": draw(st.integers(1, 6)), "objective": draw(st.sampled_from(objectives))},
        "variants": {v: "test variant" for v in ("r", "z")},
        "layers": layers,
    }
    stages = draw(st.sampled_from([None, {"min": lo, "max": hi}, lo]))
    if stages is not None:
        doc["stages"] = stages
    return Problem.from_dict(doc)


def _segment_options(problem: Problem, a: int, b: int, d: int) -> list[list[Layout]]:
    out = []
    for x, y in problem.segments(a, b):
        common = set.intersection(*({lay for lay in problem.layers[i].costs if lay.devices == d} for i in range(x, y + 1)))
        out.append(sorted(common))
    return out


def oracle(problem: Problem, objective: str, cap: int = 200_000) -> float | None:
    """The least objective over every valid plan, each priced by ``evaluate``; None if none is valid."""
    cluster = problem.cluster
    L, N = problem.num_layers, problem.num_devices
    best = None
    work = 0
    for P in feasible_stage_counts(problem):
        for sizes in size_sequences(cluster.allowed_sizes(), N, P):
            assignments = list(placement_patterns(cluster, sizes).values())
            for cuts in itertools.combinations(range(1, L), P - 1):
                bounds = (0,) + cuts + (L,)
                per_stage = []
                for p in range(P):
                    options = _segment_options(problem, bounds[p], bounds[p + 1] - 1, sizes[p])
                    per_stage.append(list(itertools.product(*options)))
                for assignment in assignments:
                    ids = node_assignment_ids(cluster, sizes, assignment)
                    for choice in itertools.product(*per_stage):
                        work += 1
                        assume(work <= cap)  # too big for the naive oracle: skip the example
                        plan = Plan(tuple(
                            Stage.from_configs(bounds[p], bounds[p + 1] - 1, sizes[p], choice[p], ids[p]) for p in range(P)
                        ))
                        try:
                            value = evaluate(problem, plan, objective).value
                        except PlanError:
                            continue
                        if best is None or value < best:
                            best = value
    return best


def agree_brute(problem: Problem, objective: str, options=None):
    oracle_result = solve(problem, "brute", objective=objective)
    assert oracle_result.status in ("optimal", "infeasible"), oracle_result.message
    result = solve(problem, "dp", objective=objective, options=options)
    assert result.status in ("optimal", "infeasible"), result.message
    assert (oracle_result.status == "infeasible") == (result.status == "infeasible"), (oracle_result.message, result.message)
    if result.status == "optimal":
        assert result.value == pytest.approx(oracle_result.value, rel=REL)
        assert result.bound == pytest.approx(result.value, rel=REL)
        check_plan(problem, result)
    else:
        assert result.message


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems(objectives=("bottleneck",)))
def test_dp_v2_matches_brute_bottleneck(problem):
    agree_brute(problem, "bottleneck")


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems(objectives=("iteration",)))
def test_dp_v2_matches_brute_iteration(problem):
    agree_brute(problem, "iteration")


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems())
def test_dp_v2_exact_placement_automaton_matches_brute(problem):
    agree_brute(problem, problem.objective, {"placement": "bins"})


def agree(problem: Problem, objective: str, options=None):
    expected = oracle(problem, objective)
    result = solve(problem, "dp", objective=objective, options=options)
    assert result.status in ("optimal", "infeasible"), result.message
    if expected is None:
        assert result.status == "infeasible" and result.message
        return result
    assert result.status == "optimal", result.message
    assert result.value == pytest.approx(expected, rel=REL)
    assert result.bound == pytest.approx(result.value, rel=REL)
    check_plan(problem, result)
    for stage in result.plan.stages:  # canonical placement: ids grouped by node, ascending
        assert list(stage.device_ids) == sorted(stage.device_ids)
    return result


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(small_v2(objectives=("bottleneck",)))
def test_dp_v2_matches_exhaustive_bottleneck(problem):
    agree(problem, "bottleneck")


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(small_v2(objectives=("iteration",)))
def test_dp_v2_matches_exhaustive_iteration(problem):
    agree(problem, "iteration")


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(small_v2())
def test_dp_v2_exact_placement_automaton_matches_exhaustive(problem):
    agree(problem, problem.objective, {"placement": "bins"})


# ----------------------------------------------------------------------------- the stage table alone


def stage_best(problem: Problem, a: int, b: int, d: int, stash: int) -> float:
    """min over one config per segment of sum(fwd + bwd) + 2 sum r, memory within the GPU (direct)."""
    cap = problem.cluster.gpu_memory_bytes
    segs = problem.segments(a, b)
    best = math.inf
    for combo in itertools.product(*_segment_options(problem, a, b, d)):
        mem = sum(
            problem.layers[i].cost(c).weight_bytes + stash * problem.layers[i].cost(c).act_bytes
            for (x, y), c in zip(segs, combo) for i in range(x, y + 1)
        )
        if mem > cap:
            continue
        t = sum(problem.layers[i].cost(c).fwd_ms + problem.layers[i].cost(c).bwd_ms
                for (x, y), c in zip(segs, combo) for i in range(x, y + 1))
        t += 2 * sum(stage_reshard_ms(problem.layers[y].out_bytes, c, n, d, problem.cluster)
                     for ((_, y), c), n in zip(zip(segs, combo), combo[1:]))
        best = min(best, t)
    return best


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(small_v2(max_layers=7), small_v2_problems()), st.integers(1, 6))
def test_stage_table_is_the_least_time_over_segment_configs(problem, stash):
    sizes = tuple(sorted({lay.devices for lay in problem.layouts()}))
    costs = StageCosts(problem, problem.layouts(), sizes)
    L = problem.num_layers
    for i, d in enumerate(sizes):
        table = costs.matrix(i, stash)
        for a in range(L):
            for b in range(a, L):
                expected = stage_best(problem, a, b, d, stash)
                assert table[a, b] == pytest.approx(expected, rel=1e-9) or (math.isinf(expected) and math.isinf(table[a, b]))
                found = costs.configs(a, b, i, stash)
                if math.isinf(expected):
                    assert found is None
                else:
                    configs, t = found
                    assert len(configs) == len(problem.segments(a, b))
                    assert t == pytest.approx(expected, rel=1e-9)


# ----------------------------------------------------------------------------- named cases


def test_lesson15_colocated_meshes():
    problem = load_problem(ROOT / "examples" / "colocated_1node.json")
    r = solve(problem, "dp")
    assert r.status == "optimal"
    assert r.value == pytest.approx(16.36371456, rel=1e-12)
    (stage,) = r.plan.stages
    assert [(c.dp, c.tp) for c in stage.configs] == [(8, 1), (2, 4)]
    check_plan(problem, r)


def _as_v2(problem: Problem) -> Problem:
    doc = problem.to_dict()
    doc["version"] = 2
    return Problem.from_dict(doc)


def test_v2_without_transfers_agrees_with_v1_when_configs_cannot_differ():
    # a v2 problem whose sizes have one config each solves like its v1 twin
    from benchmarks.synthetic import synthetic_problem

    v1 = synthetic_problem(20, 2, 4, layouts=1, transfers=False, seed=3, microbatches=4)
    v2 = _as_v2(v1)
    for objective in ("bottleneck", "iteration"):
        a, b = solve(v1, "dp", objective=objective), solve(v2, "dp", objective=objective)
        assert a.status == b.status == "optimal"
        assert b.value == pytest.approx(a.value, rel=1e-12)


# ----------------------------------------------------------------------------- issue 15 in dp


def _with_time(problem: Problem, layer: int, keys, fwd_ms: float) -> Problem:
    """``problem`` with ``fwd_ms`` on ``keys`` of one layer, built in Python: files refuse times this
    large since the loader bounds them, but a problem made through the API reaches the solver as is."""
    import dataclasses

    target = problem.layers[layer]
    costs = dict(target.costs)
    for key in keys:
        costs[key] = dataclasses.replace(costs[key], fwd_ms=fwd_ms)
    layers = list(problem.layers)
    layers[layer] = dataclasses.replace(target, costs=costs)
    return dataclasses.replace(problem, layers=tuple(layers))


def _sentinel_toy(layer: int, key: str | None, fwd_ms: float = 1e18) -> Problem:
    doc = json.loads((ROOT / "examples" / "vla_toy_2x4.json").read_text())
    doc["stages"] = {"min": 1, "max": 6}
    problem = Problem.from_dict(doc)
    keys = [Layout.parse(key)] if key else list(problem.layers[layer].costs)
    return _with_time(problem, layer, keys, fwd_ms)


@pytest.mark.parametrize("layer,key", [(0, "dp1tp1"), (0, None), (2, "dp2tp1"), (3, "dp8tp1"), (5, "dp1tp1")])
@pytest.mark.parametrize("objective", ["bottleneck", "iteration"])
def test_huge_layer_time_does_not_wipe_out_later_stages(layer, key, objective):
    if key is not None:
        doc_costs = json.loads((ROOT / "examples" / "vla_toy_2x4.json").read_text())["layers"][layer]["costs"]
        assert key in doc_costs
    problem = _sentinel_toy(layer, key)
    dp = solve(problem, "dp", objective=objective)
    greedy = solve(problem, "greedy", objective=objective)
    assert dp.status == "optimal"
    check_plan(problem, dp)
    if greedy.value is not None:
        assert dp.value <= greedy.value * (1 + 1e-12)


def test_huge_layer_time_does_not_round_away_later_stages_without_transfers():
    # stage times are forward sums over a stage's own layers: a 1e18 layer cannot cancel the digits of
    # the stages after it (a difference of prefix sums would)
    doc = json.loads((ROOT / "examples" / "vla_toy_2x4.json").read_text())
    doc["stages"] = {"min": 1, "max": 6}
    for layer in doc["layers"]:
        layer["out_bytes"] = 0
    problem = _with_time(Problem.from_dict(doc), 0, [Layout(1, 1)], 1e18)
    assert DPModel(problem).natural_placement() == "none"
    for objective in ("bottleneck", "iteration"):
        dp = solve(problem, "dp", objective=objective)
        greedy = solve(problem, "greedy", objective=objective)
        oracle = solve(problem, "brute", objective=objective)
        assert dp.status == "optimal"
        assert dp.value == pytest.approx(oracle.value, rel=1e-12)
        assert greedy.value is None or dp.value <= greedy.value * (1 + 1e-12)
        check_plan(problem, dp)


@pytest.mark.parametrize("objective", ["bottleneck", "iteration"])
def test_largest_accepted_layer_time_in_a_file(objective):
    # the loader's largest fwd_ms on one layout of layer 0: still no optimum that greedy beats
    doc = json.loads((ROOT / "examples" / "vla_toy_2x4.json").read_text())
    doc["stages"] = {"min": 1, "max": 6}
    doc["layers"][0]["costs"]["dp1tp1"]["fwd_ms"] = 1e9
    problem = Problem.from_dict(doc)
    dp, greedy = solve(problem, "dp", objective=objective), solve(problem, "greedy", objective=objective)
    assert dp.status == "optimal"
    assert greedy.value is None or dp.value <= greedy.value * (1 + 1e-12)
    check_plan(problem, dp)


def test_time_limit_returns_the_best_known_plan():
    from partitioner.costs import build_problem

    # a problem dp needs about a second for (8 nodes: placement states), stopped after 0.05 s
    problem = build_problem("openvla-7b", "dgx-a100-80g", nodes=8, global_batch=2048, microbatches=32)
    r = solve(problem, "dp", objective="iteration", time_limit=0.05)
    assert r.status == "feasible", r.message
    assert r.plan is not None and r.bound is not None and r.bound <= r.value
    assert "time limit" in r.message
    check_plan(problem, r)
    greedy = solve(problem, "greedy", objective="iteration")
    assert r.value <= greedy.value * (1 + 1e-12)


@pytest.mark.slow
def test_memory_budget_is_checked_before_the_tables_are_built():
    from benchmarks.synthetic import synthetic_problem

    problem = synthetic_problem(1500, 1, 8, layouts=2, transfers=True, seed=0)
    tracemalloc.start()
    try:
        r = solve(problem, "dp", options={"memory_budget_gb": 0.01}, time_limit=60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.status in ("feasible", "error")
    # the message says what the tables would need against the limit, in bytes format_bytes picks (MiB here)
    assert re.search(r"would need [\d.]+ [MG]iB \(limit [\d.]+ [MG]iB, option memory_budget_gb", r.message), r.message
    assert peak < 200 * 2**20, f"peak {peak / 2**20:.0f} MiB before refusing"
    if r.status == "feasible":
        assert r.bound is None or r.bound <= r.value
        assert r.plan is not None
