"""cpsat: agreement with brute and dp, exactness of the slot model, examples,
infeasibility, time limits, planted optima.

Also home of two seeded problem generators shared with ``test_milp.py``:
:func:`vla_like_problem` (a VLA-shaped model on a DGX-like cluster, the
solver benchmark's instance) and :func:`planted_problem` (perfectly scaling
costs with a known optimum). ``python tests/solvers/cpsat/test_cpsat.py`` times the
benchmark for cpsat, milp and dp.
"""
from __future__ import annotations

import json
import math
import random
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from checks import check_plan
from partitioner import Cluster, Problem, SolverError, evaluate, load_problem, solve
from partitioner.plan import Plan, Stage
from partitioner.solvers.cpsat.solver import SAFE_PARAMETERS, build_model, hint_values
from partitioner.solvers.dp.method import explain_infeasible
from partitioner.solvers.slot.data import decisions_of_plan, integer_times, plan_of_decisions, slot_data
from strategies import draw_valid_plan, examples, small_problems

REL = 1e-6
CPSAT = {"num_workers": 1}


# --------------------------------------------------------------------------- generators


def vla_like_problem(
    layers: int = 64,
    nodes: int = 4,
    gpus_per_node: int = 8,
    *,
    seed: int = 0,
    objective: str = "iteration",
    microbatches: int = 16,
    out_bytes: int = 0,
) -> Problem:
    """A seeded VLA-shaped problem: vision, projector, language and action layers, every layout.

    Per layer a base forward time, weights and activations (module-typical,
    +-10 % noise); layout (dp, tp) runs ``base / (dp tp)`` slowed by 8 % per
    doubling of tp and 2 % per doubling of dp, backward = 2 x forward,
    weights / tp, activations / (dp tp); 80 GiB GPUs. ``out_bytes = 0``
    means no transfers.
    """
    rng = random.Random(seed)
    sizes = Cluster(nodes, gpus_per_node, 1, 1.0, 1.0).allowed_sizes()
    layouts = [(d // tp, tp) for d in sizes for tp in (1, 2, 4, 8, 16) if tp <= gpus_per_node and d % tp == 0]
    n_vision, n_action = max(1, layers // 8), max(1, layers // 9)
    kinds = ["vision"] * n_vision + ["projector"] + ["llm"] * (layers - n_vision - n_action - 1) + ["action"] * n_action
    base = {"vision": (4.0, 0.6e9, 2.0e9), "projector": (1.0, 0.2e9, 0.5e9), "llm": (6.0, 3.5e9, 1.5e9), "action": (5.0, 1.0e9, 2.5e9)}
    docs = []
    for i, kind in enumerate(kinds[:layers]):
        fwd, weight, act = (v * rng.uniform(0.9, 1.1) for v in base[kind])
        costs = {}
        for dp, tp in layouts:
            f = fwd / (dp * tp) * (1 + 0.08 * math.log2(tp)) * (1 + 0.02 * math.log2(dp))
            costs[f"dp{dp}tp{tp}"] = {
                "fwd_ms": round(f, 4),
                "bwd_ms": round(2 * f, 4),
                "weight_bytes": int(weight / tp),
                "act_bytes": int(act / (dp * tp)),
            }
        docs.append({"name": f"{kind}.{i}", "module": kind, "out_bytes": out_bytes, "costs": costs})
    return Problem.from_dict(
        {
            "version": 1,
            "name": f"vla-like-{layers}x{nodes}x{gpus_per_node}-seed{seed}",
            "cluster": {
                "nodes": nodes,
                "gpus_per_node": gpus_per_node,
                "gpu_memory_bytes": 80 * 2**30,
                "intra_node_GBps": 300.0,
                "inter_node_GBps": 25.0,
            },
            "training": {"microbatches": microbatches, "objective": objective},
            "layers": docs,
        }
    )


def planted_problem(layers: int, nodes: int, sizes: list[int], *, seed: int = 0, gpus_per_node: int = 8) -> tuple[Problem, float]:
    """Perfectly scaling costs, no transfers, and a planted plan whose bottleneck is total work / N.

    The layers are split at random into ``len(sizes)`` contiguous groups;
    group ``p`` gets integer works summing to ``sizes[p] * T``, and a layer of
    work ``w`` takes ``w / d`` ms on any ``d`` devices, so the groups on
    ``sizes`` devices all take T = (total work) / N: a lower bound for every
    plan, hence the optimum. Each layer weighs 1 byte and a GPU holds as many
    as the largest group, so memory rules out the trivial one-stage plan.
    """
    rng = random.Random(seed)
    N = nodes * gpus_per_node
    assert sum(sizes) == N and len(sizes) <= layers
    counts = [1] * len(sizes)
    for _ in range(layers - len(sizes)):
        counts[rng.randrange(len(sizes))] += 1
    T = 1000 * max(counts)
    works: list[int] = []
    for d, n in zip(sizes, counts):
        cuts = sorted(rng.sample(range(1, d * T), n - 1))
        works += [b - a for a, b in zip([0, *cuts], [*cuts, d * T])]
    allowed = Cluster(nodes, gpus_per_node, 1, 1.0, 1.0).allowed_sizes()
    docs = [
        {
            "name": f"l{i}",
            "costs": {f"dp{d}tp1": {"fwd_ms": w / d, "bwd_ms": 0.0, "weight_bytes": 1, "act_bytes": 0} for d in allowed},
        }
        for i, w in enumerate(works)
    ]
    doc = {
        "version": 1,
        "name": f"planted-{layers}x{N}",
        "cluster": {"nodes": nodes, "gpus_per_node": gpus_per_node, "gpu_memory_bytes": max(counts),
                    "intra_node_GBps": 100.0, "inter_node_GBps": 10.0},
        "training": {"microbatches": 4, "objective": "bottleneck"},
        "stages": {"min": 1, "max": min(layers, N, len(sizes) + 2)},
        "layers": docs,
    }
    return Problem.from_dict(doc), sum(works) / N


def memory_bound_infeasible() -> Problem:
    """Each layer fits alone, but no split works: exact search is needed to prove it.

    One stage cannot hold both layers; two stages put two stashed microbatches
    on stage 0, which layer 0 cannot hold.
    """
    cost = {"fwd_ms": 1.0, "bwd_ms": 1.0, "weight_bytes": 60, "act_bytes": 30}
    return Problem.from_dict(
        {
            "version": 1,
            "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu_memory_bytes": 100, "intra_node_GBps": 1.0, "inter_node_GBps": 1.0},
            "training": {"microbatches": 4},
            "layers": [{"costs": {"dp1tp1": cost, "dp2tp1": cost}} for _ in range(2)],
        }
    )


# --------------------------------------------------------------------------- agreement


def agree(problem: Problem, objective: str, seed: int = 0) -> None:
    oracle = solve(problem, "brute", objective=objective)
    dp = solve(problem, "dp", objective=objective)
    result = solve(problem, "cpsat", objective=objective, seed=seed, options=CPSAT)
    assert (oracle.status == "infeasible") == (dp.status == "infeasible") == (result.status == "infeasible"), (
        oracle.message,
        result.message,
    )
    if oracle.status == "infeasible":
        assert result.plan is None and result.message
        return
    assert oracle.status == dp.status == result.status == "optimal", result.message
    assert result.value == pytest.approx(oracle.value, rel=REL)
    assert dp.value == pytest.approx(oracle.value, rel=REL)
    assert evaluate(problem, result.plan, objective).value == result.value
    check_plan(problem, result)
    check_plan(problem, dp)
    assert result.bound <= result.value
    assert result.gap <= REL


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(objectives=("bottleneck",)), st.integers(0, 3))
def test_cpsat_matches_brute_and_dp_bottleneck(problem, seed):
    agree(problem, "bottleneck", seed)


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems(objectives=("iteration",)), st.integers(0, 3))
def test_cpsat_matches_brute_and_dp_iteration(problem, seed):
    agree(problem, "iteration", seed)


