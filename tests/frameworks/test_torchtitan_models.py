"""The torchtitan model a MoE / VLM plan's job names, checked against torchtitan 0.3.0's own model registry.

* Each entry of :data:`~partitioner.frameworks.torchtitan.models.TITAN_MODELS`
  is the preset's language model: torchtitan's ``model_registry(flavor)``
  builds a model config whose depth, width, heads, experts, top-k, expert
  width, router score, top-k normalisation and groups are the preset's.
* The export of a MoE preset never names ``llama3``; a VLM's says plainly
  that torchtitan does not train its vision tower and marks the job a
  template; the 235B flavor's ``config_registry`` function, imported as a
  package by torchtitan's ``--module``, builds that flavor, and a matched
  family's overrides parse with torchtitan's own ``--module/--config``.
"""
from __future__ import annotations

import importlib

import pytest

from partitioner import plan_model
from partitioner.frameworks.export import export_result
from partitioner.frameworks.torchtitan.models import DENSE_BASE, TITAN_MODELS
from partitioner.presets import load_model
from tests.frameworks.plans import NOT_INSTALLED

pytest.importorskip("torchtitan", reason=NOT_INSTALLED)

pytestmark = pytest.mark.slow  # the framework tier: plans and framework code, minutes on 2 cores

from benchmarks.framework_checks import _registry_config, torchtitan_parse  # noqa: E402

# (preset, nodes of 8 H100, global batch): planned for torchtitan with the greedy method in seconds
CASES = [("qwen3-vl-30b-a3b", 2, 256), ("qwen3-vl-235b-a22b", 16, 512), ("glm-4.5v", 8, 256)]
_CACHE: dict[str, object] = {}


def _export(name: str):
    if name not in _CACHE:
        _, nodes, gbs = next(c for c in CASES if c[0] == name)
        result = plan_model(name, "dgx-h100", nodes=nodes, global_batch=gbs, microbatches=32, method="greedy",
                            schedule="1f1b", target="torchtitan")
        _CACHE[name] = export_result(result, "torchtitan")
    return _CACHE[name]


def _shape(model_cfg) -> dict:
    """What torchtitan's model config says of the decoder (its last layer is a MoE layer in every family here)."""
    layer = model_cfg.layers[-1]
    att, moe = layer.attention, layer.moe
    router = moe.router
    experts = moe.routed_experts.inner_experts if hasattr(moe, "routed_experts") else moe.experts
    return {"layers": len(model_cfg.layers), "hidden": model_cfg.dim, "vocab": model_cfg.vocab_size, "heads": att.n_heads,
            "experts": router.num_experts, "top_k": router.top_k, "moe_ffn": experts.hidden_dim,
            "router_score": router.score_func, "norm_topk": router.route_norm,
            "expert_groups": router.num_expert_groups or 0, "group_top_k": router.num_limited_groups or 0}


@pytest.mark.parametrize("name", sorted(TITAN_MODELS))
def test_named_flavor_is_the_presets_language_model(name):
    entry = TITAN_MODELS[name]
    family = importlib.import_module(f"torchtitan.models.{entry.family}")
    got = _shape(family.model_registry(entry.flavor).model)
    llm = load_model(name).llm
    want = {"layers": llm.layers, "hidden": llm.hidden, "vocab": llm.vocab, "heads": llm.heads, "experts": llm.experts,
            "top_k": llm.top_k, "moe_ffn": llm.moe_ffn, "router_score": llm.router_score, "norm_topk": llm.norm_topk,
            "expert_groups": llm.expert_groups, "group_top_k": llm.group_top_k}
    assert got == want
    # the config function the job starts from exists and builds its own flavor
    registry = importlib.import_module(f"torchtitan.models.{entry.family}.config_registry")
    assert getattr(registry, entry.config)().model_spec.flavor == entry.config_flavor


def test_flavor_check_can_fail():
    """Another flavor of the family is told apart (30B-A3B is not Qwen3-VL-235B's language model)."""
    from torchtitan.models.qwen3 import model_registry

    llm = load_model("qwen3-vl-235b-a22b").llm
    got = _shape(model_registry("30B-A3B").model)
    assert (got["layers"], got["hidden"], got["moe_ffn"]) != (llm.layers, llm.hidden, llm.moe_ffn)


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_moe_vlm_export_names_its_family_and_says_what_it_does_not_train(name):
    exp = _export(name)
    assert exp.expressible, exp.reasons
    assert "llama3" not in exp.snippet and DENSE_BASE not in " ".join(exp.notes)
    model = exp.settings["model"]
    entry = TITAN_MODELS.get(name)
    assert model["family"] == (entry.family if entry else None)
    assert model["trains"] == "language model only" and exp.settings["launch"] == "template"
    assert any(n.startswith("TEMPLATE for this VLM") and "vision tower" in n for n in exp.notes)
    if entry is None:
        assert any("no torchtitan model" in n for n in exp.notes)


