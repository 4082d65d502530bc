"""The oracle's own bound (issue 35): brute counts its work before it starts and refuses what it cannot finish.

:func:`partitioner.solvers.brute.enumeration_work` counts in closed form what the search visits -- cut x size
combinations, distinct stages, their config tuples and the cost entries those read -- and must count exactly
what the search then does. A problem whose count exceeds what brute enumerates within its time limit (at its
documented rate bounds) is refused at once with the counts: ``feasible`` with the greedy plan under a time
limit (the limit refused it, as cpsat's and milp's build refusals), ``error`` without one; never
``infeasible``.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import partitioner.solvers.brute as brute
from partitioner import ProblemError, solve
from partitioner.problem import Problem
from partitioner.solvers.feasibility import feasible_stage_counts
from strategies import examples, meshes_v3, small_problems, small_v2_problems, small_v3_problems


def many_configs_problem(layers: int = 6) -> Problem:
    """``layers`` layers of three modules on 8 GPUs, every (dp, tp, cp) mesh of 8 GPUs and a zero3 variant,
    the MoE layers with every ep and etp: tens of millions of config tuples for one stage of all layers."""
    modules = ["vision", "vision", "llm", "moe", "llm", "moe"][:layers]
    layer_docs = []
    for i, module in enumerate(modules):
        costs = {}
        for dp, tp, cp in meshes_v3(1, 8):
            d = dp * tp * cp
            eps = [(1, 1)] + ([(e, f) for e in (2, 4, 8) for f in (1, 2) if d % (e * f) == 0] if module == "moe" else [])
            for ep, etp in eps:
                for variant in ("", "/zero3"):
                    key = (f"dp{dp}tp{tp}" + (f"cp{cp}" if cp > 1 else "") + (f"ep{ep}" if ep > 1 else "")
                           + (f"etp{etp}" if etp > 1 else "") + variant)
                    costs[key] = {"fwd_ms": 1.0 + i, "bwd_ms": 2.0, "weight_bytes": 10**6 // (tp * ep), "act_bytes": 10**5}
        layer_docs.append({"name": f"{module}.{i}", "module": module, "out_bytes": 1000, "costs": costs})
    return Problem.from_dict({
        "version": 3, "name": "many-configs", "variants": {"zero3": "sharded"},
        "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu_memory_bytes": 8 * 10**9, "intra_node_GBps": 300.0,
                    "inter_node_GBps": 25.0},
        "training": {"microbatches": 8, "objective": "iteration"}, "layers": layer_docs,
    })


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problem=st.one_of(small_problems(max_layers=6), small_v2_problems(max_layers=6), small_v3_problems(max_layers=5)),
       schedule=st.sampled_from(["1f1b", "zb-h1", "gpipe"]))
def test_the_closed_form_count_is_what_the_search_visits(problem, schedule):
    """The distinct stages (first, last, size, stash) the search costs are the ones counted, and so are the
    config tuples it enumerates for them (the product of their segments' candidates, by construction)."""
    doc = problem.to_dict()
    doc["training"]["schedule"] = schedule
    problem = Problem.from_dict(doc)
    visited: set = set()
    original = brute._fitting_stage_configs

    def recording(problem, first, last, size, stash, check=None):
        visited.add((first, last, size, stash))
        return original(problem, first, last, size, stash, check)

    brute._fitting_stage_configs = recording
    try:
        work = brute.enumeration_work(problem, feasible_stage_counts(problem))
        result = solve(problem, "brute", options={"max_combinations": 10**9})
    finally:
        brute._fitting_stage_configs = original
    assert result.status in ("optimal", "infeasible"), result.message
    if not visited:  # a quick infeasibility proof answered before brute ran
        assert result.status == "infeasible"
        return
    assert work.stages == len(visited), (work, sorted(visited))
    assert work.tuples == sum(_product(problem, a, b, s) for a, b, s, _ in visited)
    assert work.entries == sum(_product(problem, a, b, s) * (b - a + 1) for a, b, s, _ in visited)


def _product(problem: Problem, first: int, last: int, size: int) -> int:
    count = 1
    for a, b in problem.segments(first, last):
        count *= len(brute.segment_candidates(problem, a, b, size))
    return count


def test_a_plan_space_too_large_for_the_time_limit_is_refused_with_its_counts():
    problem = many_configs_problem()
    work = brute.enumeration_work(problem, feasible_stage_counts(problem))
    assert work.tuples > 10**7 and work.seconds() > 60  # a minute at brute's rate bound: hours in fact
    result = solve(problem, "brute", time_limit=5)
    assert result.status == "feasible" and result.extra.get("fallback") == "greedy"
    assert "too large to enumerate" in result.message and f"{work.tuples:,} config tuples" in result.message
    assert "returning the greedy plan" in result.message
    without = solve(problem, "brute", options={"max_seconds": 60})
    assert without.status == "error" and without.plan is None
    assert "too large to enumerate" in without.message and "max_seconds" in without.message


def test_a_count_within_the_rate_bound_runs():
    problem = many_configs_problem(3)
    work = brute.enumeration_work(problem, feasible_stage_counts(problem))
    assert work.seconds() < 5
    result = solve(problem, "brute", time_limit=600)
    assert result.status == "optimal"
    assert result.value == pytest.approx(solve(problem, "dp").value, rel=1e-9)


def test_max_seconds_is_checked_at_the_door():
    problem = many_configs_problem(2)
    for bad in (0, -1, float("nan"), float("inf"), "1"):
        with pytest.raises(ProblemError, match="options.max_seconds"):
            solve(problem, "brute", options={"max_seconds": bad})
