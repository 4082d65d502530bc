"""Format v2: config keys with variants, segments, per-segment plans, the intra-stage reshard, result v2."""
from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest

from partitioner import evaluate, load_problem
from partitioner.cluster.reshard import segment_reshard_ms, stage_reshard_ms
from partitioner.plan import Plan, PlanError, SolveResult, Stage
from partitioner.problem import Layout, Problem, ProblemError, StageBounds

ROOT = Path(__file__).resolve().parents[2]
LESSON15 = ROOT / "examples" / "colocated_1node.json"


def lesson15() -> Problem:
    return load_problem(LESSON15)


def doc_v2(**training) -> dict:
    return {
        "version": 2,
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu_memory_bytes": 1000,
                    "intra_node_GBps": 100.0, "inter_node_GBps": 10.0},
        "training": {"microbatches": 4, **training},
        "variants": {"zero3": "weights sharded", "recompute-full": "keeps block inputs"},
        "layers": [
            {"module": "vision", "out_bytes": 4_000_000, "costs": {
                "dp4tp1": {"fwd_ms": 1, "bwd_ms": 2, "weight_bytes": 100, "act_bytes": 10},
                "dp4tp1/zero3": {"fwd_ms": 1.5, "bwd_ms": 2.5, "weight_bytes": 25, "act_bytes": 10},
                "dp2tp2": {"fwd_ms": 2, "bwd_ms": 4, "weight_bytes": 50, "act_bytes": 5}}},
            {"module": "llm", "out_bytes": 0, "costs": {
                "dp4tp1": {"fwd_ms": 3, "bwd_ms": 6, "weight_bytes": 400, "act_bytes": 40},
                "dp2tp2": {"fwd_ms": 2, "bwd_ms": 4, "weight_bytes": 200, "act_bytes": 20},
                "dp2tp2/recompute-full": {"fwd_ms": 2, "bwd_ms": 6, "weight_bytes": 200, "act_bytes": 2}}},
        ],
    }


def test_config_keys_parse_with_variants():
    assert Layout.parse("dp2tp4") == Layout(2, 4, "")
    assert Layout.parse("dp8tp1/zero3") == Layout(8, 1, "zero3")
    assert Layout.parse("dp4tp2/zero1+recompute-selective").variant == "zero1+recompute-selective"
    assert Layout(8, 1, "zero3").key == "dp8tp1/zero3" and Layout(8, 1).key == "dp8tp1"
    assert Layout(8, 1, "zero3").mesh == Layout(8, 1).mesh == (8, 1)
    for bad in ("dp2tp4/", "dp2tp4/Zero3", "dp2tp4/-x", "dp2tp4/a b", "dp2tp4//x"):
        with pytest.raises(ValueError):
            Layout.parse(bad)


def test_v2_problem_round_trips_and_v1_stays_v1():
    p = Problem.from_dict(doc_v2())
    assert p.version == 2 and dict(p.variants) == {"zero3": "weights sharded", "recompute-full": "keeps block inputs"}
    assert Layout(4, 1, "zero3") in p.layers[0].costs
    assert Problem.from_dict(p.to_dict()) == p
    v1 = load_problem(ROOT / "examples" / "vla_toy_2x4.json")
    assert v1.version == 1 and v1.to_dict()["version"] == 1 and "variants" not in v1.to_dict()


@pytest.mark.parametrize(
    "mutate, path, words",
    [
        (lambda d: d["layers"][0]["costs"].update({"dp4tp1/Zero3": d["layers"][0]["costs"]["dp4tp1"]}),
         "layers[0].costs.dp4tp1/Zero3", "cost key must look like"),
        (lambda d: d["layers"][1]["costs"].update({"dp4tp1/zero1": d["layers"][1]["costs"]["dp4tp1"]}),
         "layers[1].costs.dp4tp1/zero1", "not listed in the top-level 'variants'"),
        (lambda d: d.update(variants={"Bad Name": "x"}), "variants.Bad Name", "variant name must match"),
        (lambda d: d.update(variants=["zero3"]), "variants", "must be an object"),
        (lambda d: d.update(version=1), "variants", "need format version 2"),
        (lambda d: (d.pop("variants"), d.update(version=1)), "layers[0].costs.dp4tp1/zero3", "needs format version 2"),
        (lambda d: d["layers"][0]["costs"]["dp4tp1"].update(bwd_input_ms=1.0),
         "layers[0].costs.dp4tp1.bwd_weight_ms", "is missing"),
        (lambda d: d["layers"][0]["costs"]["dp4tp1"].update(bwd_input_ms=1.0, bwd_weight_ms=0.5),
         "layers[0].costs.dp4tp1.bwd_weight_ms", "must equal bwd_ms"),
        (lambda d: d["training"].update(schedule="zb-h2"), "training.schedule", "must be one of"),
        (lambda d: d["training"].update(schedule="interleaved"), "training.virtual_stages", "is missing"),
        (lambda d: d["training"].update(schedule="interleaved", virtual_stages=1), "training.virtual_stages", ">= 2"),
        (lambda d: d["training"].update(virtual_stages=2), "training.virtual_stages", "interleaved"),
        (lambda d: (d["training"].update(schedule="interleaved", virtual_stages=2, microbatches=3), d.update(stages=2)),
         "training.microbatches", "multiple of the 2"),
    ],
)
def test_bad_v2_fields_name_the_field(mutate, path, words):
    d = copy.deepcopy(doc_v2())
    mutate(d)
    with pytest.raises(ProblemError) as info:
        Problem.from_dict(d, source="p.json")
    assert info.value.path == path and words in info.value.reason, str(info.value)
    assert str(info.value).startswith("p.json: ")


