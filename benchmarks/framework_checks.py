"""An export run through the framework's own code: the checks the framework tier and ``benchmarks.targets`` share.

The framework tier (``tests/frameworks/``) and the per-target benchmark
(:mod:`benchmarks.targets`) check an export the same way, with these
functions; each raises ``AssertionError`` (or the framework's own error)
naming what does not hold:

* :func:`check_megatron`: megatron-core's ``TransformerConfig`` on the
  exported fields (it parses and validates ``pipeline_model_parallel_layout``),
  per (pipeline rank, virtual stage) its decoder counts and offsets, every
  flag a ``TransformerConfig`` / ``DistributedDataParallelConfig`` field or a
  batch flag, the batch giving m, and ``initialize_model_parallel`` -- the
  rank generator -- on a fake process group of the plan's world size
  (:func:`fake_world`) giving the export's data-parallel size;
* :func:`check_torchtitan`: torchtitan's ``ConfigManager.parse_args`` on the
  exported overrides and on the exported ``config_registry`` function, the
  ``Trainer``'s batch arithmetic giving m, ``ParallelDims`` validating the
  mesh, the schedule class and its rank-to-stage mapping, and -- given a
  one-rank ``pp`` mesh -- ``_pipeline_module_split`` keeping each stage's
  modules;
* :func:`check_deepspeed_config`: ``DeepSpeedConfig`` validating the batch
  triple and reading the ZeRO stage; the activation-checkpoint intervals.

A :class:`PlannedJob` is what they read of a plan: from a ``plan --json``
document (:meth:`PlannedJob.from_doc`) or a :class:`~partitioner.planning.ModelPlan`
(:meth:`PlannedJob.from_result`). The frameworks are imported inside the
functions (heavy optional dependencies: the ``frameworks`` extra).

Running ``python -m benchmarks.framework_checks PLAN.json EXPORT.json TARGET``
checks one export and prints one JSON line ``{"ok", "checked", "error"}``.
"""
from __future__ import annotations

import json
import os
import re
import socket
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from partitioner.plan import Plan
from partitioner.presets import load_cluster

__all__ = ["PlannedJob", "fake_world", "close_fake_world", "megatron_config", "megatron_ranks", "list_pattern", "check_megatron_layout",
           "check_megatron", "check_megatron_fp8", "check_torchtitan_converters", "torchtitan_parse", "check_torchtitan_config", "check_torchtitan_schedule", "module_tree",
           "kept_names", "check_torchtitan_split", "check_torchtitan", "one_rank_pp_mesh", "deepspeed_config",
           "check_deepspeed_config", "check_export", "check_job", "verdict", "free_port", "main"]

BATCH_FLAGS = {"micro_batch_size", "global_batch_size"}
# Megatron-LM flags whose TransformerConfig field has another name (``fp8``: argparse_meta arg_names ["--fp8-format"])
FLAG_FIELDS = {"num_experts": "num_moe_experts", "fp8_format": "fp8"}
TORCHTITAN_CLASSES = {"1f1b": "Schedule1F1B", "gpipe": "ScheduleGPipe", "interleaved": "ScheduleInterleaved1F1B"}


@dataclass(frozen=True)
class PlannedJob:
    """What the checks read of a plan: its stages, schedule, m, world size, layer hints, knobs and FP8 precision."""

    plan: Plan
    schedule: str
    virtual_stages: int
    microbatches: int
    num_devices: int
    hints: Sequence[Mapping[str, Any]]
    knobs: Sequence[Mapping[str, Any]]
    precision: Mapping[str, Any] | None = None  # export_hints["precision"] of an FP8 plan

    @property
    def v(self) -> int:
        """Model chunks per pipeline rank (1 unless interleaved)."""
        return self.virtual_stages if self.schedule == "interleaved" else 1

    @classmethod
    def from_result(cls, result: Any) -> "PlannedJob":
        """From a :class:`~partitioner.planning.ModelPlan` (its problem carries the schedule and the world)."""
        doc = result.to_dict()
        training = result.problem.training
        return cls(result.plan, training.schedule, training.virtual_stages, result.problem.microbatches,
                   result.problem.cluster.num_devices, doc["export_hints"]["layers"], doc["knobs"],
                   doc["export_hints"].get("precision"))

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> "PlannedJob":
        """From a ``partitioner plan --json`` document (the world: its nodes x the cluster preset's GPUs per node)."""
        sched = doc.get("schedule") or {}
        world = int(doc["nodes"]) * load_cluster(str(doc["cluster"])).gpus_per_node
        return cls(Plan.from_dict(dict(doc)), str(sched.get("schedule", "1f1b")), int(sched.get("virtual_stages") or 1),
                   int(doc["microbatches"]), world, doc["export_hints"]["layers"], doc.get("knobs") or [],
                   doc["export_hints"].get("precision"))


