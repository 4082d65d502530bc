"""The 2025-26 model zoo from Hugging Face config.json: parameters per part, workloads, tied heads, MoE, cross-attention."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from partitioner.costs import build_problem, model_layers
from partitioner.costs.compute.flops import block_gemm_flops
from partitioner.presets import (
    Workload,
    apply_workload,
    is_moe_layer,
    load_model,
    model_from_hf_config,
    module_active_params,
    module_params,
    mtp_layer_params,
    sequence_summary,
)
from partitioner.problem import ProblemError
from tests.conftest import run_cli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
ZOO = sorted(p.parent.name for p in FIXTURES.glob("*/params.json"))
PART = {"vit": "vision", "projector": "projector", "llm": "language", "action_expert": "action"}
TYPES = {"qwen2_5_vl", "qwen3", "qwen3_moe", "qwen3_vl", "qwen3_vl_moe", "internvl", "gemma2", "gemma3", "paligemma",
         "llava_onevision", "idefics3", "smolvlm", "glm4v", "glm4v_moe", "mllama", "pi0", "deepseek_v2", "deepseek_v3",
         "kimi_k2"}


def per_part(spec, count=module_params) -> dict[str, int]:
    """Parameters per part; a language model's multi-token prediction modules are the part ``mtp``."""
    out: dict[str, int] = {}
    for m in spec.modules:
        n = count(m)
        if m.mtp_layers:
            mtp = m.mtp_layers * mtp_layer_params(m, active=count is module_active_params)
            out["mtp"] = mtp
            n -= mtp
        out[PART[m.kind]] = out.get(PART[m.kind], 0) + n
    return out


def test_the_zoo_covers_the_nineteen_types():
    types = {json.loads((FIXTURES / name / "config.json").read_text())["model_type"] for name in ZOO}
    assert types == TYPES and len(ZOO) == 21


@pytest.mark.parametrize("name", ZOO)
def test_parameters_per_part_match_the_meta_device_model(name):
    ref = json.loads((FIXTURES / name / "params.json").read_text())
    spec = load_model(str(FIXTURES / name))  # the folder holding config.json
    got = per_part(spec)
    assert set(got) == set(ref["parts"])
    for part, count in ref["parts"].items():
        assert abs(got[part] - count) <= 0.005 * count, (name, part, got[part], count)
    assert abs(spec.params - ref["total"]) <= 0.005 * ref["total"]
    if "active" in ref:  # MoE: the parameters one token runs through
        active = per_part(spec, module_active_params)
        for part, count in ref["active"].items():
            assert abs(active[part] - count) <= 0.005 * count, (name, part, active[part], count)
        assert spec.summary()["active_params"] == spec.active_params < 0.2 * spec.params


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO)
def test_meta_device_counts_recomputed_with_transformers(name):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    config = make.load_config(FIXTURES / name)  # Kimi-K2's kimi_k2 is read as the deepseek_v3 it builds
    ref = json.loads((FIXTURES / name / "params.json").read_text())
    counted = make.meta_counts(config)
    assert counted["parts"] == ref["parts"] and counted.get("active") == ref.get("active")


def test_a_one_stage_plan_holds_a_tied_head_once():
    for name, total in (("paligemma-3b-pt-224", None), ("paligemma2-3b-pt-224", "params.json")):
        spec = load_model(str(FIXTURES / name / "config.json"))
        assert spec.module("llm").tie_embeddings
        p = build_problem(spec, "dgx-h100", nodes=1, global_batch=8, microbatches=8)
        layer_params = sum(layer["params"] for layer in p.meta["layers"])
        assert layer_params == spec.params  # the head's copy is not counted again
        if total:
            assert layer_params == json.loads((FIXTURES / name / total).read_text())["total"]
    # PaliGemma-3B: 2.92 B (it was 3.45 B with the head counted twice)
    spec = load_model(str(FIXTURES / "paligemma-3b-pt-224" / "config.json"))
    assert 2.90e9 < spec.params < 2.94e9
    head = [layer for layer in model_layers(spec) if layer.role == "loss"][0].pieces[0]
    assert head.params == spec.module("llm").hidden and head.tied_params == spec.module("llm").vocab * spec.module("llm").hidden


