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

import os
import sys

import pytest

from partitioner.export import export_result
from tests.frameworks.plans import NOT_INSTALLED, PLANS, free_port, planned

pytest.importorskip("torchtitan", reason=NOT_INSTALLED)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

pytestmark = pytest.mark.slow  # the framework tier / subprocess runs: minutes on 2 cores


def _tree(parts: list[list[str]]) -> nn.Module:
    """A model whose top-level children are the exported names; each leaf knows its name."""
    from torchtitan.protocols.module import ModuleDict

    root = nn.Module()
    indexed: dict[str, list[int]] = {}
    for name in (n for part in parts for n in part):
        base, _, idx = name.partition(".")
        if idx:
            indexed.setdefault(base, []).append(int(idx))
        else:
            leaf = nn.Linear(1, 1)
            leaf.tt_name = name
            root.add_module(name, leaf)
    for base, idxs in indexed.items():
        assert sorted(idxs) == list(range(len(idxs))), f"{base}: entries {sorted(idxs)} are not 0..n-1"
        leaves = []
        for i in range(len(idxs)):
            leaf = nn.Linear(1, 1)
            leaf.tt_name = f"{base}.{i}"
            leaves.append(leaf)
        container = ModuleDict({str(i): m for i, m in enumerate(leaves)}) if base == "layers" else nn.ModuleList(leaves)
        root.add_module(base, container)
    return root


def _kept(chunk: nn.Module) -> list[str]:
    return [m.tt_name for m in chunk.modules() if hasattr(m, "tt_name")]


@pytest.fixture(scope="module")
def pp_mesh():
    from torch.distributed.device_mesh import init_device_mesh

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,), mesh_dim_names=("pp",))
    finally:
        dist.destroy_process_group()


def _parse(args: list[str]):
    from torchtitan.config import ConfigManager

    return ConfigManager().parse_args(args)


def _check_config(cfg, settings: dict, m: int) -> None:
    from torchtitan.distributed.activation_checkpoint import FullAC
    from torchtitan.distributed.parallel_dims import ParallelDims

    want = settings["config"]
    for section, values in want.items():
        for key, value in values.items():
            assert getattr(getattr(cfg, section), key) == value, f"{section}.{key}"
    par, tr = cfg.parallelism, cfg.training
    # torchtitan's Trainer: accumulation steps x pipeline microbatches (1 without PP: the microbatch size is ignored)
    batch_degree = par.data_parallel_replicate_degree * par.data_parallel_shard_degree
    assert tr.global_batch_size % (tr.local_batch_size * batch_degree) == 0
    steps = tr.global_batch_size // (tr.local_batch_size * batch_degree)
    if par.pipeline_parallel_degree > 1:
        assert tr.local_batch_size % par.pipeline_parallel_microbatch_size == 0
        per_step = tr.local_batch_size // par.pipeline_parallel_microbatch_size
    else:
        per_step = 1
    assert steps * per_step == m
    ac = settings["activation_checkpoint"]
    assert (cfg.activation_checkpoint is None) if ac == "none" else isinstance(cfg.activation_checkpoint, FullAC.Config)
    world = (par.pipeline_parallel_degree * batch_degree * par.context_parallel_degree * par.tensor_parallel_degree)
    dims = ParallelDims.from_config(par, world)  # torchtitan's own validation of the mesh degrees
    assert (dims.dp_replicate * dims.dp_shard, dims.tp, dims.pp) == (batch_degree, par.tensor_parallel_degree,
                                                                      par.pipeline_parallel_degree)