def free_port() -> int:
    """A free TCP port on localhost (for a gloo rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- Megatron -----------------------------------------------------------------------------------------------------


def fake_world(world: int) -> None:
    """A fake process group (torch's ``fake`` backend) of ``world`` ranks: Megatron builds its groups on it."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)


def close_fake_world() -> None:
    """Megatron's parallel state and the fake process group, torn down."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def megatron_ranks(core: Mapping[str, Any], world: int, init: Callable[[int], None] = fake_world) -> int:
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


def megatron_config(core: Mapping[str, Any]) -> Any:
    """``TransformerConfig`` as Megatron-LM builds it from the flags (``--bf16`` sets ``pipeline_dtype``;
    ``--multi-latent-attention``: ``MLATransformerConfig``).

    An FP8 MoE config asks megatron-core for Transformer Engine's version
    (MoE FP8 needs TE >= 1.7, FP8 grouped GEMMs >= 1.11); TE is a CUDA
    package absent from the CPU tier, so the check answers that probe as an
    installed recent TE would, and every other validation runs as is.
    """
    import torch
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig
    from megatron.core.transformer import transformer_config as tc

    config = MLATransformerConfig if core.get("multi_latent_attention") else TransformerConfig  # as Megatron-LM picks
    tp = core["tensor_model_parallel_size"]
    dtype = torch.bfloat16 if core.get("bf16") else torch.float32
    probe = tc.is_te_min_version
    if core.get("fp8") and core.get("num_moe_experts"):
        tc.is_te_min_version = lambda *a, **k: True  # type: ignore[attr-defined]
    try:
        return config(hidden_size=64 * tp, num_attention_heads=4 * tp, pipeline_dtype=dtype, **core)
    finally:
        tc.is_te_min_version = probe  # type: ignore[attr-defined]


def _decoder_counts(job: PlannedJob, stages: Sequence[Any], role: str = "decoder") -> list[int]:
    return [sum(job.hints[i]["role"] == role for i in range(s.first_layer, s.last_layer + 1)) for s in stages]


def llm_stages(job: PlannedJob) -> list[Any]:
    """The plan's stages that hold a language-model layer (embedding, decoder, MTP module or loss)."""
    return [s for s in job.plan.stages
            if any(job.hints[i]["role"] in ("embedding", "decoder", "mtp", "loss") for i in s.layers)]


def check_megatron_layout(job: PlannedJob, core: Mapping[str, Any], llm: Sequence[Any]) -> None:
    """megatron-core's layout: per (pipeline rank, virtual stage) the plan's chunk c = vp·P + rank, layer counts and offsets.

    Without interleaving v = 1 and chunk c is stage c. Megatron reads the virtual stage
    only when its parallel state has a virtual world size: set it (as Megatron-LM's
    initialisation does from virtual_pipeline_model_parallel_size) while checking.
    """
    from megatron.core import parallel_state
    from megatron.core.transformer.enums import LayerType

    v = job.v
    cfg = megatron_config(core)
    layout = cfg.pipeline_model_parallel_layout
    P = core["pipeline_model_parallel_size"]
    assert layout.virtual_pipeline_model_parallel_size == v
    assert cfg.virtual_pipeline_model_parallel_size == (v if v > 1 else None)
    assert len(layout.layout) == P and all(len(chunks) == v for chunks in layout.layout)  # v model chunks per rank
    counts, mtp = _decoder_counts(job, llm), _decoder_counts(job, llm, "mtp")
    assert len(counts) == P * v
    parallel_state.set_virtual_pipeline_model_parallel_world_size(v if v > 1 else None)
    try:
        for c, want in enumerate(counts):
            rank, vp = c % P, c // P
            assert layout.get_num_layers_to_build(LayerType.decoder, vp_stage=vp, pp_rank=rank) == want, f"chunk {c}"
            assert layout.get_layer_offset(LayerType.decoder, vp_stage=vp, pp_rank=rank) == sum(counts[:c]), f"chunk {c}"
            assert layout.get_num_layers_to_build(LayerType.mtp, vp_stage=vp, pp_rank=rank) == mtp[c], f"chunk {c} MTP"
    finally:
        parallel_state.set_virtual_pipeline_model_parallel_world_size(None)
    assert LayerType.embedding in layout.layout[0][0] and LayerType.loss in layout.layout[-1][-1]
    if v > 1:  # the plan's chunk c runs on the GPUs of group c mod P: Megatron's rank c mod P
        ids = job.plan.device_ids()
        assert all(ids[c] == ids[c % P] for c in range(len(ids)))


def list_pattern(text: str) -> list[int]:
    """A Megatron-LM per-layer pattern flag (``--moe-layer-freq "([0]*1+[1]*45)"``) as the list it stands for.

    Megatron-LM's ``moe_freq_type`` evaluates a string holding ``[`` as a
    Python list expression; this reads the same expressions (int lists,
    ``+`` and ``*`` by an int, parentheses) without ``eval``.
    """
    import ast

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.List):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = value(node.left), value(node.right)
            return a + b if isinstance(node.op, ast.Add) else a * b
        raise ValueError(f"not a Megatron-LM list pattern: {text!r}")

    out = value(ast.parse(text.strip(), mode="eval").body)
    if not isinstance(out, list):
        raise ValueError(f"not a Megatron-LM list pattern: {text!r}")
    return [int(v) for v in out]


