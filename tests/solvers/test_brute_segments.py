"""The oracle in format v2: brute enumerates per-segment configs (with variants and reshards) exactly."""
from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import check_no_random_plan_beats, check_plan, cpu_seconds
from partitioner import load_problem, solve
from partitioner.cluster.placement import size_sequences
from partitioner.cluster.reshard import stage_reshard_ms
from partitioner.problem import Layout, Problem
from partitioner.solvers.brute import best_stage_configs, count_size_sequences, segment_candidates
from partitioner.solvers.tables import CostTables
from strategies import examples, small_problems, small_v2_problems

ROOT = Path(__file__).resolve().parents[2]
REL = 1e-9


def test_lesson15_optimum_is_vision_dp8_then_language_dp2tp4():
    p = load_problem(ROOT / "examples" / "colocated_1node.json")
    result = solve(p, "brute")
    assert result.status == "optimal" and result.version == 2
    assert result.value == pytest.approx(16.36371456, rel=1e-12)
    stage, = result.plan.stages
    assert stage.configs == (Layout(8, 1), Layout(2, 4))
    assert stage.device_ids == tuple(range(8))
    ev = result.evaluation.stages[0]
    b = p.layers[2].out_bytes  # the vision output, resharded dp 8 -> dp 2 x tp 4
    assert ev.reshard_ms == pytest.approx(b * 3 / 32 / (p.cluster.intra_node_GBps * 1e6), rel=1e-12)
    assert ev.reshard_ms == pytest.approx(0.03145728, rel=1e-12)
    check_plan(p, result)


def _best_by_hand(problem: Problem, a: int, b: int, size: int, stash: int) -> float | None:
    """Every config of every layer independently, keeping the tuples that are constant on each segment."""
    segs = problem.segments(a, b)
    seg_of = {i: k for k, (s, t) in enumerate(segs) for i in range(s, t + 1)}
    best = None
    per_layer = [[lay for lay in problem.layers[i].costs if lay.devices == size] for i in range(a, b + 1)]
    for combo in itertools.product(*per_layer):
        chosen = {}
        if any(chosen.setdefault(seg_of[a + j], lay) != lay for j, lay in enumerate(combo)):
            continue
        cs = [problem.layers[a + j].costs[lay] for j, lay in enumerate(combo)]
        if sum(c.weight_bytes for c in cs) + stash * sum(c.act_bytes for c in cs) > problem.cluster.gpu_memory_bytes:
            continue
        r = sum(stage_reshard_ms(problem.layers[t].out_bytes, chosen[k], chosen[k + 1], size, problem.cluster)
                for k, (_, t) in enumerate(segs[:-1]))
        total = sum(c.fwd_ms + c.bwd_ms for c in cs) + 2 * r
        best = total if best is None else min(best, total)
    return best


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=small_v2_problems(max_layers=5), data=st.data())
def test_stage_choice_is_the_best_of_all_per_layer_assignments(problem, data):
    """best_stage_configs agrees with a per-layer enumeration filtered to segment-constant tuples."""
    L = problem.num_layers
    a = data.draw(st.integers(0, L - 1))
    b = data.draw(st.integers(a, L - 1))
    size = data.draw(st.sampled_from(problem.cluster.allowed_sizes()))
    stash = data.draw(st.integers(1, 4))
    got = best_stage_configs(problem, a, b, size, stash)
    want = _best_by_hand(problem, a, b, size, stash)
    if want is None:
        assert got is None
    else:
        assert got is not None and got.compute_ms == pytest.approx(want, rel=1e-12)
        assert len(got.configs) == len(problem.segments(a, b))
        for (s, t), lay in zip(problem.segments(a, b), got.configs):
            assert lay in segment_candidates(problem, s, t, size)


