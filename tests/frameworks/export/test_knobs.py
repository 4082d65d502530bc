"""Exports carry every knob and the 5D axes of a plan, or say which one the target cannot set (issue 27).

Plans are built by hand on the seed problem's layers (format v1 stages with
a ``variant``; v3 axes as extra attributes of the stage, as format v3's
plan records carry them), so each case pins one knob.
"""
from __future__ import annotations

import dataclasses
import json

import pytest

from partitioner.costs import build_problem
from partitioner.frameworks import PlanArgs, ScheduleTime
from partitioner.frameworks.export import (
    ExportContext,
    MoeHints,
    export_plan,
    hints_from_problem,
    moe_hints,
    read_result,
    replan_hint,
)
from partitioner.plan import Plan, Stage
from partitioner.problem import ProblemError

G, M = 64, 16


@pytest.fixture(scope="module")
def seed_problem():
    return build_problem("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=G, microbatches=M)


@pytest.fixture(scope="module")
def hints(seed_problem):
    return hints_from_problem(seed_problem)


def _plan(problem, variants, dp=2, tp=1):
    """Four stages of 2 GPUs: the vision encoder with the embedding on stage 0 (torchtitan's rule)."""
    n = problem.num_layers
    emb = next(i for i, layer in enumerate(problem.layers) if layer.name.endswith(".embed"))
    cuts = [0, emb + 8, emb + 16, emb + 24, n]
    return Plan(tuple(Stage(cuts[p], cuts[p + 1] - 1, dp * tp, dp, tp, variant=variants[p]) for p in range(4)))


@dataclasses.dataclass(frozen=True)
class _V3Stage:
    """A format-v3 stage as the plan records will carry it: ``cp``, ``ep``, ``etp`` beside dp and tp."""

    first_layer: int
    last_layer: int
    devices: int
    dp: int
    tp: int
    cp: int = 1
    ep: int = 1
    etp: int = 1
    variant: str = ""
    device_ids: tuple = ()
    configs: tuple = ()


class _V3Plan:
    def __init__(self, stages):
        self.stages = tuple(stages)

    def device_ids(self):
        out, nxt = [], 0
        for s in self.stages:
            out.append(tuple(range(nxt, nxt + s.devices)))
            nxt += s.devices
        return out


def _v3(problem, dp, tp, cp=1, ep=1, etp=1, variant=""):
    base = _plan(problem, [variant] * 4)
    return _V3Plan(_V3Stage(s.first_layer, s.last_layer, dp * tp * cp, dp, tp, cp, ep, etp, variant) for s in base.stages)


MOE = MoeHints(num_experts=8, top_k=2, ffn_hidden=1024, moe_layers=(False,) + (True,) * 23)


def _flags(snippet):
    return {line.strip().rstrip("\\\\").strip() for line in snippet.splitlines()}


@pytest.mark.parametrize("variant,megatron,deepspeed_stage,titan", [
    ("", [], 0, {"data_parallel_replicate_degree": 2, "data_parallel_shard_degree": 1}),
    ("zero1", ["--use-distributed-optimizer"], 1, {"data_parallel_shard_degree": 2, "fsdp_reshard_after_forward": "never"}),
    ("zero1+recompute-full", ["--use-distributed-optimizer", "--recompute-granularity full", "--recompute-method uniform",
                              "--recompute-num-layers 1"], 1, {"fsdp_reshard_after_forward": "never"}),
    ("zero3", ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params"], None,
     {"data_parallel_shard_degree": 2, "fsdp_reshard_after_forward": "always"}),
])
def test_uniform_knobs_reach_every_target(seed_problem, hints, variant, megatron, deepspeed_stage, titan):
    plan = _plan(seed_problem, [variant] * 4)
    mg = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert mg.expressible, mg.reasons
    assert set(megatron) <= _flags(mg.snippet)
    assert ("--use-distributed-optimizer" in mg.snippet) == ("zero1" in variant)
    assert ("--recompute-granularity" in mg.snippet) == ("recompute" in variant)
    ds = export_plan(plan, hints, "deepspeed", ExportContext(global_batch=G, microbatches=M))
    if deepspeed_stage is None:
        assert not ds.expressible and any("ZeRO-3" in r and "PipelineEngine" in r for r in ds.reasons)
    else:
        assert ds.expressible and ds.settings["ds_config"]["zero_optimization"] == {"stage": deepspeed_stage}
        want = 1 if "recompute-full" in variant else 0
        assert ds.settings["activation_checkpoint_intervals"] == [want] * 4
        assert f"CHECKPOINT_INTERVALS = {[want] * 4}" in ds.snippet
    tt = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M))
    assert tt.expressible, tt.reasons
    par = tt.settings["config"]["parallelism"]
    assert {k: par[k] for k in titan} == titan
    ac = "full" if "recompute-full" in variant else "none"
    assert tt.settings["activation_checkpoint"] == ac and tt.settings["overrides"][-1] == f"activation_checkpoint:{ac}"
    assert not any("set the framework" in n or "set them" in n for e in (mg, tt) for n in e.notes)