def check_megatron(job: PlannedJob, exp: Any, init: Callable[[int], None] = fake_world) -> str:
    """An expressible Megatron export through megatron-core (see the module docstring); returns its path.

    The MIMO path checks the language module's layout; finalizing the grid
    needs Megatron Bridge's MIMO config (the caller's, when installable).
    """
    import dataclasses as dc

    from megatron.core.transformer import TransformerConfig

    settings = exp.settings
    llm = llm_stages(job)
    if settings["path"] == "megatron-bridge":
        return _check_bridge(job, settings, llm, init)
    if settings["path"] != "megatron-lm":
        check_megatron_layout(job, settings["llm_transformer_config"], llm)
        return settings["path"]
    core = settings["transformer_config"]
    check_megatron_layout(job, core, llm)
    from megatron.core.distributed import DistributedDataParallelConfig

    fields = {f.name for f in dc.fields(TransformerConfig)}
    ddp_fields = {f.name for f in dc.fields(DistributedDataParallelConfig)}
    DistributedDataParallelConfig(**settings["ddp_config"])
    flags = dict(re.findall(r"--([a-z0-9-]+)(?: \"?([^\s\"]+)\"?)?", exp.snippet))
    for flag in flags:
        dest = FLAG_FIELDS.get(flag.replace("-", "_"), flag.replace("-", "_"))
        assert dest in fields or dest in ddp_fields or dest in BATCH_FLAGS, \
            f"--{flag} is neither a TransformerConfig nor a DDP-config field nor a batch flag"
        if dest in settings["ddp_config"]:
            assert settings["ddp_config"][dest] is True or flags[flag] == str(settings["ddp_config"][dest])
        if dest in core:
            want = core[dest]
            if isinstance(want, list):  # Megatron-LM reads a per-layer pattern flag as a list expression
                assert list_pattern(flags[flag]) == want, flag
            else:
                assert (flags[flag] == str(want)) if not isinstance(want, bool) else want, flag
    assert not any(f.startswith("encoder") for f in flags)
    # Megatron-LM's validate_args refuses a virtual-stage flag together with the layout (vpp comes from the layout)
    assert not any(f.startswith(("num-virtual-stages", "num-layers-per-virtual")) for f in flags)
    dp = settings["data_parallel_size"]
    mbs, gbs = int(flags["micro-batch-size"]), int(flags["global-batch-size"])
    assert gbs % (mbs * dp) == 0 and gbs // (mbs * dp) == job.microbatches  # Megatron-LM's m
    assert core["tensor_model_parallel_size"] * core["pipeline_model_parallel_size"] * dp == job.num_devices
    assert megatron_ranks(core, job.num_devices, init) == dp
    # the plan's knobs are set, never left to a note
    knobs = [g for st in job.knobs for g in st["segments"]]
    assert core.get("recompute_granularity", "none") in {g["recompute"] for g in knobs}
    assert settings["ddp_config"].get("use_distributed_optimizer", False) == any(g["zero"] == 1 and g["dp"] > 1 for g in knobs)
    check_megatron_fp8(job, core, settings["ddp_config"])
    return settings["path"]


