"""The campaign at the model doors of ``plan``: Hugging Face ``config.json`` files, model YAML, workload options.

Issue 35 found internal ``ZeroDivisionError``s (exit 3) from a ``config.json``
with ``spatial_merge_size``, ``temporal_patch_size``, ``num_attention_heads``
... at 0, and ``head_dim`` 0, ``top_k`` > experts and ``--fps inf``
accepted silently. Every case here edits a real file (a fixture of
``tests/fixtures/hf`` or a preset of ``models/``) and gives it to ``partitioner
plan`` (its entry point, :func:`partitioner.cli.main`, in this process): exit
2 with one line naming the file and the document's own key. Every field of
a module has a check (:func:`partitioner.presets.checks.field_problem`), so a
YAML field of the wrong type is refused too, never carried into the arithmetic.
"""
from __future__ import annotations

import json
from dataclasses import fields

import pytest
import yaml

from partitioner.presets import with_module
from partitioner.presets.checks import BOOL_FIELDS, CHOICES, FIELD_RANGES, FLOAT_RANGES, LAYER_LIST_FIELDS, field_problem
from partitioner.presets.spec import ModuleSpec
from partitioner.presets.workload import Workload, check_workload
from partitioner.problem import ProblemError
from tests.conftest import ROOT
from tests.presets.test_hostile_models import _assert_one_line, _plan, _set

HF = ROOT / "tests" / "fixtures" / "hf"
PRESETS = ROOT / "models"

# (fixture, edits, the key the error must name)
HF_CASES = [
    # a divisor at 0: ZeroDivisionError before the module checks (issue 35)
    ("Qwen2.5-VL-7B-Instruct", {"vision_config.spatial_merge_size": 0}, "vision_config.spatial_merge_size"),
    ("Qwen2.5-VL-7B-Instruct", {"vision_config.temporal_patch_size": 0}, "vision_config.temporal_patch_size"),
    ("Qwen2.5-VL-7B-Instruct", {"vision_config.patch_size": 0}, "vision_config.patch_size"),
    ("Qwen3-VL-30B-A3B-Instruct", {"vision_config.spatial_merge_size": 0}, "vision_config.spatial_merge_size"),
    ("Qwen3-VL-30B-A3B-Instruct", {"vision_config.temporal_patch_size": 0}, "vision_config.temporal_patch_size"),
    ("GLM-4.5V", {"vision_config.patch_size": 0}, "vision_config.patch_size"),
    ("GLM-4.5V", {"text_config.num_attention_heads": 0}, "text_config.num_attention_heads"),
    ("Qwen3-8B", {"num_attention_heads": 0}, "num_attention_heads"),
    ("gemma-3-4b-it", {"text_config.num_attention_heads": 0}, "text_config.num_attention_heads"),
    ("Idefics3-8B-Llama3", {"scale_factor": 0}, "scale_factor"),
    ("Idefics3-8B-Llama3", {"vision_config.patch_size": 0}, "vision_config.patch_size"),
    ("InternVL3-8B-hf", {"downsample_ratio": 0}, "downsample_ratio"),
    ("InternVL3-8B-hf", {"downsample_ratio": 2.5}, "downsample_ratio"),
    ("InternVL3-8B-hf", {"downsample_ratio": 0.3}, "downsample_ratio"),
    ("InternVL3-8B-hf", {"downsample_ratio": "0.5"}, "downsample_ratio"),
    ("Llama-3.2-11B-Vision", {"vision_config.patch_size": 0}, "vision_config.patch_size"),
    ("Llama-3.2-11B-Vision", {"vision_config.supported_aspect_ratios": 8}, "vision_config.supported_aspect_ratios"),
    ("llava-onevision-qwen2-7b-ov-hf", {"vision_config.patch_size": 0}, "vision_config.patch_size"),
    # MoE fields: at 0, and top_k beyond the experts (issue 35: accepted), named by their keys
    ("Qwen3-30B-A3B", {"num_experts_per_tok": 0}, "num_experts_per_tok"),
    ("Qwen3-30B-A3B", {"moe_intermediate_size": 0}, "moe_intermediate_size"),
    ("Qwen3-30B-A3B", {"num_experts_per_tok": 129}, "num_experts_per_tok"),
    ("Qwen3-30B-A3B", {"decoder_sparse_step": 0}, "decoder_sparse_step"),
    ("Qwen3-30B-A3B", {"mlp_only_layers": [48]}, "mlp_only_layers"),
    ("Qwen3-VL-30B-A3B-Instruct", {"text_config.num_experts_per_tok": 0}, "text_config.num_experts_per_tok"),
    ("Qwen3-VL-30B-A3B-Instruct", {"text_config.moe_intermediate_size": 0}, "text_config.moe_intermediate_size"),
    ("Qwen3-VL-30B-A3B-Instruct", {"text_config.num_experts_per_tok": 200}, "text_config.num_experts_per_tok"),
    ("GLM-4.5V", {"text_config.num_experts_per_tok": 0}, "text_config.num_experts_per_tok"),
    # a given head_dim of 0 is a head of no width (issue 35: accepted as "hidden / heads")
    ("Qwen3-8B", {"head_dim": 0}, "head_dim"),
    ("Qwen3-VL-30B-A3B-Instruct", {"text_config.head_dim": 0}, "text_config.head_dim"),
    ("gemma-2-9b", {"head_dim": 0}, "head_dim"),
    # flags and lists of the wrong type
    ("Qwen3-30B-A3B", {"norm_topk_prob": "false"}, "norm_topk_prob"),
    ("Qwen3-8B", {"tie_word_embeddings": "no"}, "tie_word_embeddings"),
    ("Qwen2.5-VL-7B-Instruct", {"vision_config.fullatt_block_indexes": 7}, "vision_config.fullatt_block_indexes"),
    ("Qwen2.5-VL-7B-Instruct", {"vision_config.fullatt_block_indexes": [99]}, "vision_config.fullatt_block_indexes"),
    ("Qwen3-VL-30B-A3B-Instruct", {"vision_config.deepstack_visual_indexes": 3}, "vision_config.deepstack_visual_indexes"),
    # a model_type that is not a string was hashed against the supported types (campaign seed 202: exit 3)
    ("Qwen3-8B", {"model_type": [1]}, "model_type"),
    ("DeepSeek-V3", {"model_type": {"a": 1}}, "model_type"),
    ("Qwen2-VL-7B-Instruct", {"vision_config.model_type": [1]}, "vision_config.model_type"),
]


