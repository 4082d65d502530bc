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

Knobs and 5D axes (issue 27): every flag is a ``TransformerConfig`` field
(``--num-experts`` is ``num_moe_experts``), a ``DistributedDataParallelConfig``
field (the optimizer sharding) or a batch flag; the DDP config is built
from the export's ``ddp_config``; and ``parallel_state.initialize_model_parallel``
-- Megatron's two rank generators, tp-cp-ep-dp-pp -- runs on a fake
process group of the plan's world size with the exported tp/pp/cp/ep/etp,
giving the plan's data-parallel size. A MoE plan with cp and ep (built on a
tier plan's layers) goes through the same code; and the rank generator
refuses an ep x etp that does not divide the world's tp x cp x dp.

A plan that is not expressible must say why.
"""
from __future__ import annotations

import dataclasses
import re

import pytest

from partitioner.export import export_plan, export_result
from partitioner.export.common import MoeHints
from tests.frameworks.plans import NOT_INSTALLED, PLANS, planned

pytest.importorskip("megatron.core", reason=NOT_INSTALLED)
import torch  # noqa: E402
from megatron.core.transformer import TransformerConfig  # noqa: E402
from megatron.core.transformer.enums import LayerType  # noqa: E402

_BATCH_FLAGS = {"micro_batch_size", "global_batch_size"}
_FLAG_FIELDS = {"num_experts": "num_moe_experts"}  # Megatron-LM flags whose TransformerConfig field has another name


pytestmark = pytest.mark.slow  # the framework tier / subprocess runs: minutes on 2 cores


@pytest.fixture(scope="module")
def fake_world():
    """A fake process group (torch's ``fake`` backend) whose world size each test sets: Megatron builds its groups on it."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def init(world: int) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)

    yield init
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def _ranks(core: dict, world: int, init) -> int:
    """Megatron's ``initialize_model_parallel`` (order tp-cp-ep-dp-pp) on a fake world: its data-parallel size."""
    from megatron.core import parallel_state

    init(world)
    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=core["tensor_model_parallel_size"],
        pipeline_model_parallel_size=core["pipeline_model_parallel_size"],
        context_parallel_size=core.get("context_parallel_size", 1),
        expert_model_parallel_size=core.get("expert_model_parallel_size", 1),
        expert_tensor_parallel_size=core.get("expert_tensor_parallel_size"),
        create_gloo_process_groups=False, order="tp-cp-ep-dp-pp")
    try:
        return parallel_state.get_data_parallel_world_size()
    finally:
        parallel_state.destroy_model_parallel()


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
def test_megatron_export_runs_in_megatron_core_or_says_why(case, fake_world):
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
        from megatron.core.distributed import DistributedDataParallelConfig

        fields = {f.name for f in dataclasses.fields(TransformerConfig)}
        ddp_fields = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
        DistributedDataParallelConfig(**exp.settings["ddp_config"])
        flags = dict(re.findall(r"--([a-z0-9-]+)(?: \"?([^\s\"]+)\"?)?", exp.snippet))
        for flag in flags:
            dest = _FLAG_FIELDS.get(flag.replace("-", "_"), flag.replace("-", "_"))
            assert dest in fields or dest in ddp_fields or dest in _BATCH_FLAGS, \
                f"--{flag} is neither a TransformerConfig nor a DDP-config field nor a batch flag"
            if dest in exp.settings["ddp_config"]:
                assert exp.settings["ddp_config"][dest] is True or flags[flag] == str(exp.settings["ddp_config"][dest])
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
        assert _ranks(core, result.problem.cluster.num_devices, fake_world) == dp
        # the plan's knobs are set, never left to a note
        knobs = [g for st in result.to_dict()["knobs"] for g in st["segments"]]
        assert core.get("recompute_granularity", "none") in {g["recompute"] for g in knobs}
        assert exp.settings["ddp_config"].get("use_distributed_optimizer", False) == any(g["zero"] == 1 and g["dp"] > 1 for g in knobs)
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


MOE = MoeHints(num_experts=16, top_k=2, ffn_hidden=256)


def _moe_plan(result, dp, tp, cp, ep, etp):
    """The tier plan's cuts with every stage in one v3 config (cp, ep, etp as format v3's stages carry them)."""
    from types import SimpleNamespace

    stages = [SimpleNamespace(first_layer=s.first_layer, last_layer=s.last_layer, devices=dp * tp * cp, dp=dp, tp=tp, cp=cp,
                              ep=ep, etp=etp, variant="zero1", configs=()) for s in result.plan.stages]
    ids = result.plan.device_ids()
    return SimpleNamespace(stages=stages, device_ids=lambda: ids)


def test_moe_5d_export_through_transformer_config_and_rank_generators(fake_world):
    """A MoE plan with tp 2, cp 2, ep 4 on llava's cuts: megatron-core takes its fields and builds its groups."""
    result = planned("llava-1.5-7b")
    hints = result.to_dict()["export_hints"]["layers"]
    world = result.problem.cluster.num_devices
    plan = _moe_plan(result, dp=2, tp=2, cp=2, ep=4, etp=1)
    exp = export_plan(plan, hints, "megatron", global_batch=512, microbatches=64, moe=MOE)
    assert exp.expressible, exp.reasons
    core = exp.settings["transformer_config"]
    cfg = _config(core)
    assert (cfg.num_moe_experts, cfg.moe_router_topk, cfg.expert_model_parallel_size, cfg.context_parallel_size) == (16, 2, 4, 2)
    assert cfg.sequence_parallel and cfg.moe_token_dispatcher_type == "alltoall"
    assert _ranks(core, world, fake_world) == exp.settings["data_parallel_size"] == 2
    from megatron.core import parallel_state

    fake_world(world)
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2, pipeline_model_parallel_size=2, context_parallel_size=2,
                                             expert_model_parallel_size=4, expert_tensor_parallel_size=1,
                                             create_gloo_process_groups=False, order="tp-cp-ep-dp-pp")
    try:  # expert data parallelism = tp x cp x dp / (ep x etp), as format v3 defines it
        assert parallel_state.get_expert_data_parallel_world_size() == 2 * 2 * 2 // 4
    finally:
        parallel_state.destroy_model_parallel()


def test_rank_generator_refuses_ep_etp_not_dividing_tp_cp_dp(fake_world):
    """The check can fail: ep 3 x etp 1 does not divide tp 2 x cp 1 x dp 4 of a 16-GPU, pp 2 world."""
    core = {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "expert_model_parallel_size": 3,
            "expert_tensor_parallel_size": 1}
    with pytest.raises(RuntimeError, match="not divisible by expert_tensor_model_pipeline_parallel"):
        _ranks(core, 16, fake_world)


def test_transformer_config_refuses_expert_parallelism_without_experts():
    """The check can fail: megatron-core's TransformerConfig validates the MoE fields (why the export writes --num-experts)."""
    with pytest.raises(ValueError, match="num_moe_experts"):
        _config({"num_layers": 4, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1,
                 "expert_model_parallel_size": 4, "bf16": True})