@pytest.mark.parametrize("case", [c.id for c in PLANS])
def test_torchtitan_export_parses_and_splits_or_says_why(case, pp_mesh, tmp_path, monkeypatch):
    from torchtitan.distributed.pipeline_parallel import _pipeline_module_split

    result = planned(case)
    exp = export_result(result, "torchtitan")
    if not exp.expressible:
        assert exp.reasons and "module_fqns_per_model_part" not in exp.settings
        return
    m = result.problem.microbatches
    # 1. torchtitan's CLI: the exported overrides on torchtitan's own llama3 debug config
    overrides = [tok for line in exp.settings["overrides"] for tok in line.split(" ")]
    _check_config(_parse(["--module", "llama3", "--config", "llama3_debugmodel", *overrides]), exp.settings, m)
    # 2. the exported config_registry function, as a package torchtitan imports by --module
    pkg = tmp_path / "planned_job"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "config_registry.py").write_text(exp.snippet.split("# or, as a config_registry function:\n", 1)[1])
    monkeypatch.syspath_prepend(str(tmp_path))
    _check_config(_parse(["--module", "planned_job", "--config", "planned"]), exp.settings, m)
    sys.modules.pop("planned_job.config_registry", None)
    sys.modules.pop("planned_job", None)
    # 3. the schedule: torch's lookup knows the exported name; with v parts per rank the class is a multi-stage
    # (looped) one and torchtitan places part c on rank c mod P, as the plan runs chunk c on group c mod P
    _check_schedule(result, exp.settings)
    # 4. torchtitan's pipeline split on a module tree with the exported names
    parts = exp.settings["module_fqns_per_model_part"]
    stages, chunks = _pipeline_module_split(_tree(parts), pp_mesh, exp.settings["config"]["parallelism"]["pipeline_parallel_schedule"],
                                            torch.device("cpu"), parts)
    assert [st.stage_index for st in stages] == list(range(len(parts)))
    for part, chunk in zip(parts, chunks):
        assert sorted(_kept(chunk)) == sorted(part)
    assert sum(len(_kept(c)) for c in chunks) == len({n for p in parts for n in p})


_CLASSES = {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe", "interleaved": "ScheduleInterleaved1F1B"}


def _check_schedule(result, settings: dict) -> None:
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
    from torchtitan.distributed.pipeline_parallel import _get_pp_rank_to_stage_indices_mapping

    training = result.problem.training
    v = training.virtual_stages if training.schedule == "interleaved" else 1
    par = settings["config"]["parallelism"]
    name, P = par["pipeline_parallel_schedule"], par["pipeline_parallel_degree"]
    cls = get_schedule_class(name)
    assert cls.__name__ == _CLASSES[training.schedule]
    assert issubclass(cls, PipelineScheduleMulti) == (v > 1)
    n = len(settings["module_fqns_per_model_part"])
    assert n == P * v == len(result.plan.stages)
    ids = result.plan.device_ids()
    for rank in range(P):
        mine = _get_pp_rank_to_stage_indices_mapping(rank, P, name, n)
        assert len(mine) == v and all(c % P == rank and ids[c] == ids[rank] for c in mine)


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
    from partitioner.export.torchtitan import SCHEDULES

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

    assert "-m torchtitan.train" in export_result(planned("pi0"), "torchtitan").snippet
    assert importlib.util.find_spec("torchtitan.train") is not None


def test_one_stage_plan_runs_m_microbatches_through_gradient_accumulation():
    """Issue 27's llava case shape: pp 1, dp 32, m 8 of 4 samples -- 8 accumulation steps of 4, not one of 32."""
    from types import SimpleNamespace

    from partitioner.export import export_plan

    result = planned("llava-1.5-7b")
    hints = result.to_dict()["export_hints"]["layers"]
    n = len(hints)
    plan = SimpleNamespace(stages=[SimpleNamespace(first_layer=0, last_layer=n - 1, devices=32, dp=32, tp=1, variant="zero1",
                                                   configs=())], device_ids=lambda: [tuple(range(32))])
    exp = export_plan(plan, hints, "torchtitan", global_batch=1024, microbatches=8)
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

    from partitioner.export import export_plan
    from partitioner.export.common import MoeHints

    result = planned("llava-1.5-7b")
    hints = result.to_dict()["export_hints"]["layers"]
    stages = [SimpleNamespace(first_layer=s.first_layer, last_layer=s.last_layer, devices=8, dp=2, tp=2, cp=2, ep=4, etp=1,
                              variant="zero1", configs=()) for s in result.plan.stages]
    plan = SimpleNamespace(stages=stages, device_ids=result.plan.device_ids)
    exp = export_plan(plan, hints, "torchtitan", global_batch=512, microbatches=64, moe=MoeHints(16, 2, 256))
    assert exp.expressible, exp.reasons
    overrides = [tok for line in exp.settings["overrides"] for tok in line.split(" ")]
    cfg = _parse(["--module", "llama3", "--config", "llama3_debugmodel", *overrides])
    _check_config(cfg, exp.settings, 64)
    assert (cfg.parallelism.context_parallel_degree, cfg.parallelism.expert_parallel_degree) == (2, 4)