def _check_bridge(job: PlannedJob, settings: Mapping[str, Any], llm: Any, init: Callable[[int], None]) -> str:
    """A Megatron Bridge launch: its TransformerConfig fields place the plan's chunks (megatron-core's layout),
    the DDP config builds, the ranks give its dp and the overrides' batch gives m (Bridge's own validation needs
    Transformer Engine: ``tests/frameworks/test_megatron_bridge.py`` checks the overrides field by field)."""
    from megatron.core.distributed import DistributedDataParallelConfig

    core = settings["transformer_config"]
    check_megatron_layout(job, core, llm)
    DistributedDataParallelConfig(**settings["ddp_config"])
    over = dict(o.split("=", 1) for o in settings["bridge"]["overrides"])
    dp = settings["data_parallel_size"]
    mbs, gbs = int(over["train.micro_batch_size"]), int(over["train.global_batch_size"])
    assert gbs == mbs * dp * job.microbatches  # Megatron's m
    assert megatron_ranks(core, job.num_devices, init) == dp
    knobs = [g for st in job.knobs for g in st["segments"]]
    assert settings["ddp_config"].get("use_distributed_optimizer", False) == any(g["zero"] == 1 and g["dp"] > 1 for g in knobs)
    check_megatron_fp8(job, core, settings["ddp_config"])
    return settings["path"]


def check_megatron_fp8(job: PlannedJob, core: Mapping[str, Any], ddp: Mapping[str, Any]) -> None:
    """The plan's precision is the config's: FP8 fields exactly when the plan is FP8, its recipe, fp8 parameters
    in both configs (TransformerConfig ``fp8_param``, the DDP config's ``fp8_param_gather``), its BF16 edge layers."""
    fp8 = job.precision
    if fp8 is None:
        assert not core.get("fp8") and not ddp.get("fp8_param_gather")
        return
    cfg = megatron_config(core)  # megatron-core validates fp8 / fp8_recipe / fp8_param / first_last_layers_bf16
    assert cfg.fp8 in ("hybrid", "e4m3") and cfg.fp8_recipe == fp8["fp8_recipe"]
    assert cfg.fp8_param == ddp.get("fp8_param_gather", False) == fp8["fp8_param_gather"]
    edge = fp8.get("fp8_bf16_layers", 0)
    assert cfg.first_last_layers_bf16 == bool(edge)
    if edge:
        assert cfg.num_layers_at_start_in_bf16 == cfg.num_layers_at_end_in_bf16 == edge


# --- torchtitan ---------------------------------------------------------------------------------------------------