def test_backward_split_parses_and_defaults_to_even():
    d = doc_v2(schedule="zb-h1")
    d["layers"][0]["costs"]["dp4tp1"].update(bwd_input_ms=0.5, bwd_weight_ms=1.5)
    p = Problem.from_dict(d)
    assert p.training.schedule == "zb-h1"
    assert p.layers[0].costs[Layout(4, 1)].split() == (0.5, 1.5)
    assert p.layers[0].costs[Layout(2, 2)].split() == (2.0, 2.0)
    assert Problem.from_dict(p.to_dict()) == p


def test_segments_v2_are_module_runs_v1_is_the_stage():
    p = lesson15()
    assert p.segments(0, 6) == ((0, 2), (3, 6))
    assert p.segments(1, 2) == ((1, 2),) and p.segments(2, 3) == ((2, 2), (3, 3))
    v1 = load_problem(ROOT / "examples" / "vla_toy_2x4.json")
    assert v1.segments(0, v1.num_layers - 1) == ((0, v1.num_layers - 1),)


def test_lesson15_plan_value_and_reshard_closed_form():
    p = lesson15()
    b = p.layers[2].out_bytes
    r = b * 3 / 32 / (p.cluster.intra_node_GBps * 1e6)
    plan = Plan((Stage.from_configs(0, 6, 8, [Layout(8, 1), Layout(2, 4)]),))
    ev = evaluate(p, plan)
    st = ev.stages[0]
    assert st.reshard_ms == pytest.approx(r, rel=1e-12) and r == pytest.approx(0.03145728)
    fwd = sum(p.layers[i].costs[Layout(8, 1)].fwd_ms for i in range(3)) + sum(
        p.layers[i].costs[Layout(2, 4)].fwd_ms for i in range(3, 7))
    bwd = sum(p.layers[i].costs[Layout(8, 1)].bwd_ms for i in range(3)) + sum(
        p.layers[i].costs[Layout(2, 4)].bwd_ms for i in range(3, 7))
    assert st.fwd_ms == pytest.approx(fwd + r) and st.bwd_ms == pytest.approx(bwd + r)
    assert ev.value == pytest.approx(16.36371456, rel=1e-9)


def test_reshard_time_is_zero_for_a_variant_change_and_symmetric_in_volume():
    c = lesson15().cluster
    assert segment_reshard_ms(1e9, Layout(8, 1), Layout(8, 1, "zero3"), range(8), c) == 0.0
    assert segment_reshard_ms(0, Layout(8, 1), Layout(2, 4), range(8), c) == 0.0
    # dp 8 -> dp 1 x tp 8: every GPU keeps 1/8 of its sample and sends 7/8 of it: 7/64 of the tensor
    assert segment_reshard_ms(64e6, Layout(8, 1), Layout(1, 8), range(8), c) == pytest.approx(7e6 / 300e6)
    # the same exchange in the other direction moves the same bytes
    assert segment_reshard_ms(64e6, Layout(1, 8), Layout(8, 1), range(8), c) == pytest.approx(7e6 / 300e6)


def test_reshard_across_nodes_uses_the_nic():
    p = Problem.from_dict({
        "version": 2, "cluster": {"nodes": 2, "gpus_per_node": 2, "gpu_memory_bytes": 10,
                                  "intra_node_GBps": 100.0, "inter_node_GBps": 10.0},
        "training": {"microbatches": 1}, "layers": [{"costs": {"dp4tp1": {"fwd_ms": 1, "bwd_ms": 1,
                                                                           "weight_bytes": 0, "act_bytes": 0}}}]})
    # dp 4 -> dp 1 x tp 2 ... not allowed (tp 2 x dp 2 is): dp4 -> dp2tp2 on 2 nodes of 2.
    # Rank r of dp4 holds sample r; dp2tp2 rank 2i+t holds samples 2i..2i+1, features t.
    # GPU 0 (node 0) sends sample 0's half 1 to GPU 1 (same node); GPU 2 sends to GPU 3: all NVLink.
    t = segment_reshard_ms(8e6, Layout(4, 1), Layout(2, 2), range(4), p.cluster)
    assert t == pytest.approx(1e6 / 100e6)
    # ids listed so that a data group spans two nodes: ranks 0,1 on nodes 0,1
    t2 = segment_reshard_ms(8e6, Layout(4, 1), Layout(2, 2), (0, 2, 1, 3), p.cluster)
    assert t2 == pytest.approx(1e6 / 10e6)
    assert stage_reshard_ms(8e6, Layout(4, 1), Layout(2, 2), 4, p.cluster) == t


