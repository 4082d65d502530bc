"""Model and cluster presets: published parameter counts, sources, loaders, HF config import."""
from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from partitioner.costs import build_problem, forward_flops, model_flops_per_sample, model_layers
from partitioner.presets import (
    ModelSpec,
    block_params,
    list_clusters,
    list_models,
    load_cluster,
    load_model,
    model_from_dict,
    model_from_hf_config,
    module_layer_params,
    module_params,
    preset_dirs,
)
from partitioner.problem import Layout, ProblemError
from tests.conftest import run_cli

REQUIRED_MODELS = {"openvla-7b", "pi0", "llava-1.5-7b", "llava-1.5-13b", "qwen2-vl-7b", "qwen2-vl-72b", "internvl-1.5-26b", "seed-vla-8gpu"}
REQUIRED_CLUSTERS = {"dgx-a100-80g", "dgx-h100", "dgx-h200"}


def within(value: float, target: float, rel: float = 0.03) -> bool:
    return abs(value - target) <= rel * target


@pytest.fixture(scope="module")
def models_json() -> dict[str, dict]:
    proc = run_cli("models", "--json")
    assert proc.returncode == 0, proc.stderr
    return {m["name"]: m for m in json.loads(proc.stdout)}


def test_every_required_preset_is_listed():
    assert REQUIRED_MODELS <= set(list_models())
    assert REQUIRED_CLUSTERS <= set(list_clusters())


@pytest.mark.parametrize("name, published", [("openvla-7b", 7.54e9), ("pi0", 3.3e9), ("llava-1.5-7b", 7.06e9), ("qwen2-vl-7b", 8.29e9)])
def test_models_json_totals_match_published_counts(models_json, name, published):
    entry = models_json[name]
    assert within(entry["params"], published), (name, entry["params"])
    assert entry["params"] == sum(m["params"] for m in entry["modules"])
    assert all(set(m) >= {"name", "kind", "layers", "params"} for m in entry["modules"])


@pytest.mark.parametrize(
    "model, module, published",
    [
        ("openvla-7b", "llm", 6.74e9),  # Llama-2-7B
        ("llava-1.5-7b", "llm", 6.74e9),  # Vicuna-7B = Llama-2-7B
        ("pi0", "llm", 2.51e9),  # Gemma-2B
        ("pi0", "vision", 0.41e9),  # SigLIP So400m/14 tower, no pooling head
        ("openvla-7b", "vision_siglip", 0.41e9),
        ("openvla-7b", "vision_dino", 0.30e9),  # DINOv2 ViT-L/14
        ("pi0", "action_expert", 0.311e9),  # openpi gemma_300m: "311M params"
        ("qwen2-vl-7b", "vision", 0.675e9),  # Qwen2-VL paper: 675M ViT (with its merger)
    ],
)
def test_module_counts_match_published(models_json, model, module, published):
    mods = {m["name"]: m for m in models_json[model]["modules"]}
    count = mods[module]["params"]
    if model == "qwen2-vl-7b":
        count += mods["projector"]["params"]  # the paper counts the merger with the ViT
    assert within(count, published), (model, module, count)


def test_every_preset_with_a_published_count_is_within_3_percent():
    for name in list_models():
        spec = load_model(name)
        if spec.published_params:
            assert within(spec.params, spec.published_params), (name, spec.params, spec.published_params)


def test_every_module_names_a_source_that_the_preset_cites():
    for name in list_models():
        spec = load_model(name)
        assert spec.references, name
        for m in spec.modules:
            assert m.source in spec.references, (name, m.name, m.source)
            assert spec.references[m.source].strip()


def test_cluster_presets_have_sources_and_eight_gpus():
    for name in REQUIRED_CLUSTERS:
        c = load_cluster(name)
        assert c.gpus_per_node == 8
        assert c.references and all(v.strip() for v in c.references.values())
        assert c.peak_tflops > 100 and c.intra_node_GBps > c.inter_node_GBps > 0
    assert load_cluster("dgx-h200").gpu_memory_bytes > load_cluster("dgx-h100").gpu_memory_bytes


def test_shapes_pi0_and_openvla():
    pi0 = load_model("pi0")
    assert pi0.module("llm").layers == pi0.module("action_expert").layers == 18
    assert pi0.image_tokens == 3 * 256
    openvla = load_model("openvla-7b")
    assert openvla.image_tokens == 256
    assert openvla.module("projector").in_dim == openvla.module("vision_dino").hidden + openvla.module("vision_siglip").hidden
    assert load_model("llava-1.5-7b").module("vision").frozen