def torchtitan_parse(args: list[str]) -> Any:
    """torchtitan's CLI (``ConfigManager.parse_args``) on ``args``: the parsed ``Trainer.Config``."""
    from torchtitan.config import ConfigManager

    return ConfigManager().parse_args(args)


def check_torchtitan_config(cfg: Any, settings: Mapping[str, Any], m: int) -> None:
    """The parsed config holds the exported settings; the Trainer's batch arithmetic gives m; ParallelDims accepts the mesh."""
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


def check_torchtitan_schedule(job: PlannedJob, settings: Mapping[str, Any]) -> None:
    """torch's lookup knows the exported schedule; with v parts per rank it is a multi-stage (looped) class and
    torchtitan places part c on rank c mod P, as the plan runs chunk c on group c mod P."""
    from torch.distributed.pipelining.schedules import PipelineScheduleMulti, get_schedule_class
    from torchtitan.distributed.pipeline_parallel import _get_pp_rank_to_stage_indices_mapping

    v = job.v
    par = settings["config"]["parallelism"]
    name, P = par["pipeline_parallel_schedule"], par["pipeline_parallel_degree"]
    cls = get_schedule_class(name)
    assert cls.__name__ == TORCHTITAN_CLASSES[job.schedule]
    assert issubclass(cls, PipelineScheduleMulti) == (v > 1)
    n = len(settings["module_fqns_per_model_part"])
    assert n == P * v == len(job.plan.stages)
    ids = job.plan.device_ids()
    for rank in range(P):
        mine = _get_pp_rank_to_stage_indices_mapping(rank, P, name, n)
        assert len(mine) == v and all(c % P == rank and ids[c] == ids[rank] for c in mine)


def module_tree(parts: list[list[str]]) -> Any:
    """A model whose top-level children are the exported names; each leaf knows its name (``tt_name``)."""
    from torch import nn
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


def kept_names(chunk: Any) -> list[str]:
    """The exported names a split chunk kept."""
    return [m.tt_name for m in chunk.modules() if hasattr(m, "tt_name")]


def check_torchtitan_split(settings: Mapping[str, Any], pp_mesh: Any) -> None:
    """torchtitan's pipeline split on a module tree with the exported names: each stage keeps exactly its modules."""
    import torch
    from torchtitan.distributed.pipeline_parallel import _pipeline_module_split

    parts = settings["module_fqns_per_model_part"]
    stages, chunks = _pipeline_module_split(module_tree(parts), pp_mesh,
                                            settings["config"]["parallelism"]["pipeline_parallel_schedule"],
                                            torch.device("cpu"), parts)
    assert [st.stage_index for st in stages] == list(range(len(parts)))
    for part, chunk in zip(parts, chunks):
        assert sorted(kept_names(chunk)) == sorted(part)
    assert sum(len(kept_names(c)) for c in chunks) == len({n for p in parts for n in p})


def _registry_config(snippet: str, converters: Sequence[str] = ()) -> Any:
    """The exported ``config_registry`` function written as a package and parsed by torchtitan's ``--module``.

    An FP8 export's module carries ``CONVERTERS``, torchtitan's converter
    configs, built when the module is imported: they are checked
    (:func:`check_torchtitan_converters`), then emptied before torchtitan
    calls ``planned()``, whose ``converter.build()`` needs torchao and an
    SM89+ GPU (torchtitan raises without them).
    """
    import importlib

    with tempfile.TemporaryDirectory() as tmp:
        pkg = Path(tmp) / "planned_job"
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        (pkg / "config_registry.py").write_text(snippet.split("# or, as a config_registry function:\n", 1)[1])
        sys.path.insert(0, tmp)
        try:
            module = importlib.import_module("planned_job.config_registry")
            built = list(getattr(module, "CONVERTERS", []))
            check_torchtitan_converters(built, converters)
            if built:
                module.CONVERTERS = []  # type: ignore[attr-defined]
            return torchtitan_parse(["--module", "planned_job", "--config", "planned"])
        finally:
            sys.path.remove(tmp)
            sys.modules.pop("planned_job.config_registry", None)
            sys.modules.pop("planned_job", None)


