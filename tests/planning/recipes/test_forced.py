"""A layout forced from outside (a published run's): Megatron-LM's cut, the configs per segment, the estimate."""
from __future__ import annotations

import pytest

from partitioner.costs import build_problem, load_cluster
from partitioner.plan.cuts import layer_roles
from partitioner.planning.recipes.forced import ForcedLayout, estimate_forced, forced_cuts, forced_plan, job_cluster
from partitioner.problem import Layout, ProblemError


@pytest.fixture(scope="module")
def vlm():
    """Qwen3-VL-30B-A3B on 16 H100: a vision module without experts, a 48-layer MoE decoder."""
    layout = ForcedLayout(pp=2, dp=8, ep=8, etp=1, vpp=2)
    return build_problem("qwen3-vl-30b-a3b", "dgx-h100", nodes=2, global_batch=64, microbatches=8,
                         options=layout.cost_options()), layout


def test_megatron_cuts_the_decoders_evenly(vlm):
    problem, _ = vlm
    roles = layer_roles(problem)
    cuts = forced_cuts(problem, 4)
    assert cuts[0][0] == 0 and cuts[-1][1] == len(roles) - 1
    decoders = [sum(roles[i] == "decoder" for i in range(a, b + 1)) for a, b in cuts]
    assert decoders == [12, 12, 12, 12]
    assert all(roles[i] != "decoder" for i in range(cuts[0][0], cuts[0][1] + 1) if i < roles.index("decoder"))
    # counting the embedding and the head in the split (Megatron's --account-for-*-in-pipeline-split)
    even = forced_cuts(problem, 4, split_embedding_loss=True)
    sizes = [b - a + 1 for a, b in even]
    assert sum(sizes) == len(roles) and max(sizes) - min(sizes) <= 1
    with pytest.raises(ProblemError, match="layout.pp"):
        forced_cuts(problem, len(roles) + 1)


def test_the_forced_plan_runs_each_segment_in_the_layout(vlm):
    problem, layout = vlm
    scheduled, plan = forced_plan(problem, layout)
    assert scheduled.training.schedule == "interleaved" and scheduled.training.virtual_stages == 2
    assert len(plan.stages) == 4
    for c, stage in enumerate(plan.stages):
        assert stage.device_ids == tuple(range((c % 2) * 8, (c % 2) * 8 + 8))
        for (first, last), config in stage.segment_configs(scheduled):
            if problem.layers[first].module == "llm":
                assert config == Layout(8, 1, "", 1, 8, 1)
            else:  # the vision encoder and projector have no experts: ep and etp are 1 there
                assert config == Layout(8, 1)


def test_bad_layouts_name_the_field():
    for kwargs, field in (({"pp": 0, "dp": 1}, "pp"), ({"pp": 1, "dp": 1, "zero": 2}, "zero"),
                          ({"pp": 1, "dp": 1, "recompute": "some"}, "recompute"),
                          ({"pp": 1, "dp": 2, "tp": 2, "etp": 1}, "etp"),
                          # Megatron-Core: etp x ep divides tp x cp x dp (ep 8 x the default etp 2 on 8 GPUs)
                          ({"pp": 1, "dp": 4, "tp": 2, "ep": 8}, "ep"),
                          ({"pp": 1, "dp": 1, "recompute": "moe_act+layernorm"}, "recompute")):
        with pytest.raises(ProblemError, match=f"layout.{field}"):
            ForcedLayout(**kwargs)
    assert ForcedLayout(pp=1, dp=2, tp=2).expert_tp == 2  # Megatron's default etp = tp
    assert ForcedLayout(pp=1, dp=2, tp=2, ep=4, etp=1).config == Layout(2, 2, "", 1, 4, 1)
    # Megatron-Core's --recompute-modules, canonically spelled, are memory knobs too
    assert ForcedLayout(pp=1, dp=4, tp=2, ep=8, etp=1, zero=1, recompute="layernorm+moe_act").variant == \
        "zero1+recompute-layernorm+moe_act"


def test_a_layout_whose_experts_split_no_layer_offers_is_refused_not_run_without_it():
    with pytest.raises(ProblemError, match="layout.ep"):
        estimate_forced("llava-1.5-7b", "dgx-h100", ForcedLayout(pp=1, dp=8, ep=2, etp=1), global_batch=8,
                        microbatch=1)


def test_a_gpu_count_the_nodes_do_not_divide_runs_on_a_part_of_them():
    nvl72 = load_cluster("gb200-nvl72")
    assert job_cluster(nvl72, 256).gpus_per_node == 64
    assert job_cluster(nvl72, 72 * 2) == nvl72
    assert job_cluster(load_cluster("dgx-h100"), 4).gpus_per_node == 4


def test_estimate_of_a_published_layout_and_of_one_that_does_not_fit():
    layout = ForcedLayout(pp=2, dp=8, ep=8, etp=1, zero=1, recompute="full")
    est = estimate_forced("qwen3-vl-30b-a3b", "dgx-h100", layout, global_batch=64, microbatch=1)
    assert est.fits and est.iteration_ms > 0 and 0 < est.peak_memory_bytes <= est.gpu_memory_bytes
    assert len(est.plan.stages) == 2 and est.problem.microbatches == 8
    # every expert on every GPU of one stage: more than an H100 holds; still evaluated, with fits False
    whole = estimate_forced("qwen3-vl-30b-a3b", "dgx-h100", ForcedLayout(pp=1, dp=8), global_batch=64, microbatch=1)
    assert not whole.fits and whole.peak_memory_bytes > whole.gpu_memory_bytes and whole.iteration_ms > 0
    with pytest.raises(ProblemError, match="global_batch"):
        estimate_forced("qwen3-vl-30b-a3b", "dgx-h100", layout, global_batch=60, microbatch=1)
