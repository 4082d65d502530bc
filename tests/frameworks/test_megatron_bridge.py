"""VLM plans as Megatron Bridge recipe launches: checked against megatron-core and our Bridge reader.

Megatron Bridge itself does not import here (megatron-bridge 0.3.1, the
newest on PyPI, imports transformer_engine, a CUDA package), so the
overrides are checked against what they set: every ``model.<field>`` is a
megatron-core 0.16.1 ``TransformerConfig`` field (Bridge's model providers
subclass it) that megatron-core accepts with the value written, ``ddp.*``
a ``DistributedDataParallelConfig`` field, ``train.*`` the batch; the
layout places the plan's chunks (``check_megatron_layout``), the rank
generator gives the plan's dp, the batch gives m; and the launch read back
by :func:`~partitioner.frameworks.megatron.recipe.read_bridge_config` (and
auto-detected as a Bridge config) states the plan's layout. Where
hydra-core is installed, Hydra's own override parser (the one Bridge's
``parse_hydra_overrides`` calls) reads every override to the value meant.
"""
from __future__ import annotations

import dataclasses as dc
import shlex
from pathlib import Path

import pytest

from partitioner import plan_model
from partitioner.costs.memory.recompute_names import setting_of
from partitioner.frameworks.export import export_result
from partitioner.frameworks.megatron.bridge import BRIDGE_RECIPES, PROVIDER_FIELDS, hydra_value
from partitioner.frameworks.megatron.recipe import read_bridge_config
from partitioner.frameworks.recipe_files import recipe_format
from tests.frameworks.plans import NOT_INSTALLED, planned

pytest.importorskip("megatron.core", reason=NOT_INSTALLED)

pytestmark = pytest.mark.slow  # the framework tier: plans and framework code, minutes on 2 cores

from benchmarks.framework_checks import (  # noqa: E402  # noqa: E402
    PlannedJob,
    check_megatron_layout,
    close_fake_world,
    fake_world,
    llm_stages,
    megatron_ranks,
)
from benchmarks.framework_checks import megatron_config as _config  # noqa: E402

# (preset, nodes of 8 H100, global batch, m): small enough to plan in seconds with the greedy method (1F1B);
# "qwen2.5-vl-72b/interleaved": the same plan kept under interleaved 1F1B with v = 2
CASES = [("qwen3-vl-30b-a3b", 2, 256, 32), ("qwen3-vl-235b-a22b", 16, 512, 32), ("glm-4.5v", 8, 256, 32),
         ("qwen2.5-vl-72b", 4, 256, 32), ("qwen2.5-vl-7b-video-64f", 1, 64, 16), ("qwen2.5-vl-72b/interleaved", 4, 256, 32)]
_CACHE: dict[str, object] = {}


def _planned(case: str):
    if case not in _CACHE:
        _, nodes, gbs, m = next(c for c in CASES if c[0] == case)
        name, _, schedule = case.partition("/")
        _CACHE[case] = plan_model(name, "dgx-h100", nodes=nodes, global_batch=gbs, microbatches=m, method="greedy",
                                  schedule=schedule or "1f1b", virtual_stages=2 if schedule else None, target="megatron")
    return _CACHE[case]


@pytest.fixture(scope="module")
def world():
    yield fake_world
    close_fake_world()


def _overrides(snippet: str) -> dict[str, str]:
    """The trailing ``KEY=VALUE`` words of the launch, as the shell hands them to run_recipe.py."""
    words = shlex.split(snippet.replace("\\\n", " "), comments=True)
    keys = ("model.", "ddp.", "optimizer.", "train.", "dataset.", "mixed_precision=")
    return dict(w.split("=", 1) for w in words if w.startswith(keys))