def test_mixed_knobs_are_not_expressible_saying_which(seed_problem, hints):
    plan = _plan(seed_problem, ["zero1+recompute-full", "zero1", "zero1", "zero1"])
    mg = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert not mg.expressible and any("recompute full on stage 0" in r and "--recompute-granularity" in r for r in mg.reasons)
    tt = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M))
    assert not tt.expressible and any("recompute" in r for r in tt.reasons)
    ds = export_plan(plan, hints, "deepspeed", ExportContext(global_batch=G, microbatches=M))  # DeepSpeed: one interval per stage
    assert ds.expressible and ds.settings["activation_checkpoint_intervals"] == [1, 0, 0, 0]
    zero = _plan(seed_problem, ["zero3", "zero1", "zero1", "zero1"])
    for target in ("megatron", "torchtitan", "deepspeed"):
        exp = export_plan(zero, hints, target, ExportContext(global_batch=G, microbatches=M))
        assert not exp.expressible and any("mixes ZeRO stages" in r for r in exp.reasons), target


def test_zero0_next_to_zero1_exports_zero1_with_a_note(seed_problem, hints):
    """Frozen weights keep ZeRO-0 as the planner's tie: ZeRO-1 everywhere only lowers memory."""
    plan = _plan(seed_problem, ["", "zero1", "zero1", "zero1"])
    mg = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert mg.expressible and "--use-distributed-optimizer" in mg.snippet and any("ZeRO-1 also on stage 0" in n for n in mg.notes)


def test_selective_recompute_and_unknown_variants(seed_problem, hints):
    plan = _plan(seed_problem, ["recompute-selective"] * 4)
    mg = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert mg.expressible and mg.settings["transformer_config"]["recompute_granularity"] == "selective"
    for target in ("torchtitan", "deepspeed"):
        exp = export_plan(plan, hints, target, ExportContext(global_batch=G, microbatches=M))
        assert not exp.expressible and any("selective" in r for r in exp.reasons), target
    odd = _plan(seed_problem, ["offload"] * 4)
    exp = export_plan(odd, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert not exp.expressible and any("unknown variant 'offload'" in r for r in exp.reasons)


def test_torchtitan_one_stage_runs_m_microbatches_by_gradient_accumulation(seed_problem, hints):
    """Issue 27: pp 1, dp 8, m 4 of 16 samples -- local_batch_size is the microbatch (2 per replica), not 8."""
    plan = Plan((Stage(0, seed_problem.num_layers - 1, 8, 8, 1, variant="zero1"),))
    tt = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=G, microbatches=4))
    assert tt.expressible, tt.reasons
    tr, par = tt.settings["config"]["training"], tt.settings["config"]["parallelism"]
    assert tr["local_batch_size"] == 2 and tr["global_batch_size"] == G
    assert tr["global_batch_size"] // (tr["local_batch_size"] * 8) == 4  # torchtitan's gradient-accumulation steps
    assert "pipeline_parallel_microbatch_size" not in par and par["pipeline_parallel_degree"] == 1