def test_v1_problem_keeps_one_layout_per_stage():
    v1 = dataclasses.replace(load_problem(ROOT / "examples" / "vla_toy_2x4.json"), stages=StageBounds(1, 6))
    stage = Stage.from_configs(0, v1.num_layers - 1, 8, [Layout(8, 1), Layout(4, 2)])
    with pytest.raises(PlanError) as info:
        evaluate(v1, Plan((stage,)))
    assert info.value.rule == 5 and "format version 1" in info.value.reason


def test_configs_must_match_segments_and_exist():
    p = lesson15()
    with pytest.raises(PlanError) as info:
        evaluate(p, Plan((Stage.from_configs(0, 6, 8, [Layout(8, 1), Layout(2, 4), Layout(2, 4)]),)))
    assert info.value.rule == 5 and "3 configs for its 2 segment" in info.value.reason
    with pytest.raises(PlanError) as info:
        evaluate(p, Plan((Stage.from_configs(0, 6, 8, [Layout(8, 1), Layout(4, 1)]),)))
    assert info.value.rule == 5
    with pytest.raises(PlanError) as info:
        evaluate(p, Plan((Stage.from_configs(0, 6, 8, [Layout(8, 1, "zero3"), Layout(2, 4)]),)))
    assert info.value.rule == 5 and "no cost entry dp8tp1/zero3" in info.value.reason


def test_memory_counts_each_layer_with_its_segments_entry():
    p = lesson15()
    one = evaluate(p, Plan((Stage.from_configs(0, 6, 8, [Layout(8, 1), Layout(2, 4)]),))).stages[0]
    expect_w = sum(p.layers[i].costs[Layout(8, 1)].weight_bytes for i in range(3)) + sum(
        p.layers[i].costs[Layout(2, 4)].weight_bytes for i in range(3, 7))
    expect_a = sum(p.layers[i].costs[Layout(8, 1)].act_bytes for i in range(3)) + sum(
        p.layers[i].costs[Layout(2, 4)].act_bytes for i in range(3, 7))
    assert one.memory_bytes == expect_w + one.stash * expect_a
    # a single layout for the whole stage does not fit (language weights need tp >= 4)
    with pytest.raises(PlanError) as info:
        evaluate(p, Plan((Stage(0, 6, 8, 8, 1),)))
    assert info.value.rule == 6


def test_result_v2_json_has_version_configs_and_reshard():
    p = lesson15()
    plan = Plan((Stage.from_configs(0, 6, 8, [Layout(8, 1), Layout(2, 4)]),)).with_device_ids()
    ev = evaluate(p, plan)
    res = SolveResult("optimal", "brute", "bottleneck", value=ev.value, bound=ev.value, plan=plan,
                      evaluation=ev, version=2)
    doc = json.loads(json.dumps(res.to_dict()))
    assert doc["version"] == 2
    stage = doc["plan"]["stages"][0]
    assert stage["configs"] == [{"dp": 8, "tp": 1}, {"dp": 2, "tp": 4}]
    assert "dp" not in stage and stage["reshard_ms"] == pytest.approx(0.03145728)
    back = SolveResult.from_dict(doc)
    assert back.version == 2 and back.plan.stages[0].configs == (Layout(8, 1), Layout(2, 4))
    assert evaluate(p, back.plan).value == pytest.approx(ev.value)
    # a uniform stage of a v2 problem carries configs and the dp/tp shorthand
    uni = Plan((Stage(0, 6, 8, 1, 8),)).with_device_ids()
    d = uni.to_dict(evaluate(p, uni))["stages"][0]
    assert d["dp"] == 1 and d["tp"] == 8 and d["configs"] == [{"dp": 1, "tp": 8}] * 2 and d["reshard_ms"] == 0.0


def test_plan_reader_rejects_bad_configs():
    with pytest.raises(ProblemError) as info:
        Plan.from_dict({"stages": [{"first_layer": 0, "last_layer": 1, "devices": 4, "configs": [{"dp": 4}]}]})
    assert info.value.path == "stages[0].configs[0].tp"
    with pytest.raises(ProblemError) as info:
        Plan.from_dict({"stages": [{"first_layer": 0, "last_layer": 1, "devices": 4, "dp": 4, "tp": 1,
                                    "variant": "Not OK"}]})
    assert info.value.path == "stages[0].variant"
