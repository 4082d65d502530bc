"""Every exact method gives one status on problems whose optimum sits on the memory limit or ties (issue 35).

``strategies.boundary_problems`` scales a random v1, v2 or v3 problem's bytes to gigabytes (one byte is then
below the MILP backends' relative tolerance) and sets the GPU's memory to one stage's need of the plan that
is best with unlimited memory, plus -1, 0 or +1 bytes; now and then every layer's times are equal, so that
many plans tie. brute, dp, cpsat (one worker, a fixed seed) and milp must then answer the same status --
``optimal`` with the same value, or ``infeasible`` -- never ``error`` or ``feasible``, and every plan must
pass ``evaluate`` and replay within memory. Under ``interleaved`` (which dp does not plan) brute, cpsat and
milp search their shared space. The budgets are ``strategies.examples`` of the profile: 500 and 200
examples under ``thorough``.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from checks import check_plan
from partitioner import solve
from partitioner.problem import Problem
from strategies import boundary_problems, examples

REL = 1e-6
SEED = 7
OPTIONS = {"dp": {}, "cpsat": {"num_workers": 1}, "milp": {}, "cbc": {"backend": "cbc"}, "brute": {}}


def same_answers(problem: Problem, methods: tuple[str, ...]) -> None:
    """Each of ``methods`` answers brute's status, and brute's value when it is ``optimal``."""
    oracle = solve(problem, "brute")
    assert oracle.status in ("optimal", "infeasible"), oracle.message
    for name in methods:
        method = "milp" if name == "cbc" else name
        result = solve(problem, method, options=OPTIONS[name], seed=SEED)
        assert result.status == oracle.status, (name, result.status, result.message, oracle.message)
        if oracle.status == "infeasible":
            assert result.plan is None and result.message
            continue
        assert result.value == pytest.approx(oracle.value, rel=REL), (name, result.message)
        check_plan(problem, result)
    if oracle.plan is not None:
        check_plan(problem, oracle)


@settings(max_examples=examples(100), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(problem=boundary_problems())
def test_exact_methods_agree_on_the_memory_limit_and_on_ties(problem):
    same_answers(problem, ("dp", "cpsat", "milp"))


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(problem=boundary_problems(schedules=("interleaved",)))
def test_exact_methods_agree_on_the_memory_limit_under_interleaving(problem):
    same_answers(problem, ("dp", "cpsat", "milp"))


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(problem=boundary_problems(schedules=("1f1b", "zb-h1", "gpipe", "interleaved")))
def test_the_cbc_backend_agrees_on_the_memory_limit(problem):
    same_answers(problem, ("cbc",))


def test_a_plan_a_hair_over_the_memory_limit_is_no_plan_for_any_exact_method():
    """The case of issue 35, as the boundary strategy found it: the only plan (both layers on two GPUs, the
    vision layer has no one-GPU entry) needs one byte more than the GPU has, in a model of two modules
    (milp states their memory as a share of the GPU). milp answered ``error``: "the highs solution is not a
    valid plan: rule 6 (memory)"."""
    doc = {
        "version": 2, "name": "a-hair-over",
        "cluster": {"nodes": 2, "gpus_per_node": 1, "gpu_memory_bytes": 32_000_000_292,
                    "intra_node_GBps": 0.001, "inter_node_GBps": 0.0005},
        "training": {"microbatches": 1, "objective": "bottleneck"},
        "layers": [
            {"name": "vision.0", "module": "vision", "out_bytes": 0, "costs": {
                "dp2tp1": {"fwd_ms": 20.464, "bwd_ms": 39.447, "weight_bytes": 24_000_000_169, "act_bytes": 1_000_000_072}}},
            {"name": "action.1", "module": "action", "out_bytes": 0, "costs": {
                "dp1tp1": {"fwd_ms": 56.667, "bwd_ms": 0.0, "weight_bytes": 2, "act_bytes": 0},
                "dp2tp1": {"fwd_ms": 28.333, "bwd_ms": 15.739, "weight_bytes": 2, "act_bytes": 7_000_000_050}}},
        ],
    }
    same_answers(Problem.from_dict(doc), ("dp", "cpsat", "milp", "cbc"))  # 32,000,000,293 bytes needed
    doc["cluster"]["gpu_memory_bytes"] += 1
    same_answers(Problem.from_dict(doc), ("dp", "cpsat", "milp", "cbc"))