def test_megatron_5d_axes_and_moe_flags(seed_problem, hints):
    plan = _v3(seed_problem, dp=2, tp=2, cp=2, ep=4, etp=1, variant="zero1")
    mg = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M, moe=MOE))
    assert mg.expressible, mg.reasons
    flags = _flags(mg.snippet)
    for want in ("--context-parallel-size 2", "--cp-comm-type p2p", "--expert-model-parallel-size 4",
                 "--expert-tensor-parallel-size 1", "--num-experts 8", "--moe-router-topk 2", "--moe-ffn-hidden-size 1024",
                 "--moe-token-dispatcher-type alltoall", "--sequence-parallel", '--moe-layer-freq "([0]*1+[1]*23)"'):
        assert want in flags, want
    core = mg.settings["transformer_config"]
    assert core["context_parallel_size"] == 2 and core["num_moe_experts"] == 8 and core["moe_layer_freq"][:2] == [0, 1]
    bad = _v3(seed_problem, dp=2, tp=2, cp=1, ep=3, etp=1)
    exp = export_plan(bad, hints, "megatron", ExportContext(global_batch=G, microbatches=M, moe=MOE))
    assert not exp.expressible and any("does not divide" in r for r in exp.reasons)
    no_hints = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert not no_hints.expressible and any("do not describe the model's experts" in r for r in no_hints.reasons)


def test_torchtitan_and_deepspeed_5d_axes(seed_problem, hints):
    plan = _v3(seed_problem, dp=2, tp=2, cp=2, ep=4, variant="zero1")
    tt = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M, moe=MOE))
    assert tt.expressible, tt.reasons
    par = tt.settings["config"]["parallelism"]
    assert (par["context_parallel_degree"], par["expert_parallel_degree"]) == (2, 4)
    etp = export_plan(_v3(seed_problem, dp=2, tp=2, ep=2, etp=2, variant="zero1"), hints, "torchtitan",
                      ExportContext(global_batch=G, microbatches=M, moe=MOE))
    assert not etp.expressible and any("etp 2" in r and "torchtitan 0.3" in r for r in etp.reasons)
    ds = export_plan(plan, hints, "deepspeed", ExportContext(global_batch=G, microbatches=M, moe=MOE))
    assert not ds.expressible and any(r.startswith("cp 2") and "context parallelism" in r for r in ds.reasons)
    ep = export_plan(_v3(seed_problem, dp=4, tp=1, ep=2, variant="zero1"), hints, "deepspeed", ExportContext(global_batch=G, microbatches=M, moe=MOE))
    assert ep.expressible and ep.settings["moe"] == {"num_experts": 8, "ep_size": 2, "k": 2, "enable_expert_tensor_parallelism": False}


def test_moe_hints_are_checked():
    assert moe_hints(None) is None
    assert moe_hints(MOE.to_dict()) == MOE
    with pytest.raises(ProblemError, match="export_hints.moe.top_k"):
        moe_hints({"num_experts": 8, "top_k": 0, "ffn_hidden": 4})


def test_replan_hint_names_the_command_and_the_fastest_schedule():
    ctx = ExportContext(plan_args=PlanArgs("llava-1.5-7b", "dgx-h100", 2, 512),
                        by_schedule=(ScheduleTime("zb-h1", 1, 90.0), ScheduleTime("1f1b", 1, 100.0),
                                     ScheduleTime("interleaved", 2, 95.0)))
    mg = replan_hint("megatron", "zb-h1", ctx)
    assert "--schedule interleaved --virtual-stages 2" in mg and "95.0 ms" in mg and "--model llava-1.5-7b" in mg
    ds = replan_hint("deepspeed", "zb-h1", ctx)
    assert "--schedule 1f1b" in ds and "100.0 ms" in ds


def test_a_plan_result_gives_the_replan_hint_its_table_and_arguments():
    doc = {"model": "llava-1.5-7b", "cluster": "dgx-h100", "nodes": 2, "global_batch": 512,
           "plan": {"stages": [{"first_layer": 0, "last_layer": 1, "devices": 1, "dp": 1, "tp": 1}]},
           "export_hints": {"layers": [{"name": "a"}, {"name": "b", "role": "loss", "fqns": ["lm_head"]}]},
           "schedules": {"by_schedule": [
               {"schedule": "zb-h1", "virtual_stages": 1, "plan": {"iteration_ms": 90.0}, "baseline": None},
               {"schedule": "interleaved", "virtual_stages": 2, "plan": None, "baseline": {"iteration_ms": 95}},
               {"schedule": 3, "plan": {"iteration_ms": 1.0}}]}}
    request = read_result(doc)
    assert request.context.plan_args == PlanArgs("llava-1.5-7b", "dgx-h100", 2, 512)
    assert request.context.by_schedule == (ScheduleTime("zb-h1", 1, 90.0), ScheduleTime("interleaved", 2, 95.0))
    assert [h.role for h in request.hints] == ["decoder", "loss"] and request.hints[1].names == ("lm_head",)
    assert read_result({**doc, "nodes": "two"}).context.plan_args is None
    with pytest.raises(ProblemError, match=r"export_hints.layers\[1\]"):
        read_result({**doc, "export_hints": {"layers": [{"name": "a"}, "b"]}})