@pytest.mark.parametrize("fixture, edits, key", [pytest.param(f, e, k, id=f"{f}-{'-'.join(map(str, e.values()))}-{k}")
                                                 for f, e, k in HF_CASES])
def test_a_hostile_config_json_exits_2_naming_its_key(tmp_path, capsys, monkeypatch, fixture, edits, key):
    doc = json.loads((HF / fixture / "config.json").read_text())
    for path, value in edits.items():
        _set(doc, path, value)
    path = tmp_path / fixture / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(doc))
    _assert_one_line(*_plan(path, own_process=False, capsys=capsys, monkeypatch=monkeypatch), path, key)


def _preset(name: str) -> dict:
    return yaml.safe_load((PRESETS / f"{name}.yaml").read_text())


# (preset, edits, the field the error must name); module 0 of qwen3-vl-30b-a3b is its ViT, 2 its MoE llm
YAML_CASES = [
    ("qwen3-vl-30b-a3b", {"modules[2].top_k": 0}, "modules[2].top_k"),
    ("qwen3-vl-30b-a3b", {"modules[2].moe_ffn": 0}, "modules[2].moe_ffn"),
    ("qwen3-vl-30b-a3b", {"modules[2].top_k": 129}, "modules[2].top_k"),
    ("qwen3-vl-30b-a3b", {"modules[2].dense_layers": [48]}, "modules[2].dense_layers"),
    ("qwen3-vl-30b-a3b", {"modules[2].dense_layers": 5}, "modules[2].dense_layers"),
    ("qwen3-vl-30b-a3b", {"modules[2].dense_layers": [1, 1]}, "modules[2].dense_layers"),
    ("qwen3-vl-30b-a3b", {"modules[2].cross_layers": [1], "modules[2].cross_tokens": 0}, "modules[2].cross_tokens"),
    ("qwen3-vl-30b-a3b", {"modules[0].rotary": [1]}, "modules[0].rotary"),
    ("qwen3-vl-30b-a3b", {"modules[0].cross_layers": 5}, "modules[0].cross_layers"),
    ("qwen3-vl-30b-a3b", {"modules[0].block_norms": "x"}, "modules[0].block_norms"),
    ("qwen3-vl-30b-a3b", {"modules[0].block_norms": 1000}, "modules[0].block_norms"),
    ("qwen3-vl-30b-a3b", {"modules[0].extra_params": -1}, "modules[0].extra_params"),
    ("qwen3-vl-30b-a3b", {"modules[0].tiles": None}, "modules[0].tiles"),
    ("qwen3-vl-30b-a3b", {"modules[0].window": -1}, "modules[0].window"),
    ("qwen3-vl-30b-a3b", {"modules[2].qk_norm_dim": -1}, "modules[2].qk_norm_dim"),
    ("qwen3-vl-30b-a3b", {"modules[1].deepstack": 49}, "modules[1].deepstack"),
    ("qwen3-vl-30b-a3b", {"modules[1].proj_bias": "yes"}, "modules[1].proj_bias"),
    ("qwen3-vl-30b-a3b", {"modules[2].norm_topk": 1}, "modules[2].norm_topk"),
    ("qwen3-vl-30b-a3b", {"modules[2].fqn.block": 5}, "modules[2].fqn"),
    ("qwen3-vl-30b-a3b", {"modules[2].fqn.block": "layers.{j}"}, "modules[2].fqn"),
    ("qwen3-vl-30b-a3b", {"modules[2].fqn.block": "layers.{i:>999999999}"}, "modules[2].fqn"),
    ("qwen3-vl-30b-a3b", {"modules[2].fqn.pre": "embed"}, "modules[2].fqn"),
    ("qwen3-vl-30b-a3b", {"modules[2].fqn.other": ["x"]}, "modules[2].fqn"),
    # a language model with no token per sample divided by zero (issue 35)
    ("deepseek-v3", {"modules[0].text_tokens": 0}, "modules[0].text_tokens"),
    ("kimi-k2", {"modules[0].text_tokens": 0}, "modules[0].text_tokens"),
]


