"""plan's context_parallel section: per stage, the cost model's context-parallel terms of its cp > 1 segments."""
from __future__ import annotations

import pytest

from partitioner.costs import CostOptions, build_problem, load_cluster, model_layers
from partitioner.costs.axes.report import cp_breakdown
from partitioner.plan import Plan, Stage
from partitioner.planning.reports.context import context_report
from partitioner.presets import load_model
from partitioner.problem import Layout

MODEL, CLUSTER = "qwen2.5-vl-7b-video-64f", "dgx-h100"


@pytest.fixture(scope="module")
def problem():
    return build_problem(MODEL, CLUSTER, nodes=2, global_batch=16, microbatches=2,
                         options={"variants": "all", "cp_degrees": [1, 2, 4]})


def _plan(problem, cp):
    llm = next(i for i, layer in enumerate(problem.layers) if layer.name.endswith(".embed"))
    n = problem.num_layers
    first = Stage.from_configs(0, llm + 3, 8, [Layout(8, 1, "zero1"), Layout(8, 1, "zero1"),
                                              Layout(8 // cp, 1, "zero1", cp=cp)])
    second = Stage.from_configs(llm + 4, n - 1, 8, [Layout(8 // cp, 1, "zero1+recompute-full", cp=cp)])
    return Plan((first, second)).with_device_ids()


def test_each_stage_sums_its_cp_segments(problem):
    spec, cl = load_model(MODEL), load_cluster(CLUSTER)
    report = context_report(spec, cl, problem, _plan(problem, 4))
    assert report is not None and [r.stage for r in report] == [0, 1]
    opts = CostOptions.from_mapping(problem.meta["options"])
    layers = model_layers(spec, opts)
    llm = next(i for i, layer in enumerate(problem.layers) if layer.name.endswith(".embed"))
    want = [cp_breakdown(layers[k], Layout(2, 1, "zero1", cp=4), 8 / 2, "none", cl, opts) for k in range(llm, llm + 4)]
    first = report[0]
    assert first.layers == (llm, llm + 3) and first.cp == 4 and first.algorithm == "p2p"
    assert first.terms.attention_fwd_ms == pytest.approx(sum(w.attention_fwd_ms for w in want))
    assert first.terms.act_bytes == pytest.approx(sum(w.act_bytes for w in want))
    assert first.terms.buffer_bytes == max(w.buffer_bytes for w in want) > 0
    doc = report[1].to_dict()
    assert set(doc) == {"stage", "layers", "cp", "algorithm", "attention_fwd_ms", "attention_bwd_ms",
                        "comm_exposed_fwd_ms", "comm_exposed_bwd_ms", "activation_bytes", "kv_buffer_bytes"}
    assert "cp 4 (p2p)" in report[1].text()
    # the entries the solver saw hold the same activations (full recompute on stage 1)
    entry = sum(problem.layers[k].costs[Layout(2, 1, "zero1+recompute-full", cp=4)].act_bytes
                for k in range(llm + 4, problem.num_layers))
    assert doc["activation_bytes"] == pytest.approx(entry, rel=1e-6)


def test_same_gpus_more_cp_same_work_on_shorter_kernels(problem):
    """dp x cp = 8 either way: a rank holds the same tokens and attention FLOPs at cp 2 and 4, but cp 4's chunks run
    shorter kernels (slower per FLOP) and its ring has more steps."""
    spec, cl = load_model(MODEL), load_cluster(CLUSTER)
    two, four = (context_report(spec, cl, problem, _plan(problem, cp))[1].terms for cp in (2, 4))
    assert four.act_bytes == pytest.approx(two.act_bytes)
    assert 1.0 < four.attention_fwd_ms / two.attention_fwd_ms < 1.1
    assert four.buffer_bytes == pytest.approx(two.buffer_bytes)  # a quarter of the sequence, twice the samples


def test_no_cp_no_section(problem):
    n = problem.num_layers
    plain = Plan((Stage(0, n - 1, 8, 8, 1, variant="zero1"),)).with_device_ids()
    assert context_report(load_model(MODEL), load_cluster(CLUSTER), problem, plain) is None


@pytest.mark.slow
def test_plan_chooses_cp_on_the_long_video_preset_when_it_wins():
    """Issue 32: with the attention at its kernels' rates, CP buys time at 8.7k LLM tokens (64 frames) on 4 x 8 H100."""
    from partitioner.planning import plan_model

    with_cp = plan_model(MODEL, CLUSTER, nodes=4, global_batch=256)
    without = plan_model(MODEL, CLUSTER, nodes=4, global_batch=256, options={"cp_degrees": [1]})
    cps = {c.cp for s in with_cp.plan.stages for _, c in s.segment_configs(with_cp.problem)}
    assert max(cps) > 1 and with_cp.context_parallel
    assert with_cp.throughput.iteration_ms < without.throughput.iteration_ms
    assert without.context_parallel is None
