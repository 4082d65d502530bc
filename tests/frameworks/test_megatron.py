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

import pytest

from benchmarks.framework_checks import PlannedJob, check_megatron, close_fake_world
from benchmarks.framework_checks import fake_world as _fake_world
from benchmarks.framework_checks import megatron_config as _config
from benchmarks.framework_checks import megatron_ranks as _ranks
from partitioner.frameworks.export import ExportContext, MoeHints, export_plan, export_result, layer_hints
from tests.frameworks.plans import NOT_INSTALLED, PLANS, planned

pytest.importorskip("megatron.core", reason=NOT_INSTALLED)


pytestmark = pytest.mark.slow  # the framework tier / subprocess runs: minutes on 2 cores


@pytest.fixture(scope="module")
def fake_world():
    """A fake process group (torch's ``fake`` backend) whose world size each test sets: Megatron builds its groups on it."""
    yield _fake_world
    close_fake_world()


@pytest.mark.parametrize("case", [c.id for c in PLANS])
def test_megatron_export_runs_in_megatron_core_or_says_why(case, fake_world):
    result = planned(case)
    exp = export_result(result, "megatron")
    if not exp.expressible:
        assert exp.reasons and all(r.startswith(("Megatron-LM:", "MIMO:", "this plan")) for r in exp.reasons)
        return
    # benchmarks/framework_checks.py: TransformerConfig + layout, DDP config, every flag, the batch's m, the rank
    # generator's dp and the knobs (Megatron-LM path); the language module's layout (MIMO path)
    path = check_megatron(PlannedJob.from_result(result), exp, fake_world)
    assert path == exp.settings["path"]
    if path != "megatron-lm":
        _bridge_finalize(exp.settings["mimo"], result.problem.cluster.num_devices)


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
    hints = layer_hints(result.to_dict()["export_hints"]["layers"])
    world = result.problem.cluster.num_devices
    plan = _moe_plan(result, dp=2, tp=2, cp=2, ep=4, etp=1)
    exp = export_plan(plan, hints, "megatron", ExportContext(global_batch=512, microbatches=64, moe=MOE))
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