@pytest.mark.slow
def test_a_hub_id_asks_for_the_config_first():
    with pytest.raises(ProblemError, match="Hub id.*download its config.json"):
        load_model("Qwen/Qwen2.5-VL-7B-Instruct")
    proc = run_cli("plan", "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--cluster", "dgx-h100", "--nodes", "1",
                   "--global-batch", "8", "--method", "greedy")
    assert proc.returncode == 2 and "download" in proc.stderr and "Traceback" not in proc.stderr


def test_types_without_an_importer_are_refused_with_the_reason():
    with pytest.raises(ProblemError, match="deepseek_vl_v2.*remote code"):
        model_from_hf_config({"model_type": "deepseek_vl_v2"})
    with pytest.raises(ProblemError, match="unsupported model_type 'mamba'"):
        model_from_hf_config({"model_type": "mamba"})


# --------------------------------------------------------------------------- workloads and tokenisation


def hf(name: str, **workload) -> object:
    doc = json.loads((FIXTURES / name / "config.json").read_text())
    return model_from_hf_config(doc, source=str(FIXTURES / name / "config.json"), workload=Workload(**workload))


def test_dynamic_resolution_images_and_video():
    spec = hf("Qwen2.5-VL-7B-Instruct", image_size=896, text_tokens=512)
    assert spec.image_tokens == (896 // 28) ** 2 and spec.llm_tokens == 1024 + 512
    assert spec.module("vision").tokens_per_image == (896 // 14) ** 2
    video = hf("Qwen2.5-VL-7B-Instruct", image_size=448, frames=64, fps=2.0)
    assert video.image_tokens == 32 * 256 and video.module("vision").tokens_per_image == 32 * 1024
    assert sequence_summary(video, Workload(frames=64, fps=2.0))["workload"]["clip_seconds"] == 32.0
    with pytest.raises(ProblemError, match="workload.frames"):
        hf("Qwen2.5-VL-7B-Instruct", frames=3)
    with pytest.raises(ProblemError, match="workload.image_size"):
        hf("Qwen3-VL-8B-Instruct", image_size=900)  # patch 16 x merge 2
    assert hf("Qwen3-VL-8B-Instruct", image_size=896).image_tokens == (896 // 32) ** 2


def test_tiling_and_pixel_shuffle():
    # InternVL: 896 px -> 2 x 2 tiles of 448 + thumbnail, 256 tokens per tile after pixel shuffle
    assert hf("InternVL3-8B-hf", image_size=896).image_tokens == 5 * 256
    assert hf("InternVL3-8B-hf").image_tokens == 256 and hf("InternVL3-8B-hf", tiles=7).image_tokens == 7 * 256
    # Idefics3: 364 px tiles, 26 x 26 patches, scale factor 2 -> 169 per tile; 896 px -> 3 x 3 + the whole image
    assert hf("Idefics3-8B-Llama3", image_size=896).image_tokens == 10 * 169
    assert hf("SmolVLM2-2.2B-Instruct").image_tokens == 81  # 27 x 27 patches, scale factor 3
    # LLaVA-OneVision anyres_max_9: base 729 + 3 x 3 grid (81 x 81 features) + 81 newlines
    ov = hf("llava-onevision-qwen2-7b-ov-hf", image_size=1152)
    assert ov.image_tokens == 729 + 81 * 81 + 81 and ov.module("vision").images == 10
    big = hf("llava-onevision-qwen2-7b-ov-hf", image_size=2304)  # 6 x 6 grid interpolated down to 81 x 81
    assert big.image_tokens == ov.image_tokens and big.module("vision").images == 37
    assert hf("llava-onevision-qwen2-7b-ov-hf", frames=16).image_tokens == 16 * 14 * 14 + 1
    with pytest.raises(ProblemError, match="workload.image_size"):
        hf("gemma-3-4b-it", image_size=448)
    assert hf("gemma-3-4b-it", images=2).image_tokens == 512


def test_workload_on_a_preset():
    spec = apply_workload(load_model("qwen2-vl-7b"), Workload(images=2, text_tokens=100))
    base = load_model("qwen2-vl-7b")
    assert spec.image_tokens == 2 * base.image_tokens // base.module("vision").images and spec.module("llm").text_tokens == 100
    with pytest.raises(ProblemError, match="workload.image_size"):
        apply_workload(load_model("llava-1.5-7b"), Workload(image_size=448))


@pytest.mark.slow
def test_cli_plan_shows_the_sequence_lengths():
    proc = run_cli("plan", "--model", str(FIXTURES / "InternVL3-8B-hf"), "--cluster", "dgx-h100", "--nodes", "1",
                   "--global-batch", "8", "--method", "greedy", "--image-size", "896", "--text-tokens", "512", "--json")
    assert proc.returncode == 0, proc.stderr
    seq = json.loads(proc.stdout)["sequences"]
    assert seq["image_tokens"] == 1280 and seq["llm_tokens"] == 1792 and seq["vision_tokens"]["vision"] == 5 * 1025
    proc = run_cli("plan", "--model", str(FIXTURES / "gemma-3-4b-it"), "--cluster", "dgx-h100", "--nodes", "1",
                   "--global-batch", "8", "--method", "greedy", "--tiles", "4")
    assert proc.returncode == 2 and "workload.tiles" in proc.stderr and "Traceback" not in proc.stderr


# --------------------------------------------------------------------------- layer costs of the new block kinds


def test_moe_layers_cost_their_active_computation():
    spec = hf("GLM-4.5V")
    llm = spec.module("llm")
    assert not is_moe_layer(llm, 0) and all(is_moe_layer(llm, i) for i in range(1, llm.layers))
    t, h = 1000, llm.hidden
    attn = h * (llm.attn_dim + 2 * llm.kv_dim) + llm.attn_dim * h
    moe = h * 128 + 8 * 3 * h * 1408 + 3 * h * 1408  # router, 8 routed experts, the shared expert
    assert block_gemm_flops(llm, t, 1) == 2.0 * t * (attn + moe)
    assert block_gemm_flops(llm, t, 0) == 2.0 * t * (attn + 3 * h * 10944)
    layers = {layer.name: layer for layer in model_layers(spec)}
    # every expert's weights are held (pre-v3 costing): the layer's params are the whole MoE layer's
    qkv_bias = llm.attn_dim + 2 * llm.kv_dim
    held = attn + qkv_bias + 2 * h + h * 128 + 128 * 3 * h * 1408 + 3 * h * 1408
    assert layers["llm.1"].params == held


def test_cross_attention_states_travel_to_the_last_cross_layer():
    spec = hf("Llama-3.2-11B-Vision", image_size=1120)
    llm = spec.module("llm")
    assert spec.module("vision").tiles == 4 and llm.cross_tokens == 4 * 1601 and spec.image_tokens == 0
    layers = {layer.name: layer for layer in model_layers(spec)}
    text = spec.llm_tokens * llm.hidden * 2
    states = llm.cross_tokens * llm.hidden * 2
    assert layers["llm.embed"].out_bytes_per_sample == text + states
    assert layers["llm.37"].out_bytes_per_sample == text + states
    assert layers["llm.38"].out_bytes_per_sample == text  # the last cross-attention layer
    cross = layers["llm.3"].pieces[0]
    assert cross.attn_pairs == spec.llm_tokens * llm.cross_tokens


def test_sliding_window_layers_compute_the_window_only():
    spec = hf("gemma-2-9b", text_tokens=8192)
    layers = {layer.name: layer for layer in model_layers(spec)}
    s, w = 8192, 4096
    assert layers["llm.1"].pieces[0].attn_pairs == s * (s + 1) / 2  # global
    assert layers["llm.0"].pieces[0].attn_pairs == w * (w + 1) / 2 + (s - w) * w  # sliding


def test_glm45v_routes_by_sigmoid_as_transformers_does():
    """Glm4vMoeTextTopkRouter scores experts by sigmoid (plus a correction-bias buffer): the import and the
    shipped preset say so, so exports pass Megatron the router the model trains with."""
    import inspect

    pytest.importorskip("transformers")
    from transformers.models.glm4v_moe import modeling_glm4v_moe

    assert "router_logits.sigmoid()" in inspect.getsource(modeling_glm4v_moe)
    assert hf("GLM-4.5V").module("llm").router_score == "sigmoid"
    assert load_model("glm-4.5v").llm.router_score == "sigmoid"
