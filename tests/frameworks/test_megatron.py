"""Megatron exports through megatron-core's own code: ``TransformerConfig`` and ``PipelineParallelLayerLayout``.

For every plan of the tier whose Megatron export is expressible:

* Megatron-LM path: ``TransformerConfig(**settings["transformer_config"])``
  (its ``__post_init__`` parses the layout and runs
  ``validate_layer_layout`` against ``num_layers`` and the pipeline size;
  for an interleaved plan it checks ``virtual_pipeline_model_parallel_size``
  against the layout's stages / P); the layout has v model chunks per
  pipeline rank, and per (rank, virtual stage) its decoder counts
  (``get_num_layers_to_build``) and layer offsets equal the plan's chunk
  c = vp·P + rank; every emitted flag is a
  ``TransformerConfig`` field or one of Megatron-LM's batch flags, and the
  batch flags give the plan's m.
* MIMO path: the language module's layout through ``TransformerConfig``;
  the grid through Megatron Bridge's ``MimoParallelismConfig.finalize``
  where Bridge is installable.

A plan that is not expressible must say why.
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from partitioner.export import export_result

from tests.frameworks.plans import NOT_INSTALLED, PLANS, planned

pytest.importorskip("megatron.core", reason=NOT_INSTALLED)
import torch  # noqa: E402
from megatron.core.transformer import TransformerConfig  # noqa: E402
from megatron.core.transformer.enums import LayerType  # noqa: E402

_BATCH_FLAGS = {"micro_batch_size", "global_batch_size"}


def _decoder_counts(result, stages):
    hints = result.to_dict()["export_hints"]["layers"]
    return [sum(hints[i]["role"] == "decoder" for i in range(s.first_layer, s.last_layer + 1)) for s in stages]


def _config(core: dict) -> TransformerConfig:
    """``TransformerConfig`` as Megatron-LM builds it from the flags (``--bf16`` sets ``pipeline_dtype``)."""
    tp = core["tensor_model_parallel_size"]
    dtype = torch.bfloat16 if core.get("bf16") else torch.float32
    return TransformerConfig(hidden_size=64 * tp, num_attention_heads=4 * tp, pipeline_dtype=dtype, **core)


def _check_layout(result, core: dict, llm_stages) -> None:
    """megatron-core's layout: per (pipeline rank, virtual stage) the plan's chunk c = vp·P + rank, layer counts and offsets.

    Without interleaving v = 1 and chunk c is stage c. Megatron reads the virtual stage
    only when its parallel state has a virtual world size: set it (as Megatron-LM's
    initialisation does from virtual_pipeline_model_parallel_size) while checking.
    """
    from megatron.core import parallel_state

    training = result.problem.training
    v = training.virtual_stages if training.schedule == "interleaved" else 1
    cfg = _config(core)
    layout = cfg.pipeline_model_parallel_layout
    P = core["pipeline_model_parallel_size"]
    assert layout.virtual_pipeline_model_parallel_size == v
    assert cfg.virtual_pipeline_model_parallel_size == (v if v > 1 else None)
    assert len(layout.layout) == P and all(len(chunks) == v for chunks in layout.layout)  # v model chunks per rank
    counts = _decoder_counts(result, llm_stages)
    assert len(counts) == P * v
    parallel_state.set_virtual_pipeline_model_parallel_world_size(v if v > 1 else None)
    try:
        for c, want in enumerate(counts):
            rank, vp = c % P, c // P
            assert layout.get_num_layers_to_build(LayerType.decoder, vp_stage=vp, pp_rank=rank) == want, f"chunk {c}"
            assert layout.get_layer_offset(LayerType.decoder, vp_stage=vp, pp_rank=rank) == sum(counts[:c]), f"chunk {c}"
    finally:
        parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    assert LayerType.embedding in layout.layout[0][0] and LayerType.loss in layout.layout[-1][-1]
    if v > 1:  # the plan's chunk c runs on the GPUs of group c mod P: Megatron's rank c mod P
        ids = result.plan.device_ids()
        assert all(ids[c] == ids[c % P] for c in range(len(ids)))


@pytest.mark.parametrize("case", [c.id for c in PLANS])
def test_megatron_export_runs_in_megatron_core_or_says_why(case):
    result = planned(case)
    exp = export_result(result, "megatron")
    if not exp.expressible:
        assert exp.reasons and all(r.startswith(("Megatron-LM:", "MIMO:", "this plan")) for r in exp.reasons)
        return
    stages = result.plan.stages
    hints = result.to_dict()["export_hints"]["layers"]
    llm = [s for s in stages if any(hints[i]["role"] in ("embedding", "decoder", "loss") for i in s.layers)]
    if exp.settings["path"] == "megatron-lm":
        core = exp.settings["transformer_config"]
        _check_layout(result, core, llm)
        fields = {f.name for f in dataclasses.fields(TransformerConfig)}
        flags = dict(re.findall(r"--([a-z0-9-]+)(?: \"?([^\s\"]+)\"?)?", exp.snippet))
        for flag in flags:
            dest = flag.replace("-", "_")
            assert dest in fields or dest in _BATCH_FLAGS, f"--{flag} is neither a TransformerConfig field nor a batch flag"
            if dest in core:
                want = core[dest]
                assert (flags[flag] == str(want)) if not isinstance(want, bool) else want, flag
        assert not any(f.startswith("encoder") for f in flags)
        # Megatron-LM's validate_args refuses a virtual-stage flag together with the layout (vpp comes from the layout)
        assert not any(f.startswith(("num-virtual-stages", "num-layers-per-virtual")) for f in flags)
        dp = exp.settings["data_parallel_size"]
        mbs, gbs = int(flags["micro-batch-size"]), int(flags["global-batch-size"])
        assert gbs % (mbs * dp) == 0 and gbs // (mbs * dp) == result.problem.microbatches  # Megatron-LM's m
        assert core["tensor_model_parallel_size"] * core["pipeline_model_parallel_size"] * dp == result.problem.cluster.num_devices
    else:
        grid = exp.settings["mimo"]
        _check_layout(result, exp.settings["llm_transformer_config"], llm)
        _bridge_finalize(grid, result.problem.cluster.num_devices)


def _bridge_finalize(grid: dict, world: int) -> None:
    mimo = pytest.importorskip(
        "megatron.bridge.models.mimo.mimo_config",
        reason="Megatron Bridge's MIMO config is not installable here (megatron-bridge 0.3.1, the newest for Python 3.11, "
        "has no MIMO; newer releases need transformer-engine CUDA wheels)",
    )
    modules = {name: mimo.ModuleParallelismConfig(**entry) for name, entry in grid["module_parallelisms"].items()}
    cfg = mimo.MimoParallelismConfig(llm_module_name=grid["llm_module_name"], module_parallelisms=modules,
                                     deployment_mode=grid["deployment_mode"])
    cfg.finalize(world)


def test_megatron_refuses_schedules_it_lacks():
    """A plan kept under a schedule Megatron-LM does not run is declared not expressible, never exported as 1F1B."""
    for case in PLANS:
        result = planned(case.id)
        if result.problem.training.schedule in ("zb-h1", "gpipe"):
            exp = export_result(result, "megatron")
            assert not exp.expressible and any("is not expressible" in r for r in exp.reasons)


def test_layout_vpp_conflict_is_refused():
    """The check can fail: megatron-core refuses a virtual size the layout does not have."""
    with pytest.raises(AssertionError, match="conflicts"):
        _config({"num_layers": 8, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2,
                 "virtual_pipeline_model_parallel_size": 2, "pipeline_model_parallel_layout": "Et*4|t*4L", "bf16": True})


def test_layout_validator_rejects_a_layout_that_misses_the_plan():
    """The check can fail: megatron-core refuses a layout whose decoder count differs from num_layers."""
    with pytest.raises(AssertionError, match="num_layers"):
        _config({"num_layers": 8, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 2,
                 "pipeline_model_parallel_layout": "Et*4|t*3L", "bf16": True})