@pytest.mark.slow
@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problems())
def test_cpsat_without_a_hint_matches_brute(problem):
    oracle = solve(problem, "brute")
    result = solve(problem, "cpsat", options={**CPSAT, "hint": False})
    assert (oracle.status == "infeasible") == (result.status == "infeasible")
    if oracle.status == "optimal":
        assert result.status == "optimal"
        assert result.value == pytest.approx(oracle.value, rel=REL)


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.data(), small_problems())
def test_every_valid_plan_is_a_solution_of_the_model_at_its_cost(data, problem):
    """Completeness: fixing the model to any valid plan is feasible and costs what evaluate says."""
    plan, true_value = draw_valid_plan(data, problem)
    assert_plan_is_a_model_solution(problem, plan, true_value)


def assert_plan_is_a_model_solution(problem: Problem, plan: Plan, true_value: float) -> None:
    """Fixing the CP-SAT model to the valid ``plan`` is feasible and costs ``true_value`` (within the unit's error)."""
    slots = slot_data(problem, problem.objective)
    times = integer_times(slots)
    decisions = decisions_of_plan(slots, plan.with_device_ids())
    assert decisions is not None
    assert evaluate(problem, plan_of_decisions(slots, decisions)).value == pytest.approx(true_value, rel=1e-12)
    model, var = build_model(slots, times)
    for v, value in hint_values(var, slots, times, decisions).items():
        model.add_hint(v, value)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.fix_variables_to_their_hinted_value = True
    for key, value in SAFE_PARAMETERS.items():
        setattr(solver.parameters, key, value)
    assert solver.solve(model) == cp_model.OPTIMAL
    assert abs(solver.objective_value - times.scale * true_value) <= times.error