def _value(text: str):
    """A Hydra override value as the reader here sees it (the Hydra test below checks Hydra's own reading)."""
    from partitioner.frameworks.megatron.recipe import _literal

    return _literal(text)


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_vlm_plan_exports_as_its_bridge_recipe(name, world):
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig

    result = _planned(name)
    exp = export_result(result, "megatron")
    assert exp.expressible, exp.reasons
    s = exp.settings
    assert s["path"] == "megatron-bridge" and s["launch"] == "command"
    recipe = BRIDGE_RECIPES[name.partition("/")[0]]
    assert f"--recipe {recipe.function}" in exp.snippet and f"--step_func {recipe.step_func}" in exp.snippet
    assert "pretrain_gpt.py" not in exp.snippet and "LLaVA" not in " ".join(exp.notes)
    over = _overrides(exp.snippet)
    assert list(over) == [o.split("=", 1)[0] for o in s["bridge"]["overrides"]]
    assert float(over["dataset.seq_length"]) == result.problem.workload.llm_tokens_per_sample  # not the recipe's
    tc_fields = {f.name for f in dc.fields(TransformerConfig)}
    ddp_fields = {f.name for f in dc.fields(DistributedDataParallelConfig)}
    core, te = s["transformer_config"], s.get("transformer_config_te", {})
    model = {}
    for key, text in over.items():
        section, field = key.split(".", 1)
        value = _value(text)
        if section == "model":
            assert field in tc_fields and field not in PROVIDER_FIELDS, key
            model[field] = value
            if field in core or field in te:
                assert value == {**core, **te}[field], key
        elif section == "ddp":
            assert field in ddp_fields, key
            assert value == s["ddp_config"].get(field, False), key
        elif section == "dataset":  # the recipe's sequence length: the plan's tokens per sample
            assert field == "seq_length" and value == result.problem.workload.llm_tokens_per_sample, key
        elif section == "optimizer":
            assert field == "use_distributed_optimizer" and value == s["ddp_config"].get(field, False)
        else:
            assert section == "train" and field in ("micro_batch_size", "global_batch_size"), key
    # megatron-core accepts the overrides on top of the provider's own fields (the model's experts and router,
    # as our export states them; the TE-checked field aside) and places the plan's chunks
    provider = {k: v for k, v in core.items() if k in PROVIDER_FIELDS}
    built = {**provider, **{k: v for k, v in model.items() if k not in te}}
    _config(built)
    job = PlannedJob.from_result(result)
    check_megatron_layout(job, built, llm_stages(job))
    dp = s["data_parallel_size"]
    assert megatron_ranks(built, job.num_devices, world) == dp
    mbs, gbs = int(over["train.micro_batch_size"]), int(over["train.global_batch_size"])
    assert gbs == mbs * dp * job.microbatches


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_bridge_export_round_trips_through_the_bridge_reader(name, tmp_path):
    result = _planned(name)
    exp = export_result(result, "megatron")
    core = exp.settings["transformer_config"]
    path = tmp_path / "launch.sh"
    path.write_text(exp.snippet)
    assert recipe_format(Path(path), exp.snippet) == "bridge"
    recipe = read_bridge_config(exp.snippet, str(path))
    plan = result.plan
    seg = plan.stages[0]
    assert (recipe.tp, recipe.pp, recipe.cp) == (seg.tp, core["pipeline_model_parallel_size"], seg.cp)
    assert (recipe.ep, recipe.etp or recipe.tp) == (core.get("expert_model_parallel_size", 1),
                                                     core.get("expert_tensor_parallel_size", seg.tp))
    assert recipe.pipeline_layout == core["pipeline_model_parallel_layout"]
    assert recipe.vpp == core.get("virtual_pipeline_model_parallel_size", 1) == result.problem.training.virtual_stages
    assert recipe.num_layers == core["num_layers"]
    assert recipe.gbs == result.problem.workload.global_batch
    assert recipe.mbs * exp.settings["data_parallel_size"] * result.problem.microbatches == recipe.gbs
    assert recipe.zero == (1 if exp.settings["ddp_config"].get("use_distributed_optimizer") else 0)
    assert recipe.sequence_parallel == core["sequence_parallel"]
    granularity = core.get("recompute_granularity")
    want = "none" if granularity is None else "full" if granularity == "full" else \
        setting_of(core.get("recompute_modules") or ["core_attn"])
    assert recipe.recompute == want


def test_bridge_reader_check_can_fail():
    """The round trip sees a changed layout: the reader states what the text says."""
    exp = export_result(_planned("qwen3-vl-30b-a3b"), "megatron")
    layout = exp.settings["transformer_config"]["pipeline_model_parallel_layout"]
    other = exp.snippet.replace(f'"{layout}"', '"Et*24|t*24L"')
    assert read_bridge_config(other).pipeline_layout != layout


