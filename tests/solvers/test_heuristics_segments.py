"""Format v2 in the heuristics: greedy uses per-segment configs, uniform/balanced keep one config per model."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import check_plan
from partitioner import load_problem, solve
from partitioner.problem import Layout, Problem
from partitioner.solvers.brute import best_stage_configs
from partitioner.solvers.tables import CostTables
from strategies import examples, small_problems, small_v2_problems

ROOT = Path(__file__).resolve().parents[2]
LESSON15 = ROOT / "examples" / "colocated_1node.json"


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=small_v2_problems(), data=st.data())
def test_best_stage_is_the_exhaustive_stage_optimum(problem, data):
    """The Pareto pass over segments finds what brute's explicit product finds."""
    tables = CostTables(problem)
    L = problem.num_layers
    for _ in range(6):
        a = data.draw(st.integers(0, L - 1))
        b = data.draw(st.integers(a, L - 1))
        size = data.draw(st.sampled_from(problem.cluster.allowed_sizes()))
        stash = data.draw(st.integers(1, 4))
        got, want = tables.best_stage(a, b, size, stash), best_stage_configs(problem, a, b, size, stash)
        assert (got is None) == (want is None)
        if got is not None:
            assert got.compute_ms == pytest.approx(want.compute_ms, rel=1e-12, abs=1e-12)
            assert len(got.configs) == len(problem.segments(a, b)) and got.layout == got.configs[0]
            assert got.reshard_ms >= 0.0


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=small_problems(), data=st.data())
def test_best_stage_is_best_in_v1(problem, data):
    tables = CostTables(problem)
    a = data.draw(st.integers(0, problem.num_layers - 1))
    b = data.draw(st.integers(a, problem.num_layers - 1))
    size = data.draw(st.sampled_from(problem.cluster.allowed_sizes()))
    got, want = tables.best_stage(a, b, size, 2), tables.best(a, b, size, 2)
    assert (got is None) == (want is None)
    if got is not None:
        assert (got.layout, got.compute_ms, got.configs, got.reshard_ms) == (want.layout, want.compute_ms, (want.layout,), 0.0)


@pytest.mark.slow
@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=small_v2_problems())
def test_heuristics_on_v2_are_valid_and_never_beat_brute(problem):
    oracle = solve(problem, "brute")
    for method in ("greedy", "uniform", "balanced"):
        result = solve(problem, method)
        assert result.status in ("feasible", "infeasible"), (method, result.message)
        if result.status == "infeasible":
            assert result.message
            continue
        assert oracle.status == "optimal"
        assert result.value >= oracle.value * (1 - 1e-9), method
        check_plan(problem, result)
        if method != "greedy":
            # Megatron-LM's family: one config (variant included) for every segment of every stage
            configs = {c for s in result.evaluation.stages for c in s.configs}
            assert len(configs) == 1, (method, configs)
            assert all(s.reshard_ms == 0.0 for s in result.evaluation.stages)


def test_greedy_finds_lesson15_while_megatron_baselines_cannot():
    p = load_problem(LESSON15)
    greedy = solve(p, "greedy")
    assert greedy.status == "feasible" and greedy.value == pytest.approx(16.36371456, rel=1e-12)
    assert greedy.plan.stages[0].configs == (Layout(8, 1), Layout(2, 4))
    check_plan(p, greedy)
    for method in ("uniform", "balanced"):
        r = solve(p, method)
        # one config for both modules: the language model's weights force tp >= 4 on the vision tower too
        assert r.status == "feasible" and r.plan.stages[0].configs is None
        assert r.plan.stages[0].tp >= 4 and r.value > greedy.value


def _variant_problem() -> Problem:
    """Two modules on 2 GPUs: the plain dp2tp1 does not fit, zero3 (weights / dp) does; dp1tp1 is slow."""
    def costs(w):
        return {
            "dp2tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": w, "act_bytes": 1},
            "dp2tp1/zero3": {"fwd_ms": 1.5, "bwd_ms": 2.5, "weight_bytes": w // 2, "act_bytes": 1},
            "dp1tp1": {"fwd_ms": 5.0, "bwd_ms": 10.0, "weight_bytes": w, "act_bytes": 1},
        }
    return Problem.from_dict({
        "version": 2,
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu_memory_bytes": 100,
                    "intra_node_GBps": 1.0, "inter_node_GBps": 1.0},
        "training": {"microbatches": 4, "objective": "bottleneck"},
        "variants": {"zero3": "sharded weights"},
        "layers": [{"module": "a", "costs": costs(80)}, {"module": "b", "costs": costs(40)}],
    })


def test_baselines_pick_and_keep_the_variant():
    p = _variant_problem()
    # dp2tp1 for both: 120 + 4 x 2 > 100 B; zero3 for both: 60 + 8 fits, 8 ms; dp1tp1: two 15 ms stages
    for method in ("uniform", "balanced"):
        r = solve(p, method)
        assert r.status == "feasible", r.message
        assert {c for s in r.evaluation.stages for c in s.configs} == {Layout(2, 1, "zero3")}
        assert r.value == pytest.approx(8.0)
    # per segment: zero3 where the weights are big, plain where they fit (40 + 40 + 8 <= 100), 4 + 3 ms;
    # a change of variant only is no reshard
    for method in ("brute", "greedy"):
        r = solve(p, method)
        assert r.value == pytest.approx(7.0), method
        assert r.plan.stages[0].configs == (Layout(2, 1, "zero3"), Layout(2, 1))
        assert r.evaluation.stages[0].reshard_ms == 0.0
