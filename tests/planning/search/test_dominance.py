"""The dominance reduction of plan's exact solve keeps every problem's optimum (planning/search/dominance.py).

Random small v2 and v3 problems get an extra memory-knob variant ``zero1``
next to some of their entries, its numbers drawn at, below or above the
entry's (so it dominates, is dominated, ties, or neither); brute's optimum of
the reduced problem must equal brute's optimum of the problem (value and
infeasibility), dp must find it on the reduced problem, and every plan of the
reduced problem must be a plan of the problem with the same value.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitioner import evaluate, solve
from partitioner.plan import Plan, Stage
from partitioner.planning.search.dominance import entry_at_most, reduce_dominated
from partitioner.problem import LayerCost, Layout, Problem
from strategies import examples, small_v2_problems, small_v3_problems

REL = 1e-9
FIELDS = ("fwd_ms", "bwd_ms", "weight_bytes", "act_bytes")


@st.composite
def with_zero1(draw, base) -> Problem:
    """``base`` with a ``zero1`` twin next to some entries: equal, or one number (or all) scaled by 0.5 or 1.5."""
    problem = draw(base)
    doc = problem.to_dict()
    for layer in doc["layers"]:
        for key, entry in list(layer["costs"].items()):
            lay = Layout.parse(key)
            if lay.variant or draw(st.integers(0, 3)) == 0:
                continue
            twin = dict(entry)
            twin.pop("bwd_input_ms", None)
            twin.pop("bwd_weight_ms", None)
            changed = draw(st.sampled_from([(), *((name,) for name in FIELDS), FIELDS]))
            factor = draw(st.sampled_from([0.5, 1.5]))
            for name in changed:
                scaled = entry[name] * factor
                twin[name] = round(scaled, 3) if name.endswith("_ms") else int(scaled)
            if "tied_weight_bytes" in twin:
                twin["tied_weight_bytes"] = draw(st.integers(0, twin["weight_bytes"]))
            layer["costs"][f"{key}/zero1"] = twin
    doc.setdefault("variants", {})["zero1"] = "optimizer states sharded over dp"
    return Problem.from_dict(doc)


def _same_optimum(problem: Problem, objective: str) -> None:
    reduction = reduce_dominated(problem)
    assert reduction.kept <= reduction.keys
    full = solve(problem, "brute", objective=objective)
    cut = solve(reduction.problem, "brute", objective=objective)
    assert (full.status == "infeasible") == (cut.status == "infeasible"), (full.message, cut.message)
    if full.status == "infeasible":
        return
    assert full.status == "optimal" and cut.status == "optimal"
    assert cut.value == pytest.approx(full.value, rel=REL)
    # the reduced problem's plan is a plan of the problem, with the same value
    assert evaluate(problem, cut.plan, objective).value == pytest.approx(cut.value, rel=1e-12)
    # the problem's optimal plan, its dropped configs swapped, is as good on the reduced problem
    mapped = reduction.map_plan(problem, full.plan)
    assert evaluate(reduction.problem, mapped, objective).value <= full.value * (1 + REL)
    dp = solve(reduction.problem, "dp", objective=objective)
    assert dp.status == "optimal" and dp.value == pytest.approx(full.value, rel=1e-6)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])
@given(problem=with_zero1(small_v2_problems(max_layers=5)), objective=st.sampled_from(["bottleneck", "iteration"]),
       schedule=st.sampled_from(["1f1b", "1f1b", "zb-h1", "gpipe"]))
def test_reduction_keeps_the_optimum_v2(problem, objective, schedule):
    doc = problem.to_dict()
    doc["training"]["schedule"] = schedule
    _same_optimum(Problem.from_dict(doc), objective)


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.data_too_large])
@given(problem=with_zero1(small_v3_problems(max_layers=5)), objective=st.sampled_from(["bottleneck", "iteration"]))
def test_reduction_keeps_the_optimum_v3_with_ties(problem, objective):
    _same_optimum(problem, objective)


def test_entry_at_most_reads_every_number():
    a = LayerCost(1.0, 2.0, 10, 5)
    assert entry_at_most(a, a)
    for worse in (LayerCost(1.1, 2.0, 10, 5), LayerCost(1.0, 2.1, 10, 5), LayerCost(1.0, 2.0, 11, 5),
                  LayerCost(1.0, 2.0, 10, 6), LayerCost(1.0, 2.0, 10, 5, 1.5, 0.5)):
        assert not entry_at_most(worse, a)
    # a tied layer counts its weights less the shared bytes: fewer weights but fewer shared bytes can be worse
    shared = LayerCost(1.0, 2.0, 12, 5, tied_weight_bytes=6)
    plain = LayerCost(1.0, 2.0, 10, 5)
    assert entry_at_most(plain, shared) and not entry_at_most(plain, shared, tied=True)


def _doc(costs_per_layer: list[dict], memory: int = 100) -> dict:
    return {
        "version": 2, "name": "tiny",
        "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu_memory_bytes": memory, "intra_node_GBps": 100.0,
                    "inter_node_GBps": 10.0},
        "training": {"microbatches": 4, "objective": "iteration"},
        "variants": {"zero1": "optimizer states sharded", "recompute": "recomputed activations"},
        "layers": [{"name": f"l{i}", "module": "m", "out_bytes": 0, "costs": c} for i, c in enumerate(costs_per_layer)],
    }


def test_a_dominated_variant_is_dropped_and_an_incomparable_one_kept():
    e = {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 40, "act_bytes": 10}
    costs = {"dp1tp1": e, "dp1tp1/zero1": {**e, "weight_bytes": 30}, "dp1tp1/recompute": {**e, "bwd_ms": 3.0, "act_bytes": 1}}
    problem = Problem.from_dict(_doc([costs, costs]))
    reduction = reduce_dominated(problem)
    assert (reduction.keys, reduction.kept) == (3, 2)
    assert {lay.key for lay in reduction.problem.layers[0].costs} == {"dp1tp1/zero1", "dp1tp1/recompute"}
    plan = Plan((Stage(0, 1, 1, 1, 1, variant=""),))
    mapped = reduction.map_plan(problem, plan)
    assert mapped.stages[0].variant == "zero1"


def test_dominance_must_hold_on_every_layer_of_the_run():
    e = {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 40, "act_bytes": 10}
    better = {"dp1tp1": e, "dp1tp1/zero1": {**e, "weight_bytes": 30}}
    worse = {"dp1tp1": e, "dp1tp1/zero1": {**e, "fwd_ms": 1.5, "weight_bytes": 30}}
    reduction = reduce_dominated(Problem.from_dict(_doc([better, worse])))
    assert reduction.kept == reduction.keys == 2


def test_an_expert_split_that_changes_nothing_is_dropped_for_the_plain_config():
    e = {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 40, "act_bytes": 10}
    dense = {"dp2tp1": e, "dp2tp1ep2": dict(e)}  # a dense layer: ep changes nothing
    expert = {"dp2tp1": e, "dp2tp1ep2": {**e, "weight_bytes": 20}}  # an expert layer: ep halves its weights
    doc = _doc([dense, dense])
    doc["version"] = 3
    reduction = reduce_dominated(Problem.from_dict(doc))
    assert (reduction.keys, reduction.kept) == (2, 1)
    assert {lay.key for lay in reduction.problem.layers[1].costs} == {"dp2tp1"}
    doc = _doc([dense, expert])
    doc["version"] = 3
    reduction = reduce_dominated(Problem.from_dict(doc))
    assert {lay.key for lay in reduction.problem.layers[1].costs} == {"dp2tp1ep2"}  # never worse: it stays
