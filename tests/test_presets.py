"""Model and cluster presets: published parameter counts, sources, loaders, HF config import."""
from __future__ import annotations

import json

import pytest

from partitioner.presets import (
    ModelSpec,
    list_clusters,
    list_models,
    load_cluster,
    load_model,
    model_from_hf_config,
    module_params,
    preset_dirs,
)
from partitioner.problem import ProblemError
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
    assert within(siglip.params, 0.41e9)
    with pytest.raises(ProblemError, match="model_type"):
        model_from_hf_config({"model_type": "mamba"})
    with pytest.raises(ProblemError, match="hidden_size"):
        model_from_hf_config({"model_type": "llama"})


def test_summary_shape():
    doc = load_model("seed-vla-8gpu").summary()
    assert isinstance(doc["params"], int) and [m["kind"] for m in doc["modules"]] == ["vit", "projector", "llm", "action_head"]
    assert isinstance(load_model("pi0"), ModelSpec)