def test_zb_h1_plan_json_export_says_what_to_run(tmp_path, seed_problem):
    from partitioner.planning import plan_model
    from tests.conftest import run_cli

    result = plan_model("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=32, microbatches=8, method="greedy",
                        schedule="zb-h1")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(result.to_dict()))
    proc = run_cli("export", str(path), "--to", "megatron")
    assert proc.returncode == 1
    assert "partitioner plan --model seed-vla-8gpu --cluster dgx-h100 --nodes 1 --global-batch 32 --schedule" in proc.stderr


def test_plan_json_says_per_target_whether_it_exports():
    from tests.conftest import run_cli

    proc = run_cli("plan", "--model", "seed-vla-8gpu", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "32",
                   "--microbatches", "8", "--method", "greedy", "--schedule", "gpipe", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc["exports"]) == {"megatron", "torchtitan", "deepspeed"}
    assert doc["exports"]["megatron"]["expressible"] is False and any("gpipe" in r for r in doc["exports"]["megatron"]["reasons"])
    assert doc["exports"]["torchtitan"]["expressible"] is True


@pytest.mark.parametrize("tp,ep,etp,split", [(2, 1, 1, 2), (4, 1, 1, 4), (2, 2, 1, 1), (2, 2, 2, 2), (1, 4, 1, 1)])
def test_every_target_writes_the_expert_split_the_plan_charged(seed_problem, hints, tp, ep, etp, split):
    """Issue 32: the cost model holds a MoE layer's experts / tp in an entry without ep (Megatron's default ETP = TP)
    and / (ep etp) with it; each export makes every rank hold that split, or refuses with the reason."""
    plan = _v3(seed_problem, dp=4 // tp, tp=tp, ep=ep, etp=etp, variant="zero1")
    ctx = ExportContext(global_batch=G, microbatches=M, moe=MOE)
    mg = export_plan(plan, hints, "megatron", ctx)
    assert mg.expressible, mg.reasons
    assert mg.settings["transformer_config"]["expert_tensor_parallel_size"] == split
    assert f"--expert-tensor-parallel-size {split}" in _flags(mg.snippet)
    ds = export_plan(plan, hints, "deepspeed", ctx)
    assert ds.expressible, ds.reasons
    assert ds.settings["moe"]["enable_expert_tensor_parallelism"] is (split > 1)
    tt = export_plan(plan, hints, "torchtitan", ctx)
    # torchtitan 0.3: experts sharded by tp without EP, whole on each EP rank with it
    assert tt.expressible is (split == (tp if ep == 1 else 1)), tt.reasons
    if not tt.expressible:
        assert any(f"splits each expert over {split} rank(s)" in r and "torchtitan 0.3" in r for r in tt.reasons)


def test_an_expert_split_a_target_cannot_make_is_refused_not_written(seed_problem, hints):
    """etp 2 of tp 4: DeepSpeed splits experts over the whole TP group or not at all, torchtitan has no etp; Megatron
    writes it as planned."""
    plan = _v3(seed_problem, dp=2, tp=4, ep=2, etp=2, variant="zero1")
    ctx = ExportContext(global_batch=G, microbatches=M, moe=MOE)
    assert export_plan(plan, hints, "megatron", ctx).settings["transformer_config"]["expert_tensor_parallel_size"] == 2
    for target in ("deepspeed", "torchtitan"):
        exp = export_plan(plan, hints, target, ctx)
        assert not exp.expressible and any("splits each expert over 2" in r for r in exp.reasons), (target, exp.reasons)