@pytest.mark.slow
@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data(), problem=small_v2_problems())
def test_brute_v2_is_never_beaten_by_a_random_valid_plan(data, problem):
    result = solve(problem, "brute")
    assert result.status in ("optimal", "infeasible"), result.message
    if result.status == "optimal":
        assert result.version == 2
        check_plan(problem, result)
        assert result.bound == result.value and result.gap == 0.0
        for stage in result.evaluation.stages:
            assert len(stage.configs) == len(stage.segments)
    else:
        assert result.message
    check_no_random_plan_beats(data, problem, result, tries=8, rel=REL)


def _v1_brute_reference(problem: Problem, objective: str) -> float | None:
    """The pre-v2 brute value: the fastest fitting layout per stage from the prefix-sum tables."""
    from partitioner.plan import objective_value
    from partitioner.solvers.brute import placement_patterns
    from partitioner.solvers.feasibility import feasible_stage_counts

    tables = CostTables(problem)
    m, L, N = problem.microbatches, problem.num_layers, problem.num_devices
    best = None
    for P in feasible_stage_counts(problem):
        for sizes in size_sequences(problem.cluster.allowed_sizes(), N, P):
            for cuts in itertools.combinations(range(1, L), P - 1):
                bounds = (0,) + cuts + (L,)
                ch = [tables.best(bounds[p], bounds[p + 1] - 1, sizes[p], min(m, P - p)) for p in range(P)]
                if any(c is None for c in ch):
                    continue
                for links in placement_patterns(problem.cluster, sizes):
                    times = [
                        ch[p].compute_ms
                        + (tables.transfer(bounds[p + 1] - 1, sizes[p], sizes[p + 1], links[p]) if p < P - 1 else 0)
                        + (tables.transfer(bounds[p] - 1, sizes[p - 1], sizes[p], links[p - 1]) if p > 0 else 0)
                        for p in range(P)
                    ]
                    v = objective_value(objective, times, m)
                    best = v if best is None else min(best, v)
    return best


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=small_problems())
def test_v1_answers_are_unchanged(problem):
    result = solve(problem, "brute")
    want = _v1_brute_reference(problem, problem.objective)
    if want is None:
        assert result.status == "infeasible"
    else:
        assert result.status == "optimal" and result.version == 1
        assert result.value == pytest.approx(want, rel=1e-12)
        assert all(s.configs is None for s in result.plan.stages)  # v1 plans keep one layout per stage


def test_v1_examples_are_unchanged(examples):
    lesson = solve(load_problem(examples / "rebalance_4gpu.json"), "brute")
    assert lesson.status == "optimal" and lesson.value == 22.0 and lesson.version == 1
    toy = solve(load_problem(examples / "vla_toy_2x4.json"), "brute")
    assert toy.value == pytest.approx(256.21445621333334, rel=1e-12)
    assert "configs" not in toy.to_dict()["plan"]["stages"][0]


def test_size_sequences_are_counted_not_listed():
    for allowed, total in [((1, 2, 4, 8), 8), ((1, 2, 4, 8, 16, 24), 24), ((1, 2, 3), 7), ((2, 4), 9), ((4, 1, 2), 6)]:
        for k in range(10):
            assert count_size_sequences(allowed, total, k) == len(size_sequences(tuple(sorted(allowed)), total, k))


def test_brute_refuses_a_huge_problem_at_once():
    """86 layers on 64 GPUs: about 6.5e42 cut x size combinations; the refusal must not list them."""
    layer = {"module": "m", "costs": {f"dp{d}tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 1, "act_bytes": 1}
                                      for d in (1, 2, 4, 8, 16, 32, 64)}}
    p = Problem.from_dict({
        "version": 1,
        "cluster": {"nodes": 8, "gpus_per_node": 8, "gpu_memory_bytes": 10**9,
                    "intra_node_GBps": 100.0, "inter_node_GBps": 10.0},
        "training": {"microbatches": 64}, "layers": [layer] * 86})
    start = cpu_seconds()
    result = solve(p, "brute")
    assert cpu_seconds() - start < 5.0  # generous: it takes milliseconds of CPU; listing would take hours
    assert result.status == "error" and "max_combinations" in result.message