@pytest.mark.slow
def test_presets_are_found_from_another_folder(tmp_path):
    proc = run_cli("models", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert REQUIRED_MODELS <= {m["name"] for m in json.loads(proc.stdout)}
    proc = run_cli("clusters", "--json", cwd=tmp_path)
    assert proc.returncode == 0 and REQUIRED_CLUSTERS <= {c["name"] for c in json.loads(proc.stdout)}


def test_environment_folder_is_searched_first(tmp_path, monkeypatch):
    text = (preset_dirs()[-1] / "pi0.yaml").read_text().replace("name: pi0", "name: pi0-copy")
    (tmp_path / "pi0-copy.yaml").write_text(text)
    monkeypatch.setenv("PARTITIONER_PRESETS", str(tmp_path))
    assert "pi0-copy" in list_models()
    assert load_model("pi0-copy").params == load_model("pi0").params


def test_unknown_preset_is_a_problem_error_listing_presets():
    with pytest.raises(ProblemError, match="unknown model 'gpt-9'.*pi0"):
        load_model("gpt-9")
    with pytest.raises(ProblemError, match="unknown cluster"):
        load_cluster("dgx-z1")


def test_bad_preset_file_names_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmodules:\n  - {name: llm, kind: llm, layers: 2, hidden: 64, heads: 3, ffn: 128, vocab: 10, text_tokens: 8}\n")
    with pytest.raises(ProblemError) as info:
        load_model(str(bad))
    assert "bad.yaml" in str(info.value) and "modules[0].heads" in str(info.value)
    bad.write_text("name: bad\nmodules:\n  - {name: v, kind: vit, layers: two}\n")
    with pytest.raises(ProblemError, match=r"modules\[0\]\.layers"):
        load_model(str(bad))
    bad.write_text("name: bad\nmodules:\n  - {name: v, kind: transformer}\n")
    with pytest.raises(ProblemError, match=r"modules\[0\]\.kind"):
        load_model(str(bad))


@pytest.mark.slow
def test_cli_plan_with_unknown_model_exits_2():
    proc = run_cli("plan", "--model", "gpt-9", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "8", "--method", "greedy")
    assert proc.returncode == 2
    assert "gpt-9" in proc.stderr and "Traceback" not in proc.stderr


LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False}


def test_hf_llama_config_matches_the_preset(tmp_path):
    path = tmp_path / "Llama-2-7b-hf" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(LLAMA2_7B))
    spec = load_model(str(path))
    assert spec.name == "Llama-2-7b-hf"
    assert spec.params == module_params(load_model("llava-1.5-7b").module("llm"))