# --------------------------------------------------------------------------- examples and statuses


def test_shared_examples(examples):
    lesson = solve(load_problem(examples / "rebalance_4gpu.json"), "cpsat", options=CPSAT)
    assert lesson.status == "optimal" and lesson.value == pytest.approx(22.0, rel=1e-12)
    toy = solve(load_problem(examples / "vla_toy_2x4.json"), "cpsat", options=CPSAT)
    assert toy.status == "optimal" and toy.value == pytest.approx(256.21445621333334, rel=1e-12)
    assert toy.bound <= toy.value and toy.gap < 1e-7


def test_infeasible_problems_say_why():
    # found by exact search only: each layer fits alone
    problem = memory_bound_infeasible()
    result = solve(problem, "cpsat", options=CPSAT)
    assert result.status == "infeasible" and result.plan is None
    assert result.message == explain_infeasible(problem)
    assert "GPU" in result.message
    # caught before the model is built: one layer can never fit
    doc = problem.to_dict()
    doc["layers"][1]["costs"]["dp1tp1"]["weight_bytes"] = 101
    doc["layers"][1]["costs"]["dp2tp1"]["weight_bytes"] = 101
    result = solve(Problem.from_dict(doc), "cpsat", options=CPSAT)
    assert result.status == "infeasible" and "layer 1" in result.message


@pytest.mark.slow
def test_time_limit_gives_a_feasible_plan_a_bound_and_a_gap():
    # proving this one takes ~18 s on one worker (64 L x 4 x 8 now proves in under 2 s), so 2 s stops it early
    problem = vla_like_problem(64, 16, 4, seed=0)
    greedy = solve(problem, "greedy")
    result = solve(problem, "cpsat", time_limit=2.0, options=CPSAT)
    assert result.status == "feasible"
    assert "time limit" in result.message
    assert result.bound is not None and 0 < result.bound <= result.value
    assert result.gap is not None and 0 < result.gap < 1
    assert result.value <= greedy.value  # never worse than the hint
    evaluate(problem, result.plan)