@pytest.mark.parametrize("preset, edits, field", [pytest.param(p, e, f, id=f"{p}-{f}-{'-'.join(map(str, e.values()))}")
                                                  for p, e, f in YAML_CASES])
def test_a_hostile_model_yaml_exits_2_naming_the_field(tmp_path, capsys, monkeypatch, preset, edits, field):
    doc = _preset(preset)
    for path, value in edits.items():
        _set(doc, path, value)
    path = tmp_path / f"{preset}-edited.yaml"
    path.write_text(yaml.safe_dump(doc))
    _assert_one_line(*_plan(path, own_process=False, capsys=capsys, monkeypatch=monkeypatch), path, field)


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1", "1e-9", "1e300"])
def test_fps_outside_its_range_exits_2(capsys, monkeypatch, value):
    """Issue 35: ``--fps inf`` was accepted (the clip length it shows would be 0 s, or infinite at 1e-9 fps)."""
    args = ["plan", "--model", "qwen2-vl-7b-video", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "8",
            "--frames", "8", "--fps", value]
    from partitioner.cli import main

    monkeypatch.setattr("sys.argv", ["partitioner", *args])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert info.value.code == 2 and len(lines) == 1, err
    assert "workload.fps" in lines[0] and "Traceback" not in err, err


@pytest.mark.parametrize("fps", [float("inf"), float("nan"), 0.0, -2.0, 5e-324, True, "30"])
def test_the_api_refuses_the_same_fps(fps):
    with pytest.raises(ProblemError) as info:
        check_workload(Workload(fps=fps))
    assert info.value.path == "workload.fps"


def test_every_module_field_has_a_check():
    """A field of ModuleSpec without a check would carry any YAML value into the arithmetic (issue 35: ``rotary``,
    ``block_norms``, ``extra_params``, ``tiles``, ``window``, ``cross_layers`` crashed with TypeError)."""
    checked = {*FIELD_RANGES, *FLOAT_RANGES, *BOOL_FIELDS, *CHOICES, *LAYER_LIST_FIELDS, "dims", "fqn", "name", "kind", "source"}
    assert {f.name for f in fields(ModuleSpec)} == checked
    for name in checked - {"name", "kind", "source"}:
        assert field_problem(name, object(), "llm") is not None, name


def test_the_api_door_refuses_the_same_fields():
    from partitioner.costs import build_problem
    from partitioner.presets import load_model

    spec = load_model("qwen3-vl-30b-a3b")
    for module, change, field in [("llm", {"top_k": 129}, "modules[2].top_k"),
                                  ("llm", {"dense_layers": (99,)}, "modules[2].dense_layers"),
                                  ("vision", {"rotary": [1]}, "modules[0].rotary"),
                                  ("llm", {"fqn": {"block": "{i!r}"}}, "modules[2].fqn"),
                                  ("llm", {"text_tokens": 0}, None)]:
        edited = with_module(spec, module, **change)
        if field is None:  # the image tokens still make a sequence
            build_problem(edited, "dgx-h100", nodes=1, global_batch=8, microbatches=1)
            continue
        with pytest.raises(ProblemError) as info:
            build_problem(edited, "dgx-h100", nodes=1, global_batch=8, microbatches=1)
        assert info.value.path == field, str(info.value)
