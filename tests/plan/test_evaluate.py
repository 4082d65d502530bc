"""Plan evaluation against hand-computed numbers, and one broken plan per validity rule."""
from __future__ import annotations

import dataclasses

import pytest

from partitioner.plan import Plan, PlanError, SolveResult, Stage, evaluate
from partitioner.problem import Problem, ProblemError


def cost(f, b, w, a):
    return {"fwd_ms": f, "bwd_ms": b, "weight_bytes": w, "act_bytes": a}


def problem(memory=1000, stages=None):
    doc = {
        "version": 1,
        "name": "hand",
        "cluster": {"nodes": 2, "gpus_per_node": 4, "gpu_memory_bytes": memory, "intra_node_GBps": 100.0, "inter_node_GBps": 10.0},
        "training": {"microbatches": 4, "objective": "bottleneck"},
        "layers": [
            {"name": "vision", "out_bytes": 20_000_000, "costs": {"dp2tp1": cost(4, 8, 100, 50), "dp1tp1": cost(7, 14, 100, 100)}},
            {"name": "llm", "out_bytes": 40_000_000, "costs": {"dp2tp2": cost(2, 4, 200, 20), "dp1tp1": cost(8, 16, 800, 80)}},
            {"name": "proj", "out_bytes": 10_000_000, "costs": {"dp1tp1": cost(3, 5, 50, 10)}},
            {"name": "action", "out_bytes": 0, "costs": {"dp1tp1": cost(1, 2, 30, 10), "dp2tp1": cost(1, 2, 30, 10)}},
        ],
    }
    if stages is not None:
        doc["stages"] = stages
    return Problem.from_dict(doc)


# vision on node 0, llm on node 1, then two 1-GPU stages back on node 0 beside vision
PLAN = Plan(
    (
        Stage(0, 0, 2, 2, 1, (0, 1)),
        Stage(1, 1, 4, 2, 2, (4, 5, 6, 7)),
        Stage(2, 2, 1, 1, 1, (2,)),
        Stage(3, 3, 1, 1, 1, (3,)),
    )
)


def test_hand_computed_times_memory_and_objectives():
    ev = evaluate(problem(), PLAN)
    # x0: 2e7 B over min(2,4)=2 NICs at 10 GB/s = 1 ms; x1: 4e7 B over 1 NIC = 4 ms;
    # x2: stages 2 and 3 share node 0, 1e7 B over NVLink at 100 GB/s = 0.1 ms
    assert ev.transfers_ms == pytest.approx((1.0, 4.0, 0.1))
    assert [s.fwd_ms for s in ev.stages] == pytest.approx([5.0, 6.0, 3.1, 1.0])
    assert [s.bwd_ms for s in ev.stages] == pytest.approx([8.0, 5.0, 9.0, 2.1])
    assert ev.times_ms == pytest.approx([13.0, 11.0, 12.1, 3.1])
    assert [s.stash for s in ev.stages] == [4, 3, 2, 1]
    assert ev.peak_memory_bytes == [300, 260, 70, 40]
    assert ev.bottleneck_ms == pytest.approx(13.0) and ev.bottleneck_stage == 0
    assert ev.value == pytest.approx(13.0)
    assert evaluate(problem(), PLAN, "iteration").value == pytest.approx(39.2 + 3 * 13.0)
    assert [s.nodes for s in ev.stages] == [(0,), (1,), (0,), (0,)]


def test_stash_is_capped_by_microbatches():
    p = problem()
    p = dataclasses.replace(p, training=dataclasses.replace(p.training, microbatches=2))
    ev = evaluate(p, PLAN)
    assert [s.stash for s in ev.stages] == [2, 2, 2, 1]
    assert ev.iteration_ms == pytest.approx(39.2 + 13.0)


def test_contiguous_default_ids_must_respect_nodes():
    no_ids = Plan(tuple(dataclasses.replace(s, device_ids=None) for s in PLAN.stages))
    with pytest.raises(PlanError) as info:
        evaluate(problem(), no_ids)
    assert info.value.rule == 4 and info.value.stage == 1
    ordered = Plan((PLAN.stages[0], PLAN.stages[2], PLAN.stages[3], PLAN.stages[1]))  # not a cover, for contrast
    with pytest.raises(PlanError) as info:
        evaluate(problem(), ordered)
    assert info.value.rule == 1