@pytest.mark.slow
@pytest.mark.parametrize(
    "layers,nodes,sizes", [(30, 4, [8, 16, 8]), (60, 8, [8, 16, 24, 16]), (120, 16, [32, 32, 32, 32])]
)
def test_planted_optimum(layers, nodes, sizes):
    problem, optimum = planted_problem(layers, nodes, sizes)
    result = solve(problem, "cpsat", options={**CPSAT, "hint": False})  # found without help
    assert result.status == "optimal"
    assert result.value == pytest.approx(optimum, rel=REL)
    dp = solve(problem, "dp")
    assert dp.status == "optimal" and dp.value == pytest.approx(optimum, rel=REL)


def test_deterministic_for_a_fixed_seed():
    problem = vla_like_problem(16, 2, 8, seed=3, objective="bottleneck")
    first = solve(problem, "cpsat", seed=7, options=CPSAT)
    second = solve(problem, "cpsat", seed=7, options=CPSAT)
    assert first.status == "optimal"
    assert first.plan == second.plan and first.value == second.value


def test_warm_start_is_used_and_an_invalid_one_is_ignored(examples):
    toy = load_problem(examples / "vla_toy_2x4.json")
    best = solve(toy, "brute")
    used = solve(toy, "cpsat", warm_start=best, options=CPSAT)
    assert used.extra["cpsat"]["hint"] == "warm_start"
    assert used.value == pytest.approx(best.value, rel=REL)
    broken = Plan((Stage(0, toy.num_layers - 1, 3, 3, 1),))
    ignored = solve(toy, "cpsat", warm_start=broken, options=CPSAT)
    assert ignored.extra["warm_start"].startswith("ignored: rule")
    assert ignored.extra["cpsat"]["hint"] == "greedy"
    assert ignored.value == pytest.approx(best.value, rel=REL)


def test_custom_topologies_are_refused(examples):
    doc = load_problem(examples / "rebalance_4gpu.json").to_dict()
    doc["cluster"]["topology"] = {"edges": [[0, 1, 10.0], [1, 2, 10.0], [2, 3, 10.0]]}
    result = solve(Problem.from_dict(doc), "cpsat")
    assert result.status == "error" and "custom cluster topologies" in result.message


def test_bad_options_are_input_errors(examples):
    toy = load_problem(examples / "vla_toy_2x4.json")
    for options in ({"num_workers": 0}, {"num_workers": "two"}, {"parameters": {"no_such_parameter": 1}}, {"resolution": 2}):
        with pytest.raises(SolverError):
            solve(toy, "cpsat", options=options)


@pytest.mark.slow
def test_cli_json_result(cli, examples):
    out = cli("solve", examples / "vla_toy_2x4.json", "--method", "cpsat", "--json", "-o", "num_workers=1")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["status"] == "optimal" and doc["method"] == "cpsat"
    assert doc["value"] == pytest.approx(256.21445621333334, rel=1e-12)
    assert doc["bound"] <= doc["value"] and doc["gap"] < 1e-7


# --------------------------------------------------------------------------- benchmark (not a test)


def benchmark(time_limit: float = 120.0, methods=("cpsat", "milp", "dp")) -> None:
    """Time each method on the 64-layer, 4 x 8 GPU, all-layout, no-transfer, iteration benchmark."""
    problem = vla_like_problem(64, 4, 8, seed=0, objective="iteration")
    for method in methods:
        options = {"cpsat": {"num_workers": 2}, "milp": {"threads": 2}}.get(method, {})
        start = time.perf_counter()
        r = solve(problem, method, time_limit=time_limit, options=options)
        seconds = time.perf_counter() - start
        print(f"{method:6s} {r.status:9s} value={r.value:.4f} bound={r.bound:.4f} gap={r.gap:.2e} "
              f"{seconds:.1f}s stages={r.plan.num_stages} {r.extra.get(method, '')}")


if __name__ == "__main__":
    benchmark(float(sys.argv[1]) if len(sys.argv) > 1 else 120.0)