def test_hf_qwen2_gemma_clip_siglip_configs():
    qwen = model_from_hf_config({"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                                 "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064, "tie_word_embeddings": False})
    assert within(qwen.params, 7.62e9, 0.01)  # Qwen2-7B
    gemma = model_from_hf_config({"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384, "num_attention_heads": 8,
                                  "num_hidden_layers": 18, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 256000})
    assert within(gemma.params, 2.51e9, 0.01) and gemma.modules[0].tie_embeddings
    clip = model_from_hf_config({"model_type": "clip", "vision_config": {"hidden_size": 1024, "intermediate_size": 4096,
                                 "num_attention_heads": 16, "num_hidden_layers": 24, "image_size": 336, "patch_size": 14}})
    assert within(clip.params, 0.3035e9, 0.005)
    siglip = model_from_hf_config({"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                                   "num_attention_heads": 16, "num_hidden_layers": 27, "image_size": 224, "patch_size": 14})
    # transformers' SiglipVisionModel with this config (vision_use_head defaults to true): 427,680,704 parameters,
    # 15,238,352 of them in the attention-pooling head
    assert siglip.params == 427_680_704 and siglip.modules[0].pool_head
    headless = model_from_hf_config({"model_type": "siglip_vision_model", "hidden_size": 1152, "intermediate_size": 4304,
                                     "num_attention_heads": 16, "num_hidden_layers": 27, "image_size": 224, "patch_size": 14,
                                     "vision_use_head": False})
    assert siglip.params - headless.params == 15_238_352
    with pytest.raises(ProblemError, match="model_type"):
        model_from_hf_config({"model_type": "mamba"})
    with pytest.raises(ProblemError, match="hidden_size"):
        model_from_hf_config({"model_type": "llama", "hidden_size": "wide"})
    # a missing field takes transformers' default, as from_pretrained reads it (LlamaConfig(): Llama-7B's shape)
    assert model_from_hf_config({"model_type": "llama"}).params == model_from_hf_config(LLAMA2_7B).params


def test_summary_shape():
    doc = load_model("seed-vla-8gpu").summary()
    assert isinstance(doc["params"], int) and [m["kind"] for m in doc["modules"]] == ["vit", "projector", "llm", "action_head"]
    assert isinstance(load_model("pi0"), ModelSpec)


# --------------------------------------------------------------------------- fixes checked against the published models


def test_qkv_bias_is_separate_from_the_other_biases():
    # InternViT-6B: biases on the output projection and the MLP, none on QKV
    vit = load_model("internvl-1.5-26b").module("vision")
    assert vit.bias and vit.qkv_bias is False
    h, f = 3200, 12800
    # qkv (no bias), proj + bias, MLP with biases, 2 RMSNorms, 2 layer scales, QK-norm (RMS over all heads)
    assert block_params(vit) == 3 * h * h + h * h + h + 2 * h * f + f + h + 2 * h + 2 * h + 2 * h
    assert block_params(replace(vit, qkv_bias=None)) == block_params(vit) + 3 * h  # None follows ``bias``


def test_patch_embeddings_without_bias_match_transformers():
    # counted with transformers' CLIPVisionModel (openai/clip-vit-large-patch14-336 config) and Qwen2-VL's
    # vision tower with its merger (Qwen/Qwen2-VL-7B-Instruct vision_config) on the meta device
    assert module_params(load_model("llava-1.5-7b").module("vision")) == 303_507_456
    q = load_model("qwen2-vl-7b")
    assert module_params(q.module("vision")) + module_params(q.module("projector")) == 675_759_104
    assert not load_model("llava-1.5-7b").module("vision").patch_bias and not q.module("vision").patch_bias


def test_dinov2_position_embeddings_one_per_patch():
    # OpenVLA's DINOv2 is timm's ViT-L/14 reg4 at 224 px: position embeddings for the 256 patches only
    # (no_embed_class: the class token and the 4 registers carry none)
    dino = load_model("openvla-7b").module("vision_dino")
    pre = module_layer_params(dino)["pre"]
    assert pre == 3 * 14 * 14 * 1024 + 1024 + 256 * 1024 + 5 * 1024  # patch conv + bias, positions, class + registers


def test_openvla_and_llava_take_the_second_to_last_block():
    ovla = build_problem("openvla-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    names = [layer.name for layer in ovla.layers]
    for last in ("vision_dino.23", "vision_siglip.26"):
        for c in ovla.layers[names.index(last)].costs.values():
            assert c.fwd_ms > 0 and c.bwd_ms == 0 and c.act_bytes == 0  # runs, but nothing needs its output
    for used in ("vision_dino.22", "vision_siglip.25"):
        assert all(c.bwd_ms > 0 and c.act_bytes > 0 for c in ovla.layers[names.index(used)].costs.values())
    assert load_model("llava-1.5-7b").module("vision").feature_layer == -2
    bad = {"name": "x", "modules": [{"name": "v", "kind": "vit", "layers": 2, "hidden": 64, "heads": 2, "ffn": 128, "patch": 14,
                                     "image_size": 28, "feature_layer": -3}]}
    with pytest.raises(ProblemError, match=r"modules\[0\]\.feature_layer"):
        model_from_dict(bad)


def test_first_trainable_module_computes_no_input_gradient():
    # LLaVA: the frozen CLIP runs no backward, so the projector's first linear needs no input gradient
    opts = {"efficiency_max": 1.0, "gemm_half_width": 0.0, "gemm_half_tokens": 0.0, "grad_sync_overlap": 1.0,
            "sequence_parallel": False, "memory_bound_ops": False}  # the matmuls alone
    p = build_problem("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=8, microbatches=8, options=opts)
    proj = p.layers[[layer.name for layer in p.layers].index("projector")].costs[Layout(1, 1)]
    t = 576
    first, second = 2 * t * 1024 * 4096, 2 * t * 4096 * 4096
    per_ms = 989.4e12 / 1e3
    assert proj.fwd_ms == pytest.approx((first + second) / per_ms, rel=1e-9)
    # weight gradients of both linears, the input gradient of the second only
    assert proj.bwd_ms == pytest.approx((first + 2 * second) / per_ms, rel=1e-9)
    layers = model_layers(load_model("llava-1.5-7b"))
    rest = [layer for layer in layers if layer.role != "vision"]
    assert model_flops_per_sample(rest) == pytest.approx(3 * forward_flops(rest) - first)
    # a trained first module: the patch embedding's input (the image) needs no gradient either
    vit = model_layers(load_model("pi0"))[0].pieces[0]
    assert not vit.needs_input_grad and vit.input_gemm_flops == 2.0 * 3 * 256 * 3 * 14 * 14 * 1152


def test_pi0_last_prefix_layer_backpropagates_through_keys_and_values_only():
    layers = model_layers(load_model("pi0"))
    gemma_17 = next(layer for layer in layers if layer.name == "llm.17").pieces[0]
    gemma_16 = next(layer for layer in layers if layer.name == "llm.16").pieces[0]
    s, h, kv = 816, 2048, 256
    assert gemma_17.bwd_gemm_flops == 2.0 * s * h * 2 * kv and gemma_17.bwd_attn_flops == 0.0
    assert gemma_16.bwd_gemm_flops is None  # the others run their whole backward
    backward = lambda p: (2 * (p.bwd_gemm_flops if p.bwd_gemm_flops is not None else p.gemm_flops)  # noqa: E731
                          + 2 * (p.bwd_attn_flops if p.bwd_attn_flops is not None else p.attn_flops))
    llm_backward = sum(backward(layer.pieces[0]) for layer in layers if layer.name.startswith("llm.") and layer.name != "llm.embed")
    full = 17 * backward(gemma_16) + backward(replace(gemma_17, bwd_gemm_flops=None, bwd_attn_flops=None))
    assert 0.05 < 1 - llm_backward / full < 0.06  # the issue: 5.6 % of the LLM's backward


# --------------------------------------------------------------------------- multimodal Hugging Face configs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf"  # written by transformers 5.24 save_pretrained


def shapes(m) -> dict:
    """A module's fields that decide its cost, without provenance, vocabulary and tokens."""
    skip = {"source", "fqn", "vocab", "text_tokens", "images", "tokens", "attention", "lm_head", "frozen", "pool_head"}
    out = {k: v for k, v in asdict(m).items() if k not in skip}
    out.update(kv_heads=m.n_kv_heads, head_dim=m.d_head, qkv_bias=m.bias if m.qkv_bias is None else m.qkv_bias,
               patch_bias=m.bias if m.patch_bias is None else m.patch_bias)
    return out


@pytest.mark.parametrize(
    "folder, preset, modules",
    [
        ("llava-1.5-7b-hf", "llava-1.5-7b", ("vision", "projector", "llm")),
        ("Qwen2-VL-7B-Instruct", "qwen2-vl-7b", ("vision", "projector", "llm")),
        ("paligemma-3b-pt-224", "pi0", ("vision", "projector", "llm")),  # pi0's PaliGemma part
    ],
)
def test_multimodal_hf_configs_match_the_presets(folder, preset, modules):
    spec = load_model(str(FIXTURES / folder / "config.json"))
    ref = load_model(preset)
    assert [m.name for m in spec.modules] == list(modules)
    for name in modules:
        got, want = spec.module(name), ref.module(name)
        assert got.kind == want.kind
        assert shapes(got) == shapes(want), name
        if name != "llm":
            assert module_params(got) == module_params(want), name
    # the decoders differ only in their vocabulary (llava-hf pads to 32064, PaliGemma's Gemma has 257216)
    got, want = spec.module("llm"), ref.module("llm")
    tied = 1 if got.tie_embeddings else 2
    assert module_params(got) - module_params(want) == tied * (got.vocab - want.vocab) * got.hidden
    assert spec.image_tokens == (ref.image_tokens // ref.module("vision").images)


def test_llava_config_freezes_the_tower_and_drops_the_class_token():
    spec = load_model(str(FIXTURES / "llava-1.5-7b-hf" / "config.json"))
    vit = spec.module("vision")
    assert vit.frozen and vit.feature_layer == -2 and vit.output_tokens == 576 and spec.image_tokens == 576
    doc = json.loads((FIXTURES / "llava-1.5-7b-hf" / "config.json").read_text())
    doc["vision_feature_select_strategy"] = "full"
    assert model_from_hf_config(doc).image_tokens == 577
    del doc["text_config"]["num_hidden_layers"]  # older versions save only the differences from the defaults
    assert model_from_hf_config(doc).module("llm").layers == 32
    doc["text_config"]["model_type"] = "mamba"
    with pytest.raises(ProblemError, match="text_config.model_type"):
        model_from_hf_config(doc)


def test_qwen2_vl_config_with_text_fields_at_the_top_level():
    # as transformers 4.x wrote Qwen/Qwen2-VL-7B-Instruct/config.json
    doc = json.loads((FIXTURES / "Qwen2-VL-7B-Instruct" / "config.json").read_text())
    text = doc.pop("text_config")
    doc.update({k: v for k, v in text.items() if k != "model_type"})
    spec = model_from_hf_config(doc, image_size=896)
    assert spec.module("llm").layers == 28 and spec.image_tokens == 1024
    assert spec.module("vision").tokens_per_image == 4096
    with pytest.raises(ProblemError, match="image_size"):
        model_from_hf_config(doc, image_size=450)


def test_a_multimodal_config_builds_a_problem():
    p = build_problem(str(FIXTURES / "paligemma-3b-pt-224" / "config.json"), "dgx-h100", nodes=1, global_batch=16, microbatches=4)
    names = [layer.name for layer in p.layers]
    assert names[0] == "vision.0" and "projector" in names and names[-1] == "llm.head"
