"""torchtitan exports through torchtitan 0.3's own code: its config manager and its pipeline split.

For every plan of the tier whose torchtitan export is expressible:

* ``ConfigManager.parse_args`` (torchtitan's CLI: ``--module``/``--config``
  plus ``--section.key`` overrides) on the exported overrides, starting
  from torchtitan's own ``llama3`` debug config, and on the exported
  ``config_registry`` function written as a package: the parsed
  ``Trainer.Config`` holds the plan's pipeline degree, mesh, stage FQNs
  and a batch whose microbatch count is the plan's m (torchtitan's
  ``__post_init__`` checks run too).
* ``_pipeline_module_split`` (what ``pipeline_llm`` calls) on a module tree
  built from the exported names — top-level modules, ``layers`` a
  torchtitan ``ModuleDict``, other indexed names ``nn.ModuleList`` — in a
  one-rank gloo group on localhost (all P stages built on rank 0): each
  stage keeps exactly its planned modules, and together they keep every
  module once.

A plan that is not expressible must say why.
"""
from __future__ import annotations

import pytest

from benchmarks.framework_checks import PlannedJob, check_torchtitan, one_rank_pp_mesh
from benchmarks.framework_checks import check_torchtitan_config as _check_config
from benchmarks.framework_checks import torchtitan_parse as _parse
from partitioner.frameworks.export import export_result
from tests.frameworks.plans import NOT_INSTALLED, PLANS, planned

pytest.importorskip("torchtitan", reason=NOT_INSTALLED)
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

pytestmark = pytest.mark.slow  # the framework tier / subprocess runs: minutes on 2 cores


@pytest.fixture(scope="module")
def pp_mesh():
    mesh = one_rank_pp_mesh()
    try:
        yield mesh
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("case", [c.id for c in PLANS])
def test_torchtitan_export_parses_and_splits_or_says_why(case, pp_mesh):
    result = planned(case)
    exp = export_result(result, "torchtitan")
    if not exp.expressible:
        assert exp.reasons and "module_fqns_per_model_part" not in exp.settings
        return
    # benchmarks/framework_checks.py: 1. torchtitan's CLI on the exported overrides (on its llama3 debug config);
    # 2. the exported config_registry function, as a package torchtitan imports by --module; 3. the schedule class and
    # torchtitan's rank-to-part mapping (part c on rank c mod P); 4. torchtitan's pipeline split on a module tree
    # with the exported names
    check_torchtitan(PlannedJob.from_result(result), exp, pp_mesh)


def test_torchtitan_refuses_zb_h1_and_has_no_zb_h1_class():
    """ZB-H1 is said plainly: torch's zero-bubble classes are other schedules (interleaved ZB-1P, V-shaped)."""
    from torch.distributed.pipelining.schedules import (
        PipelineScheduleMulti,
        ScheduleInterleavedZeroBubble,
        ScheduleZBVZeroBubble,
        get_schedule_class,
    )

    assert issubclass(ScheduleInterleavedZeroBubble, PipelineScheduleMulti) and issubclass(ScheduleZBVZeroBubble, PipelineScheduleMulti)
    with pytest.raises(ValueError):
        get_schedule_class("ZBH1")
    from partitioner.frameworks.torchtitan import SCHEDULE_NAMES as SCHEDULES

    assert "zb-h1" not in SCHEDULES
    for name in SCHEDULES.values():
        get_schedule_class(name)


def test_split_drops_nested_hugging_face_names(pp_mesh):
    """Why the export renames modules: torchtitan's split keeps nothing under a nested name."""
    from torchtitan.distributed.pipeline_parallel import _split_module

    root = nn.Module()
    root.language_model = nn.Module()
    root.language_model.layers = nn.ModuleList([nn.Linear(1, 1) for _ in range(2)])
    chunk = _split_module(root, ["language_model.layers.0"])
    assert chunk.language_model is None


def test_config_manager_rejects_an_unknown_override():
    """The check can fail: torchtitan's CLI refuses options it does not know (the 0.2 TOML flag among them)."""
    with pytest.raises(SystemExit):
        _parse(["--module", "llama3", "--config", "llama3_debugmodel", "--job.config_file", "x.toml"])


def test_snippet_launches_a_module_torchtitan_has():
    import importlib.util

    assert "-m torchtitan.train" in export_result(planned("pi0-torchtitan"), "torchtitan").snippet
    assert importlib.util.find_spec("torchtitan.train") is not None


def test_one_stage_plan_runs_m_microbatches_through_gradient_accumulation():
    """Issue 27's llava case shape: pp 1, dp 32, m 8 of 4 samples -- 8 accumulation steps of 4, not one of 32."""
    from types import SimpleNamespace

    from partitioner.frameworks.export import ExportContext, export_plan, layer_hints

    result = planned("llava-1.5-7b")
    hints = layer_hints(result.to_dict()["export_hints"]["layers"])
    n = len(hints)
    plan = SimpleNamespace(stages=[SimpleNamespace(first_layer=0, last_layer=n - 1, devices=32, dp=32, tp=1, variant="zero1",
                                                   configs=())], device_ids=lambda: [tuple(range(32))])
    exp = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=1024, microbatches=8))
    assert exp.expressible, exp.reasons
    overrides = [tok for line in exp.settings["overrides"] for tok in line.split(" ")]
    cfg = _parse(["--module", "llama3", "--config", "llama3_debugmodel", *overrides])
    _check_config(cfg, exp.settings, 8)
    assert cfg.training.local_batch_size == 4  # one microbatch per replica; it was 32 (= 8 x 4)


def test_parallel_dims_refuses_degrees_that_miss_the_world():
    """The check can fail: torchtitan's ParallelDims refuses degrees whose product is not the world size."""
    from torchtitan.distributed.parallel_dims import ParallelDims

    with pytest.raises(AssertionError, match="Invalid parallel dims"):
        ParallelDims(dp_replicate=1, dp_shard=3, cp=2, tp=2, pp=2, ep=1, world_size=16)


def test_5d_export_parses_with_cp_and_ep():
    """cp and ep reach torchtitan's config and ParallelDims (ep borrows dp_shard x cp x tp ranks)."""
    from types import SimpleNamespace

    from partitioner.frameworks.export import ExportContext, MoeHints, export_plan, layer_hints

    result = planned("llava-1.5-7b")
    hints = layer_hints(result.to_dict()["export_hints"]["layers"])
    stages = [SimpleNamespace(first_layer=s.first_layer, last_layer=s.last_layer, devices=8, dp=2, tp=2, cp=2, ep=4, etp=1,
                              variant="zero1", configs=()) for s in result.plan.stages]
    plan = SimpleNamespace(stages=stages, device_ids=result.plan.device_ids)
    exp = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=512, microbatches=64, moe=MoeHints(16, 2, 256)))
    assert exp.expressible, exp.reasons
    overrides = [tok for line in exp.settings["overrides"] for tok in line.split(" ")]
    cfg = _parse(["--module", "llama3", "--config", "llama3_debugmodel", *overrides])
    _check_config(cfg, exp.settings, 64)
    assert (cfg.parallelism.context_parallel_degree, cfg.parallelism.expert_parallel_degree) == (2, 4)