def check_torchtitan_converters(built: Sequence[Any], exported: Sequence[str]) -> None:
    """The FP8 converters of an export are torchtitan's own configs, in an order it accepts, with a recipe it
    knows; the LM head and the router are left in BF16 and the blocks' linears converted, by torchtitan's own
    filter (``module_filter_fn``: Float8) or include list (MXFP8)."""
    from typing import get_args, get_type_hints

    from torchtitan.components.quantization import (
        Float8GroupedExpertsConverter,
        Float8LinearConverter,
        MXFP8GroupedExpertsConverter,
        MXFP8LinearConverter,
    )
    from torchtitan.components.quantization.utils import module_filter_fn
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.utils import validate_converter_order

    assert len(built) == len(exported)
    if not built:
        return
    validate_converter_order(built)
    linear = Linear.Config(in_features=4096, out_features=4096)
    blocks = ("layers.3.attention.wq", "layers.3.feed_forward.w1", "layers.3.moe.shared_experts.w2")
    bf16 = ("lm_head", "layers.3.moe.router.gate")
    for c in built:
        assert isinstance(c, (Float8LinearConverter.Config, MXFP8LinearConverter.Config, Float8GroupedExpertsConverter.Config,
                              MXFP8GroupedExpertsConverter.Config)), type(c)
        if isinstance(c, Float8LinearConverter.Config):
            assert c.recipe_name in get_args(get_type_hints(Float8LinearConverter.Config)["recipe_name"])
            assert all(module_filter_fn(linear, f, c.filter_fqns) for f in blocks)
            assert not any(module_filter_fn(linear, f, c.filter_fqns) for f in bf16)
        if isinstance(c, MXFP8LinearConverter.Config):  # an include list: a Linear converts when its FQN holds one
            assert all(any(t in f for t in c.fqns) for f in blocks)
            assert not any(any(t in f for t in c.fqns) for f in bf16)


def check_torchtitan(job: PlannedJob, exp: Any, pp_mesh: Any = None) -> None:
    """An expressible torchtitan export through torchtitan (see the module docstring); the split only with ``pp_mesh``."""
    settings = exp.settings
    overrides = [tok for line in settings["overrides"] for tok in line.split(" ")]
    check_torchtitan_config(torchtitan_parse(["--module", "llama3", "--config", "llama3_debugmodel", *overrides]), settings,
                            job.microbatches)
    check_torchtitan_config(_registry_config(exp.snippet, settings.get("converters", ())), settings, job.microbatches)
    check_torchtitan_schedule(job, settings)
    if pp_mesh is not None:
        check_torchtitan_split(settings, pp_mesh)