def test_hydra_parses_every_override_to_the_value_meant():
    """Hydra's override parser (Bridge's parse_hydra_overrides uses it) on the shell words of the launch."""
    parser_mod = pytest.importorskip("hydra.core.override_parser.overrides_parser",
                                     reason="hydra-core is not installed (Megatron Bridge's override parser)")
    for name, *_ in CASES:
        exp = export_result(_planned(name), "megatron")
        words = [f"{k}={v}" for k, v in _overrides(exp.snippet).items()]
        parsed = parser_mod.OverridesParser.create().parse_overrides(words)
        core = {**exp.settings["transformer_config"], **exp.settings.get("transformer_config_te", {})}
        for ov in parsed:
            section, field = ov.key_or_group.split(".", 1)
            value = ov.value()
            if section == "model" and field in core:
                assert value == core[field] or (isinstance(value, list) and list(value) == list(core[field])), ov
        layout = next(o for o in parsed if o.key_or_group == "model.pipeline_model_parallel_layout")
        assert layout.value() == exp.settings["transformer_config"]["pipeline_model_parallel_layout"]


def test_hydra_values():
    assert hydra_value(None) == "null" and hydra_value(True) == "true" and hydra_value(["core_attn", "mlp"]) == "[core_attn,mlp]"
    assert hydra_value("Et*3|t*4L") == '"Et*3|t*4L"' and hydra_value("alltoall") == "alltoall"


def test_vlm_without_a_bridge_recipe_is_marked_a_template():
    """llava-1.5-7b has no NVIDIA entry point: the flags stay (checked by test_megatron) but say they are a template."""
    exp = export_result(planned("llava-1.5-7b"), "megatron")
    assert exp.expressible and exp.settings["launch"] == "template"
    assert exp.snippet.startswith("# TEMPLATE, not a launch")
    assert any(n.startswith("template:") for n in exp.notes)


@pytest.mark.parametrize("name", ["qwen3-vl-30b-a3b", "glm-4.5v"])
def test_bridge_launch_estimates_as_the_plan(name, tmp_path):
    """export -> estimate: the launch file, read as a Bridge config, states the plan: its cuts, time and memory."""
    from partitioner import estimate
    from partitioner.frameworks.recipe_files import read_recipe_file

    result = _planned(name)
    path = tmp_path / "launch.sh"
    path.write_text(export_result(result, "megatron").text())
    nodes = next(c[1] for c in CASES if c[0] == name)
    est = estimate(name, "dgx-h100", read_recipe_file(path), nodes=nodes)
    planned_stages = [(s.first_layer, s.last_layer, s.memory_bytes) for s in result.evaluation.stages]
    estimated = [(s.first_layer, s.last_layer, s.memory_bytes) for s in est.evaluation.stages]
    assert [e[:2] for e in estimated] == [p[:2] for p in planned_stages]
    assert [e[2] for e in estimated] == pytest.approx([p[2] for p in planned_stages], rel=1e-9)
    assert est.iteration_ms == pytest.approx(result.throughput.iteration_ms, rel=1e-9)


def _fp8_plan(**options):
    return plan_model("qwen2.5-vl-7b-video-64f", "dgx-h100", nodes=1, global_batch=64, microbatches=16, method="greedy",
                      schedule="1f1b", target="megatron", precision="fp8", options=options or None)


def test_fp8_plan_runs_as_bridges_preset_exactly():
    """FP8 goes through Bridge's mixed-precision preset (it overwrites the model's fp8 fields at setup): a plan
    whose FP8 is the tensorwise preset's (fp8 parameters, one BF16 layer at each end) exports with it, and reads
    back as that FP8 recipe."""
    exp = export_result(_fp8_plan(fp8_param_gather=True, fp8_bf16_layers=1), "megatron")
    assert exp.expressible, exp.reasons
    over = _overrides(exp.snippet)
    assert over["mixed_precision"] == "bf16_with_fp8_current_scaling_mixed"
    assert not [k for k in over if "fp8" in k or "bf16" in k]  # the preset's fields, never overridden one by one
    recipe = read_bridge_config(exp.snippet)
    assert (recipe.precision, recipe.fp8_recipe) == ("fp8", "tensorwise")


def test_fp8_plan_other_than_the_preset_says_how_to_replan():
    exp = export_result(_fp8_plan(fp8_param_gather=True, fp8_bf16_layers=0), "megatron")
    assert not exp.expressible
    assert any("bf16_with_fp8_current_scaling_mixed" in r and "--cost-option fp8_bf16_layers=1" in r for r in exp.reasons)
