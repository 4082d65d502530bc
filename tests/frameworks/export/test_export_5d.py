"""Exports of format-v3 plans read cp, ep and etp from the plan's configs (tests/frameworks/export/test_knobs.py checks
the flags they become); the colocated cp example runs two layouts on one stage, which no framework
expresses, and the reason names the cp layout (exit 1) instead of exporting a plan without it."""
from __future__ import annotations

from pathlib import Path

import pytest

from partitioner import load_problem, solve
from partitioner.frameworks.export import export_result, layer_hints
from partitioner.plan import Stage
from partitioner.problem import Problem

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("target", ["megatron", "torchtitan", "deepspeed"])
def test_the_colocated_cp_plan_is_not_expressible_and_says_its_cp(target):
    p = load_problem(ROOT / "examples" / "v3_cp_colocated.json")
    out = export_result(solve(p, "brute"), target, p)
    assert not out.expressible
    assert any("dp 2 x tp 1 x cp 4" in reason for reason in out.reasons), out.reasons


def test_a_v3_plan_without_cp_or_ep_exports_as_before():
    p = load_problem(ROOT / "examples" / "colocated_1node.json")
    doc = p.to_dict()
    doc["version"] = 3
    v3 = Problem.from_dict(doc)
    a, b = export_result(solve(p, "brute"), "megatron", p), export_result(solve(v3, "brute"), "megatron", v3)
    assert a.to_dict() == b.to_dict()


def test_cli_export_exits_1(cli, tmp_path):
    example = ROOT / "examples" / "v3_cp_colocated.json"
    result = tmp_path / "r.json"
    result.write_text(cli("solve", example, "--method", "brute", "--json").stdout)
    proc = cli("export", result, "--to", "megatron", "--problem", example)
    assert proc.returncode == 1
    assert "dp 2 x tp 1 x cp 4" in proc.stdout + proc.stderr


def _moe_hints() -> list:
    roles = ["vision", "vision", "projector", "embedding", "decoder", "decoder", "loss"]
    modules = ["vision", "vision", "projector", "llm", "llm", "llm", "llm"]
    return layer_hints([{"name": f"{m}.{i}", "module": m, "role": r, "fqns": [f"{m}.{i}"]} for i, (m, r) in enumerate(zip(modules, roles))])


def _stage(first: int, last: int, configs) -> Stage:
    return Stage.from_configs(first, last, 8, configs)


@pytest.mark.parametrize("target", ["megatron", "torchtitan"])
def test_a_vision_segment_without_experts_runs_under_the_models_ep(target):
    """The cost model offers ep keys only to the MoE module: a stage of vision (ep 1) and MoE layers (ep 4) is
    one layout, exported with the language model's ep; two different ep on the language model are not."""
    from partitioner.frameworks.export import ExportContext, MoeHints, export_plan
    from partitioner.plan import Plan
    from partitioner.problem import Layout

    moe = MoeHints(num_experts=16, top_k=2, ffn_hidden=256, moe_layers=(True, True))
    plain, experts = Layout(8, 1, "zero1"), Layout(8, 1, "zero1", ep=4)
    one = Plan((_stage(0, 6, [plain, plain, experts]),)).with_device_ids()
    out = export_plan(one, _moe_hints(), target, ExportContext(global_batch=64, microbatches=8, moe=moe))
    assert out.expressible, out.reasons
    text = str(out.to_dict())
    assert ("--expert-model-parallel-size 4" in text) if target == "megatron" else ("expert_parallel_degree" in text)
    two = Plan((_stage(0, 4, [plain, plain, experts]), _stage(5, 6, [Layout(8, 1, "zero1", ep=2)]))).with_device_ids()
    bad = export_plan(two, _moe_hints(), target, ExportContext(global_batch=64, microbatches=8, moe=moe))
    assert not bad.expressible