def one_rank_pp_mesh() -> Any:
    """A one-rank gloo group on localhost and its ``pp`` device mesh (all P stages built on rank 0)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    return init_device_mesh("cpu", (1,), mesh_dim_names=("pp",))


# --- DeepSpeed ----------------------------------------------------------------------------------------------------


class _Mpu:
    """The data-parallel size DeepSpeedConfig reads from a model-parallel unit."""

    def __init__(self, dp: int):
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp


def deepspeed_config(config: Mapping[str, Any], dp: int) -> Any:
    """``DeepSpeedConfig`` of ``config`` at ``dp`` data-parallel ranks (no process group: the rank is read as 0)."""
    import deepspeed.runtime.config as ds_config

    saved = ds_config.dist.get_rank
    ds_config.dist.get_rank = lambda *a, **k: 0
    try:
        return ds_config.DeepSpeedConfig(dict(config), mpu=_Mpu(dp))
    finally:
        ds_config.dist.get_rank = saved


def check_deepspeed_config(job: PlannedJob, exp: Any) -> None:
    """DeepSpeedConfig checks the batch triple and reads the ZeRO stage; PipelineEngine accepts stages 0 and 1 only."""
    settings = exp.settings
    cfg = deepspeed_config(settings["ds_config"], settings["data_parallel_size"])
    assert cfg.gradient_accumulation_steps == job.microbatches
    knobs = [g for st in job.knobs for g in st["segments"] if g["dp"] > 1]
    assert cfg.zero_optimization_stage == max((g["zero"] for g in knobs), default=0) <= 1
    intervals = settings["activation_checkpoint_intervals"]
    assert intervals == [int(all(g["recompute"] == "full" for g in st["segments"])) for st in job.knobs]
    ds = settings["ds_config"]
    stages = job.plan.stages
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * stages[0].dp
    assert ds["gradient_accumulation_steps"] == job.microbatches


# --- one export, as benchmarks.targets runs it --------------------------------------------------------------------


@dataclass(frozen=True)
class _Exported:
    """An export read back from ``export --json`` (its settings and snippet)."""

    settings: Mapping[str, Any]
    snippet: str


def check_export(doc: Mapping[str, Any], exported: Mapping[str, Any], target: str) -> list[str]:
    """Run an expressible export of ``target`` through the framework's checks; the names of the checks passed.

    ``doc`` is the ``plan --json`` document, ``exported`` the ``export --json``
    one. Raises what the failing check raises.
    """
    return check_job(PlannedJob.from_doc(doc), exported, target)


def check_job(job: PlannedJob, exported: Mapping[str, Any], target: str) -> list[str]:
    """:func:`check_export` of a :class:`PlannedJob` (a plan not read from a ``plan --json`` document: an
    ``estimate``'s); ``exported`` is the ``export --json`` document."""
    exp = _Exported(exported["settings"], exported.get("snippet", ""))
    if target == "megatron":
        try:
            path = check_megatron(job, exp)
        finally:
            close_fake_world()
        return [f"megatron-core TransformerConfig + layout ({path})"] + (
            ["DDP config, flags, batch, rank generator"] if path == "megatron-lm" else [])
    if target == "torchtitan":
        import torch.distributed as dist

        mesh = one_rank_pp_mesh()
        try:
            check_torchtitan(job, exp, mesh)
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
        return ["ConfigManager overrides + config_registry", "Trainer batch arithmetic", "ParallelDims",
                "schedule class + rank mapping", "pipeline module split"]
    if target == "deepspeed":
        check_deepspeed_config(job, exp)
        return ["DeepSpeedConfig batch triple + ZeRO stage", "activation checkpoint intervals"]
    raise ValueError(f"unknown target {target!r}")


def _why(err: BaseException) -> str:
    """The error and the line of this module's check that raised it (a bare ``assert`` says nothing else)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == __file__]
    where = f" at {Path(__file__).name}:{frames[-1].lineno} `{frames[-1].line}`" if frames else ""
    return f"{type(err).__name__}: {err}"[:500] + where


def verdict(plan_path: str, export_path: str, target: str) -> dict[str, Any]:
    """``{"ok", "checked", "error"}`` of one export (:func:`check_export` on the two files); never raises."""
    try:
        checked = check_export(json.loads(Path(plan_path).read_text()), json.loads(Path(export_path).read_text()), target)
        return {"ok": True, "checked": checked, "error": None}
    except Exception as err:  # the row says which check failed and how
        return {"ok": False, "checked": [], "error": _why(err)}


def main(argv: list[str] | None = None) -> None:
    """``PLAN.json EXPORT.json TARGET`` (one JSON line) or ``--batch JOBS.json`` (one JSON line per job, in order:
    JOBS.json lists ``[plan, export, target]``; the frameworks are imported once); exit 0 either way."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--batch":
        for plan_path, export_path, target in json.loads(Path(args[1]).read_text()):
            print(json.dumps(verdict(plan_path, export_path, target)), flush=True)
        return
    if len(args) != 3:
        print("usage: python -m benchmarks.framework_checks PLAN.json EXPORT.json TARGET | --batch JOBS.json",
              file=sys.stderr)
        raise SystemExit(2)
    print(json.dumps(verdict(*args)))


if __name__ == "__main__":
    main()