def stage(p, **kw):
    return dataclasses.replace(PLAN.stages[p], **kw)


def with_stage(p, **kw):
    stages = list(PLAN.stages)
    stages[p] = stage(p, **kw)
    return Plan(tuple(stages))


BROKEN = [
    # rule 1: a gap in the layers; and the stage count outside the bounds
    (1, problem(), with_stage(1, first_layer=2)),
    (1, problem(stages={"max": 3}), PLAN),
    # rule 2: nine devices on an eight-GPU cluster (no ids: contiguous)
    (2, problem(), Plan(tuple(dataclasses.replace(s, device_ids=None) for s in PLAN.stages[:3]) + (Stage(3, 3, 2, 2, 1),))),
    # rule 3: a 3-GPU stage
    (3, problem(), Plan((Stage(0, 0, 3, 3, 1), Stage(1, 1, 4, 2, 2), Stage(2, 3, 1, 1, 1)))),
    # rule 4: two stages on one GPU
    (4, problem(), with_stage(3, device_ids=(2,))),
    # rule 4: a 2-GPU stage across two nodes
    (4, problem(), Plan((stage(0, device_ids=(3, 4)), stage(1, device_ids=(0, 5, 6, 7)), stage(2, device_ids=(1,)), stage(3, device_ids=(2,))))),
    # rule 5: dp*tp = devices but the layer has no dp1tp2 entry
    (5, problem(), with_stage(0, dp=1, tp=2)),
    # rule 5: dp*tp != devices
    (5, problem(), with_stage(0, dp=1, tp=1)),
    # rule 6: stage 0 needs 100 + 4 * 50 = 300 bytes
    (6, problem(memory=280), PLAN),
]


@pytest.mark.parametrize("rule,prob,plan", BROKEN)
def test_each_rule(rule, prob, plan):
    with pytest.raises(PlanError) as info:
        evaluate(prob, plan)
    assert info.value.rule == rule, str(info.value)
    assert f"rule {rule}" in str(info.value)


def test_memory_message_names_the_numbers():
    with pytest.raises(PlanError, match=r"stage 0: needs 300 B \(weights 100 B \+ 4 x activations 50 B\) > 280 B"):
        evaluate(problem(memory=280), PLAN)


def test_plan_documents_round_trip():
    p = problem()
    ev = evaluate(p, PLAN)
    doc = PLAN.to_dict(ev)
    assert doc["stages"][2] == {
        "first_layer": 2, "last_layer": 2, "devices": 1, "dp": 1, "tp": 1, "device_ids": [2],
        "time_ms": pytest.approx(12.1), "fwd_ms": pytest.approx(3.1), "bwd_ms": pytest.approx(9.0), "memory_bytes": 70,
    }
    assert Plan.from_dict(doc) == PLAN
    assert Plan.from_dict(doc["stages"]) == PLAN
    result = SolveResult("feasible", "greedy", "bottleneck", value=ev.value, bound=10.0, plan=PLAN, evaluation=ev)
    d = result.to_dict()
    assert d["gap"] == pytest.approx(3 / 13)
    assert set(d) >= {"status", "method", "objective", "value", "bound", "solve_seconds", "message", "plan"}
    again = SolveResult.from_dict(d)
    assert again.plan == PLAN and again.value == pytest.approx(13.0)
    assert Plan.from_dict(d) == PLAN


@pytest.mark.parametrize(
    "data,words",
    [
        ({"stages": []}, "non-empty list"),
        ({"plan": None, "status": "infeasible"}, "has no plan"),
        ({"stages": [{"first_layer": 0, "last_layer": 0, "devices": 1, "dp": 1}]}, "stages[0].tp: is missing"),
        ({"stages": [{"first_layer": 0, "last_layer": "x", "devices": 1, "dp": 1, "tp": 1}]}, "stages[0].last_layer: must be an integer"),
    ],
)
def test_malformed_plans(data, words):
    with pytest.raises(ProblemError) as info:
        Plan.from_dict(data, source="r.json")
    assert words in str(info.value) and str(info.value).startswith("r.json")
