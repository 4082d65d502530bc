"""``brute`` under the zb-h1 and GPipe iteration estimates: the reference the exact methods are checked against.

The estimates weigh two parts of a stage apart (ZB-H1: t - W and W; GPipe:
F and B), so brute keeps each stage's Pareto tuples. Checked here against
random valid plans (none may beat it) and a hand case where the fastest
config of a stage loses.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import check_no_random_plan_beats, check_plan
from partitioner import evaluate, solve
from partitioner.plan import Plan, Stage
from partitioner.problem import Problem
from strategies import examples, small_problems, small_v2_problems


def _with_schedule(problem: Problem, schedule: str) -> Problem:
    doc = problem.to_dict()
    doc["training"]["schedule"] = schedule
    doc["training"]["objective"] = "iteration"
    return Problem.from_dict(doc)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), schedule=st.sampled_from(["gpipe", "zb-h1"]), v2=st.booleans())
def test_no_valid_plan_beats_brute_under_the_schedules_estimate(data, schedule, v2):
    base = data.draw(small_v2_problems(max_layers=5) if v2 else small_problems(max_layers=5))
    problem = _with_schedule(base, schedule)
    result = solve(problem, "brute")
    assert result.status in ("optimal", "infeasible"), result.message
    if result.plan is not None:
        check_plan(problem, result)
    check_no_random_plan_beats(data, problem, result, tries=8)


def _two_config_problem(schedule: str) -> Problem:
    """Two layers, two stages of 2 GPUs: layer a in dp2 or tp2, layer b in dp2 only.

    Layer a under dp2: F = 1, B = 5 (W = 4), t = 6; under tp2: F = 3, B = 3.5,
    t = 6.5 -- dp2 is the fastest, the tests make the other one win.
    """
    layer = {
        "module": "m",
        "out_bytes": 0,
        "costs": {
            "dp2tp1": {"fwd_ms": 1.0, "bwd_ms": 5.0, "bwd_input_ms": 1.0, "bwd_weight_ms": 4.0, "weight_bytes": 0, "act_bytes": 0},
            "dp1tp2": {"fwd_ms": 3.0, "bwd_ms": 3.5, "bwd_input_ms": 3.0, "bwd_weight_ms": 0.5, "weight_bytes": 0, "act_bytes": 0},
            "dp1tp1": {"fwd_ms": 5.0, "bwd_ms": 5.0, "weight_bytes": 0, "act_bytes": 0},
        },
    }
    slow = {  # the second layer: on one GPU only, a long forward and a short backward
        "module": "m",
        "out_bytes": 0,
        "costs": {"dp2tp1": {"fwd_ms": 6.0, "bwd_ms": 0.5, "bwd_input_ms": 0.25, "bwd_weight_ms": 0.25,
                             "weight_bytes": 0, "act_bytes": 0}},
    }
    return Problem.from_dict({
        "version": 1,
        "name": "pareto",
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu_memory_bytes": 10, "intra_node_GBps": 1, "inter_node_GBps": 1},
        "training": {"microbatches": 4, "objective": "iteration", "schedule": schedule},
        "stages": 2,
        "layers": [dict(layer, name="a"), dict(slow, name="b")],
    })


def test_gpipe_picks_the_config_with_the_smaller_backward_max_not_the_fastest():
    # stage 0 = layer a, stage 1 = layer b (F = 6, B = 0.5)
    # dp2: ΣF + 3 max F + ΣB + 3 max B = 7 + 18 + 5.5 + 15 = 45.5; tp2: 9 + 18 + 4 + 10.5 = 41.5
    problem = _two_config_problem("gpipe")
    result = solve(problem, "brute")
    assert result.status == "optimal"
    assert (result.plan.stages[0].dp, result.plan.stages[0].tp) == (1, 2)
    assert result.value == pytest.approx(41.5)
    other = Plan((Stage(0, 0, 2, 2, 1, (0, 1)), Stage(1, 1, 2, 2, 1, (2, 3))))
    assert evaluate(problem, other).value == pytest.approx(45.5)
    check_plan(problem, result)


def test_zb_h1_picks_a_slower_config_with_a_smaller_u():
    # m = 2, P = 2, k = max(m - P + 1, 1) = 1: the estimate is Σu + max t. Stage 1 (layer b): u = 0.75, t = 1.
    # Stage 0: dp2 u = 2, W = 4, t = 6 -> 2.75 + 6 = 8.75; tp2 u = 1.2, W = 5, t = 6.2 (slower) -> 1.95 + 6.2 = 8.15.
    doc = _two_config_problem("zb-h1").to_dict()
    doc["training"]["microbatches"] = 2
    doc["layers"][0]["costs"]["dp1tp2"] = {"fwd_ms": 1.0, "bwd_ms": 5.2, "bwd_input_ms": 0.2, "bwd_weight_ms": 5.0,
                                           "weight_bytes": 0, "act_bytes": 0}
    doc["layers"][1]["costs"]["dp2tp1"] = {"fwd_ms": 0.5, "bwd_ms": 0.5, "bwd_input_ms": 0.25, "bwd_weight_ms": 0.25,
                                           "weight_bytes": 0, "act_bytes": 0}
    problem = Problem.from_dict(doc)
    result = solve(problem, "brute")
    assert result.status == "optimal"
    assert (result.plan.stages[0].dp, result.plan.stages[0].tp) == (1, 2)
    assert result.value == pytest.approx(8.15)
    fastest = Plan((Stage(0, 0, 2, 2, 1, (0, 1)), Stage(1, 1, 2, 2, 1, (2, 3))))
    assert evaluate(problem, fastest).value == pytest.approx(8.75)
    check_plan(problem, result)
