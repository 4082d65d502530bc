"""The DeepSpeed config reader: DeepSpeed's batch rule, what it refuses, ``auto``, and DeepSpeed's own check.

A config the reader accepts states the batch DeepSpeed's ``DeepSpeedConfig``
accepts at the dp it derives; an inconsistent batch is refused by both; a
field the cost model cannot price is one error naming the file and the field
(exit 2 on the command line).
"""
from __future__ import annotations

import json

import pytest

from partitioner import Recipe, estimate
from partitioner.frameworks.deepspeed import RULES, read_deepspeed_config
from partitioner.frameworks.recipe_files import read_recipe_file, recipe_format
from partitioner.problem import ProblemError

CONFIG = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
          "zero_optimization": {"stage": 1, "overlap_comm": True}, "bf16": {"enabled": True},
          "pipeline": {"stages": 2, "activation_checkpoint_interval": 1}}


def _read(doc, source="ds.json") -> Recipe:
    return read_deepspeed_config(json.dumps(doc), source)


def test_reads_a_config_as_deepspeed_counts_it():
    r = _read(CONFIG)
    assert (r.gbs, r.mbs, r.dp, r.zero, r.pp, r.recompute) == (64, 2, 4, 1, 2, "full")
    assert (r.memory_count, r.expert_fused_glu) == (RULES.memory[1], False)
    assert r.where("dp") == "ds.json: train_batch_size" and any("overlap_comm" in n for n in r.notes)
    est = estimate("llava-1.5-7b", "dgx-h100", r, nodes=1)  # 8 GPUs = pp 2 x dp 4 (tp 1: the flags' default)
    assert (est.dp, est.microbatches) == (4, 8)  # m = gradient_accumulation_steps, as DeepSpeed's pipeline runs


@pytest.mark.parametrize(("change", "field"), [
    ({"train_batch_size": 60}, "train_batch_size"),  # 60 is not 2 x 8 x dp
    ({"train_batch_size": None}, "train_batch_size"),
    ({"train_micro_batch_size_per_gpu": None}, "train_micro_batch_size_per_gpu"),
    ({"train_micro_batch_size_per_gpu": 0}, "train_micro_batch_size_per_gpu"),
    ({"zero_optimization": {"stage": 2}}, "zero_optimization.stage"),
    ({"zero_optimization": {"stage": 3}}, "zero_optimization.stage"),  # with 2 pipeline stages
    ({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}}, "zero_optimization.offload_optimizer"),
    ({"bf16": {"enabled": False}}, "bf16.enabled"),
    ({"fp16": {"enabled": True}}, "fp16.enabled"),
    ({"activation_checkpointing": {"partition_activations": True}}, "activation_checkpointing.partition_activations"),
    ({"pipeline": {"stages": 2, "activation_checkpoint_interval": 2}}, "pipeline.activation_checkpoint_interval"),
])
def test_refuses_what_it_cannot_price_naming_the_field(change, field):
    doc = {k: v for k, v in {**CONFIG, **change}.items() if v is not None}
    with pytest.raises(ProblemError) as info:
        _read(doc)
    assert str(info.value).startswith(f"ds.json: {field}:"), str(info.value)


def test_estimate_checks_the_derived_dp(cli, tmp_path):
    """The config's dp (64 / (2 x 8) = 4) against the world the flags give: tp 1 x pp 2 on 8 GPUs is dp 4, tp 2 is
    dp 2 -- refused naming the config's field, exit 2."""
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(CONFIG))
    ok = cli("estimate", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--recipe", path, "--json")
    assert ok.returncode in (0, 1), ok.stderr
    doc = json.loads(ok.stdout)
    assert (doc["dp"], doc["microbatches"], doc["recipe"]["pp"]) == (4, 8, 2)
    bad = cli("estimate", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--recipe", path,
              "--tp", "2")
    assert bad.returncode == 2 and bad.stderr.startswith(f"error: {path}: train_batch_size:"), bad.stderr
    assert "Traceback" not in bad.stderr
    path.write_text(json.dumps({**CONFIG, "fp16": {"enabled": True}}))
    bad = cli("estimate", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--recipe", path)
    assert bad.returncode == 2 and f"{path}: fp16.enabled" in bad.stderr and "Traceback" not in bad.stderr


def test_auto_tells_deepspeed_from_bridge_json(tmp_path):
    from pathlib import Path

    assert recipe_format(Path("c.json"), json.dumps(CONFIG)) == "deepspeed"
    assert recipe_format(Path("c.json"), json.dumps({"target": "deepspeed", "settings": {}})) == "deepspeed"
    bridge = {"model": {"tensor_model_parallel_size": 2}, "train": {"global_batch_size": 64}}
    assert recipe_format(Path("c.json"), json.dumps(bridge)) == "bridge"
    path = tmp_path / "bridge.json"
    path.write_text(json.dumps(bridge))
    assert read_recipe_file(path).tp == 2
    with pytest.raises(ProblemError, match="must be one of"):
        read_recipe_file(path, "deepspeed-json")


def test_not_expressible_export_is_refused():
    with pytest.raises(ProblemError) as info:
        _read({"target": "deepspeed", "expressible": False, "reasons": ["ZeRO-3"], "settings": {}})
    assert str(info.value).startswith("ds.json: expressible:")


def test_batch_rule_is_deepspeeds():
    """DeepSpeedConfig, at the dp the reader derives, accepts what the reader accepts and refuses 60 = 2 x 8 x dp."""
    pytest.importorskip("deepspeed", reason="the framework tier's DeepSpeed is not installed")
    from benchmarks.framework_checks import deepspeed_config

    r = _read(CONFIG)
    cfg = deepspeed_config(CONFIG, r.dp)
    assert (cfg.train_batch_size, cfg.train_micro_batch_size_per_gpu, cfg.gradient_accumulation_steps) == (64, 2, 8)
    assert cfg.zero_optimization_stage == r.zero and cfg.bfloat16_config.enabled
    bad = {**CONFIG, "train_batch_size": 60}
    with pytest.raises(AssertionError):
        deepspeed_config(bad, 4)
    with pytest.raises(ProblemError):
        _read(bad)


def test_export_document_on_the_command_line(cli, tmp_path):
    """``export --to deepspeed --json`` saved and given to ``estimate --recipe``: the same iteration and stages."""
    from tests.planning.recipes.round_trip import export_of, in_terms_of

    recipe = in_terms_of(Recipe(tp=2, pp=2, gbs=32, zero=1, recompute="full"), "deepspeed", 2)
    first = estimate("llava-1.5-7b", "dgx-h100", recipe, nodes=1)
    path = tmp_path / "ds_export.json"
    path.write_text(json.dumps(export_of(first, "deepspeed").to_dict()))
    run = cli("estimate", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--recipe", path,
              "--json")
    assert run.returncode in (0, 1), run.stderr
    doc = json.loads(run.stdout)
    assert doc["iteration_ms"] == pytest.approx(first.iteration_ms, rel=1e-9)
    assert [(s["first_layer"], s["last_layer"]) for s in doc["stages"]] == \
        [(s.first_layer, s.last_layer) for s in first.stages]
    cuts = [s.first_layer for s in first.stages] + [first.stages[-1].last_layer + 1]
    assert doc["recipe"]["layer_parts"] == cuts and doc["recipe"]["tp"] == 2  # read from the document, not defaulted