def test_registry_function_builds_the_235b_flavor():
    """torchtitan imports the exported function by --module and builds the 235B-A22B flavor, not its base's 30B."""
    exp = _export("qwen3-vl-235b-a22b")
    cfg = _registry_config(exp.snippet)
    assert cfg.model_spec.flavor == "235B-A22B" and len(cfg.model_spec.model.layers) == 94
    for section, values in exp.settings["config"].items():
        for key, value in values.items():
            assert getattr(getattr(cfg, section), key) == value, f"{section}.{key}"


def test_matched_family_overrides_parse_with_torchtitans_own_config():
    """Qwen3-VL-30B-A3B: torchtitan's --module qwen3 --config qwen3_30b_a3b with the exported overrides."""
    exp = _export("qwen3-vl-30b-a3b")
    assert "--module qwen3 --config qwen3_30b_a3b" in exp.snippet
    overrides = [tok for line in exp.settings["overrides"] for tok in line.split(" ")]
    cfg = torchtitan_parse(["--module", "qwen3", "--config", "qwen3_30b_a3b", *overrides])
    assert cfg.model_spec.flavor == "30B-A3B"
    assert cfg.parallelism.expert_parallel_degree == exp.settings["config"]["parallelism"]["expert_parallel_degree"]


def test_deepseek_v3_names_its_family_and_refuses_its_mtp_module_under_pipeline_parallelism():
    """DeepSeek-V3 (language only): torchtitan's deepseek_v3 671B. Its MTP module over several pipeline stages is
    refused with the reason -- torchtitan's own MTP model config raises under pipeline parallelism (checked
    here on its debugmodel_mtp) --; trained without MTP (workload mtp_layers 0) the plan is the 671B command."""
    from partitioner.presets import Workload

    # a pipeline plan found for Megatron (plan --target torchtitan keeps MTP models on one stage: mtp_stages)
    result = plan_model("deepseek-v3", "dgx-h100", nodes=64, global_batch=1024, microbatches=64, method="greedy",
                        schedule="1f1b", target="megatron")
    exp = export_result(result, "torchtitan")
    assert len(result.plan.stages) > 1 and not exp.expressible
    assert any("MTPDecoder refuses pipeline parallelism" in r for r in exp.reasons), exp.reasons
    for pp, refused in ((1, False), (2, True)):
        cfg = torchtitan_parse(["--module", "deepseek_v3", "--config", "deepseek_v3_debugmodel_mtp",
                                "--parallelism.pipeline_parallel_degree", str(pp), "--training.disable_cuda_graphs"])
        if refused:
            with pytest.raises(NotImplementedError, match="pipeline parallelism"):
                cfg.model_spec.model.update_from_config(config=cfg)
        else:
            cfg.model_spec.model.update_from_config(config=cfg)
    result = plan_model("deepseek-v3", "dgx-h100", workload=Workload(mtp_layers=0), nodes=64, global_batch=1024,
                        microbatches=64, method="greedy", schedule="1f1b", target="torchtitan")
    exp = export_result(result, "torchtitan")
    assert exp.expressible, exp.reasons
    assert "--module deepseek_v3 --config deepseek_v3_671b" in exp.snippet
    assert exp.settings["model"] == {"family": "deepseek_v3", "flavor": "671B", "trains": "whole model",
                                     "base": TITAN_MODELS["deepseek-v3"].base}
    assert exp.settings["launch"] == "command" and not any("num_mtp_layers" in n for n in exp.notes)


def test_sequence_length_is_the_plans():
    """training.seq_len is the plan's tokens per sample (8704 for 64-frame video), not the base config's."""
    result = plan_model("qwen2.5-vl-7b-video-64f", "dgx-h100", nodes=1, global_batch=64, microbatches=16,
                        method="greedy", schedule="1f1b", target="torchtitan")
    exp = export_result(result, "torchtitan")
    assert exp.expressible, exp.reasons
    overrides = [tok for line in exp.settings["overrides"] for tok in line.split(" ")]
    cfg = torchtitan_parse(["--module", "llama3", "--config", "llama3_debugmodel", *overrides])
    assert cfg.training.seq_len == result.problem.workload.llm_tokens_per_sample == 8704
