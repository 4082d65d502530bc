"""Multi-token prediction modules under each target's rules (``FrameworkRules.mtp_stages``).

DeepSpeed's pipeline trains none (its ``plan --target`` refuses the model,
its default-run line says why); torchtitan 0.3 trains them without pipeline
parallelism only (its runs plan one stage); Megatron-LM places them freely.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from partitioner import plan_model
from partitioner.frameworks.export import export_result
from partitioner.planning.options import PlanOptions
from partitioner.planning.run import PlanRun
from partitioner.planning.targets.rules import RULES, runs
from partitioner.presets import Workload, load_model
from partitioner.problem import ProblemError

FIXTURE = str(Path(__file__).resolve().parents[2] / "fixtures" / "hf" / "deepseek-v3-small")
KWARGS = dict(nodes=1, global_batch=256, microbatches=8, schedule="1f1b", simulate=False)
plan_model_module = sys.modules["partitioner.planning.plan_model"]


def _run(target: str, **over) -> PlanRun:
    return PlanRun.start(PlanOptions(**{**KWARGS, **over}, target=target))  # type: ignore[arg-type]


def test_each_target_bounds_the_stages_of_a_model_with_mtp():
    spec = load_model(FIXTURE)
    assert any(m.mtp_layers for m in spec.modules)  # the premise: the fixture trains an MTP module
    rule = plan_model_module._with_mtp_rule
    assert rule(_run("megatron"), spec).options.max_stages is None
    assert rule(_run("torchtitan"), spec).options.max_stages == 1
    assert rule(_run("torchtitan", max_stages=4), spec).options.max_stages == 1
    with pytest.raises(ProblemError) as refused:
        rule(_run("deepspeed"), spec)
    assert refused.value.path == "target" and "--mtp-layers 0" in str(refused.value)
    plain = load_model(FIXTURE, Workload(mtp_layers=0))
    assert rule(_run("deepspeed"), plain).options.max_stages is None  # without MTP nothing changes
    assert rule(_run("torchtitan"), plain).options.max_stages is None


def test_the_default_run_says_why_deepspeed_has_no_plan_and_the_others_export():
    result = plan_model(FIXTURE, "dgx-h100", **KWARGS)
    assert result.targets is not None
    ds = result.targets["deepspeed"]
    assert ds.status == "refused" and "multi-token prediction" in (ds.message or "")
    for name in ("megatron", "torchtitan"):
        line = result.targets[name]
        assert line.result is not None and line.result.plan is not None, (name, line.message)
        assert export_result(line.result, name, line.result.problem).expressible, name
    tt = result.targets["torchtitan"].result
    assert len(tt.plan.stages) == 1
    # the rule the planner enforces is the one runs() states for a plan found without it
    problem, plan = result.targets["megatron"].result.problem, result.targets["megatron"].result.plan
    assert any("multi-token prediction" in r for r in runs(RULES["deepspeed"], problem, plan))
    assert not any("multi-token prediction" in r for r in runs(RULES["megatron"], problem, plan))
