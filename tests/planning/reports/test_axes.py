"""planning.reports.axes: the best plan with EP (CP) forced, beside a kept plan that does not use it."""
from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings

from partitioner.plan import Plan, evaluate
from partitioner.planning.reports.axes import axis_alternatives, forced_problem
from partitioner.problem import Cluster, Layer, LayerCost, Layout, Problem, StageBounds, Training
from partitioner.solvers import solve
from strategies import examples, small_v3_problems

GiB = 2**30


def _moe_problem(memory_gib: float = 80.0, ep_ms: float = 2.0, ep_act_gib: float = 1.0) -> Problem:
    """Four layers on 4 GPUs of one node; the last two are MoE-like with ep 2 and 4 keys taking ``ep_ms``."""
    def dense(i: int) -> Layer:
        return Layer(f"dense.{i}", "dense", 2**20, {
            Layout(4, 1): LayerCost(1.0, 2.0, 2 * GiB, GiB), Layout(2, 2): LayerCost(1.2, 2.4, GiB, GiB)})

    def moe(i: int) -> Layer:
        return Layer(f"moe.{i}", "moe", 2**20, {
            Layout(4, 1): LayerCost(1.5, 3.0, 8 * GiB, GiB),
            Layout(4, 1, ep=2): LayerCost(ep_ms, 2 * ep_ms, 4 * GiB, int(ep_act_gib * GiB)),
            Layout(4, 1, ep=4): LayerCost(ep_ms * 1.1, 2.2 * ep_ms, 2 * GiB, int(ep_act_gib * GiB))})

    cluster = Cluster(1, 4, int(memory_gib * GiB), 300.0, 25.0)
    return Problem("moe-toy", cluster, Training(4, "iteration"), StageBounds(1, 1),
                   (dense(0), dense(1), moe(2), moe(3)), version=3)


def _eps(problem: Problem, plan: Plan) -> list[int]:
    return [c.ep for s in plan.stages for _, c in s.segment_configs(problem)]


def test_forcing_keeps_only_the_axis_on_the_layers_that_offer_it():
    problem = _moe_problem()
    forced = forced_problem(problem, "ep")
    assert forced is not None and forced_problem(problem, "cp") is None  # no layer offers cp
    assert [set(layer.costs) for layer in forced.layers[:2]] == [set(layer.costs) for layer in problem.layers[:2]]
    assert all(k.ep > 1 for layer in forced.layers[2:] for k in layer.costs)


def test_the_line_gives_the_best_plan_with_ep_and_its_time():
    problem = _moe_problem(ep_ms=2.0)  # ep 2 is slower than ep 1 (1.5 ms): the kept plan runs ep 1
    kept = solve(problem, "brute")
    assert kept.status == "optimal" and set(_eps(problem, kept.plan)) == {1}
    (alt,) = axis_alternatives(problem, kept.plan, method="dp")
    assert alt.axis == "ep" and alt.status == "optimal"
    # dense layers at dp4 (1+2 ms), MoE layers at ep 2 (2+4 ms): 2*3 + 2*6 = 18 ms per microbatch, 4 microbatches
    assert math.isclose(alt.value, 4 * 18.0, rel_tol=1e-9)
    assert alt.value > alt.kept_value and alt.layouts == ("dp4tp1+dp4tp1ep2",)
    assert "ep not chosen" in alt.text() and f"{alt.value:.1f} ms" in alt.text()


def test_no_line_for_an_axis_the_plan_uses():
    problem = _moe_problem(ep_ms=1.0)  # ep 2 wins
    kept = solve(problem, "brute")
    assert max(_eps(problem, kept.plan)) > 1
    assert axis_alternatives(problem, kept.plan) == ()


def test_an_axis_that_cannot_fit_says_so():
    problem = _moe_problem(memory_gib=30.0, ep_act_gib=40.0)  # ep 1 fits (24 GiB); any ep > 1 stashes 40 GiB
    kept = solve(problem, "brute")
    (alt,) = axis_alternatives(problem, kept.plan, method="dp")
    assert alt.status == "infeasible" and alt.value is None and alt.slowdown is None
    assert alt.text().startswith("ep not chosen: no plan with ep > 1 on every layer that offers it (infeasible")


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(small_v3_problems(max_layers=5, ties=False))
def test_the_forced_optimum_is_a_plan_of_the_problem_and_never_beats_its_optimum(problem):
    """Oracle: brute on the original and on the forced problem; dp's forced answer equals brute's."""
    best = solve(problem, "brute")
    if best.plan is None:
        return
    for alt in axis_alternatives(problem, best.plan, method="dp"):
        oracle = solve(forced_problem(problem, alt.axis), "brute")
        if oracle.plan is None:
            assert alt.value is None and alt.status in ("infeasible", "error")
            continue
        assert alt.status == "optimal" and math.isclose(alt.value, oracle.value, rel_tol=1e-6, abs_tol=1e-9)
        assert alt.value >= best.value * (1 - 1e-9)
        assert math.isclose(evaluate(problem, oracle.plan).value, oracle.value, rel_tol=1e-9)


def test_with_no_time_left_the_line_gives_the_kept_plan_with_the_axis_switched_on():
    """No time for a forced solve: the kept plan's stages with ep at the degree that evaluates best (ep 2: 2 ms
    against ep 4's 2.2 ms), a plan of the forced problem valued by the one evaluate -- never "skipped"."""
    from partitioner.core.deadline import Deadline

    problem = _moe_problem(ep_ms=2.0)
    kept = solve(problem, "brute")
    spent = Deadline(1.0, spent=5.0)
    (alt,) = axis_alternatives(problem, kept.plan, method="dp", deadline=spent)
    assert alt.status == "feasible" and alt.layouts == ("dp4tp1+dp4tp1ep2",)
    assert math.isclose(alt.value, 4 * 18.0, rel_tol=1e-9)  # here the switched plan is the forced optimum
    assert "no time for a forced solve" in alt.text() and f"{alt.value:.1f} ms" in alt.text()


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(small_v3_problems(max_layers=5, ties=False))
def test_the_switched_plan_is_a_plan_of_the_forced_problem_never_better_than_its_optimum(problem):
    from partitioner.planning.reports.axes import switched_plan

    best = solve(problem, "brute")
    if best.plan is None:
        return
    for axis in ("ep", "cp"):
        forced = forced_problem(problem, axis)
        switched = None if forced is None else switched_plan(forced, best.plan, axis)
        if switched is None:
            continue
        oracle = solve(forced, "brute")
        assert oracle.plan is not None  # the switched plan is one
        assert evaluate(forced, switched).value >= oracle.value * (1 - 1e-9)
        assert any(getattr(c, axis) > 1 for s in switched.stages for _, c in s.segment_configs(forced))
