"""Plans as torchtitan settings (torchtitan 0.3: ``config_registry`` functions plus ``--section.key`` overrides).

torchtitan 0.3 has no TOML loader: a job is ``--module M --config F`` (a
``config_registry`` function returning ``Trainer.Config``) plus CLI
overrides ``--section.key value`` [1]. The export gives those overrides,
and the same values as a ``config_registry`` function.

**Stage split.** ``parallelism.module_fqns_per_model_part`` lists, per
stage, module FQNs. torchtitan's split (``_split_module`` in
``distributed/pipeline_parallel.py``) walks only the model's *top-level*
children: it keeps a child named in the list, and of a top-level
``ModuleList``/``ModuleDict`` the entries named ``<child>.<i>``; every
other child is set to None.

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.torchtitan.export``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from ...costs.memory.recompute import OP
from ...problem import expert_tensor_parallel
from ..common import VISION_ROLES, Export, ExportContext, MoeHints
from ..stages import (
    ReplicaBatch,
    StageView,
    chunk_reasons,
    layout_reasons,
    one_recompute,
    one_zero,
    per_replica_microbatch,
    segment_knobs,
)
from .fp8 import torchtitan_fp8
from .models import TitanModel, titan_model
from .rules import RULES, SCHEDULE_NAMES, SCHEDULE_REFUSALS, torchtitan_expert_tp

__all__ = ["export_torchtitan", "torchtitan_names", "CHECKED_WITH", "AC_MODES", "AC_CLASSES"]

CHECKED_WITH = ("torchtitan 0.3.0 (config_registry + CLI overrides; 0.2.x TOML files are not targeted); schedule names per "
                "torch 2.13 get_schedule_class")
# the plan's recompute -> torchtitan's activation_checkpoint subcommand (full, or the per-op policy "op")
AC_MODES = MappingProxyType({"full": "full", OP: "selective"})
# activation_checkpoint subcommand -> its policy class (torchtitan/distributed/activation_checkpoint.py)
AC_CLASSES = MappingProxyType({"full": "FullAC", "selective": "SelectiveAC"})


def _flat(fqn: str) -> str:
    m = re.match(r"^(.*)\.(\d+)$", fqn)
    if m:
        return m.group(1).replace(".", "_") + "." + m.group(2)
    return fqn.replace(".", "_")


def torchtitan_names(stages: Sequence[StageView]) -> tuple[list[list[str]], dict[str, list[str]]]:
    """Per stage, the torchtitan module names it holds; and each name's Hugging Face FQNs."""
    parts: list[list[str]] = []
    fqn_map: dict[str, list[str]] = {}
    k = 0
    for s in stages:
        names: list[str] = []

        def add(name: str, sources: Sequence[str]) -> None:
            if name not in names:
                names.append(name)
            fqn_map.setdefault(name, [])
            fqn_map[name] += [f for f in sources if f not in fqn_map[name]]

        for role, fqns in zip(s.roles, s.fqns):
            if role in VISION_ROLES:
                add("vision_encoder", fqns)
            elif role == "embedding":
                add("tok_embeddings", fqns)
            elif role == "decoder":
                add(f"layers.{k}", fqns[:1])
                k += 1
                for f in fqns[1:]:
                    add(_flat(f), [f])
            elif role == "loss":
                for f in fqns or ("norm", "lm_head"):
                    add("norm" if f.endswith("norm") else "lm_head", [f])
            else:
                for f in fqns:
                    add(_flat(f), [f])
        parts.append(names)
    return parts, fqn_map


def _edge_names(stages: Sequence[StageView], ctx: ExportContext) -> list[str]:
    """torchtitan FQN prefixes of the decoder layers an FP8 plan keeps in BF16 (``layers.<k>.``, k from each end)."""
    n = sum(s.count("decoder") for s in stages)
    edge = ctx.precision.bf16_layers if ctx.precision is not None else 0
    return [f"layers.{k}." for k in range(n) if k < edge or k >= n - edge]


def _reasons(stages: Sequence[StageView], ctx: ExportContext) -> list[str]:
    reasons = layout_reasons(stages, "torchtitan builds one pp x dp x tp mesh, so every stage and every module has the same layout")
    emb = [s.index for s in stages if "embedding" in s.roles]
    vis = [s.index for s in stages if any(r in VISION_ROLES for r in s.roles)]
    if vis and (not emb or set(vis) != {emb[0]}):
        cut_inside = [s.index for s in stages if s.roles and s.roles[0] == "vision" and s.index > 0]
        where = f"; the cut before stage(s) {cut_inside} falls inside the vision encoder" if cut_inside else ""
        reasons.append(
            f"the vision encoder/projector run on stage(s) {vis}"
            + (f", the token embedding on stage {emb[0]}" if emb else "")
            + where
            + ": torchtitan's VLMs run vision_encoder, whole, inside the embedding step of the stage holding tok_embeddings"
        )
    schedule, v = ctx.schedule, ctx.chunks
    if schedule not in RULES.schedules:
        reasons.append(SCHEDULE_REFUSALS.get(schedule, f"schedule {schedule!r} has no torchtitan schedule"))
    elif schedule == "interleaved":
        reasons += chunk_reasons(stages, v)
    return reasons + _mtp_reasons(stages)


def _mtp_reasons(stages: Sequence[StageView]) -> list[str]:
    """Why torchtitan 0.3 cannot train the plan's multi-token prediction modules (empty: it can, or there are none).

    Its ``MTPDecoder.Config.update_from_config`` (``models/deepseek_v3/mtp.py``) raises NotImplementedError
    under pipeline parallelism and under context parallelism: MTP runs only in a one-stage plan without cp.
    """
    if not any(s.count("mtp") for s in stages):
        return []
    out = []
    if len(stages) > 1:
        out.append(f"the plan trains multi-token prediction modules over {len(stages)} pipeline stages: torchtitan 0.3's "
                   "MTPDecoder refuses pipeline parallelism (\"MTP does not support pipeline parallelism yet\"); plan "
                   "without them (--mtp-layers 0) or on one stage")
    if any(s.cp > 1 for s in stages):
        out.append("the plan trains multi-token prediction modules with context parallelism: torchtitan 0.3's "
                   "MTPDecoder refuses it (\"MTP does not support context parallelism yet\")")
    return out


@dataclass(frozen=True)
class _DataAxes:
    """The data and 5D axes of ``parallelism``: replicate and shard degrees, FSDP's resharding, cp and ep."""

    replicate: int
    shard: int
    reshard: str | None  # fsdp_reshard_after_forward (None: not written)
    cp: int
    ep: int

    def to_dict(self) -> dict[str, Any]:
        """The ``parallelism`` fields, the replicated degree first when the model is replicated."""
        degrees = [("data_parallel_replicate_degree", self.replicate), ("data_parallel_shard_degree", self.shard)]
        doc: dict[str, Any] = dict(degrees if self.replicate > 1 else degrees[::-1])
        if self.reshard is not None:
            doc.update(fsdp_reshard_after_forward=self.reshard)
        doc.update(context_parallel_degree=self.cp, expert_parallel_degree=self.ep)
        return doc


def _knobs(stages: Sequence[StageView], ctx: ExportContext) -> tuple[dict[str, Any], str, list[str], list[str]]:
    """(parallelism fields for the data axes and 5D axes, activation-checkpoint mode, notes, reasons)."""
    knobs, reasons = segment_knobs(stages)
    notes: list[str] = []
    zero, znotes, zr = one_zero(knobs, "torchtitan has one data-parallel setting (replicate/shard degrees, "
                                       "fsdp_reshard_after_forward) for the whole model")
    notes += znotes
    decoder = [k for k in knobs if k.decoder]
    recompute, rr = one_recompute(decoder, "torchtitan's activation_checkpoint is one policy for every block of layers")
    reasons += zr + rr
    other = [k.where() for k in knobs if RULES.recompute_decoder_only and not k.decoder and k.recompute != "none"]
    if other:
        reasons.append(f"recompute planned on {', '.join(other)}, outside the decoder layers: torchtitan's "
                       "activation_checkpoint wraps only the blocks of `layers`")
    if recompute not in RULES.recompute:  # selective and the module sets: Megatron's, not torchtitan's
        reasons.append(f"recompute {recompute} (Megatron-style module recompute) is not torchtitan's selective activation "
                       "checkpointing (a per-op policy that saves matmul and attention outputs and recomputes every "
                       "second matmul: the plan's recompute-op); torchtitan offers full, selective, memory-budget or none")
    dp, tp, cp, ep, etp = stages[0].segments[0].shape
    if zero == 0 and dp > 1:
        if cp > 1:
            reasons.append(f"ZeRO-0 with cp {cp}: torchtitan shards the weights over dp_shard x cp with FSDP whenever cp > 1")
        axes = _DataAxes(replicate=dp, shard=1, reshard=None, cp=cp, ep=ep)
    else:
        axes = _DataAxes(replicate=1, shard=dp, reshard=("always" if zero == 3 else "never") if dp * cp > 1 else None,
                         cp=cp, ep=ep)
    if zero == 1 and dp > 1:
        notes.append("ZeRO-1 as FSDP2 with fsdp_reshard_after_forward never: the weights stay gathered from forward to "
                     "backward as under ZeRO-1, and gradients and optimizer states are sharded over dp (never more "
                     "memory than ZeRO-1)")
    planned, theirs = expert_tensor_parallel(tp, ep, etp), torchtitan_expert_tp(tp, ep)
    if planned != theirs:
        reasons.append(f"the plan splits each expert over {planned} rank(s) (ep {ep}, etp {etp}, tp {tp}); torchtitan "
                       f"0.3 splits them over {theirs}: its experts are sharded by tp without expert parallelism and "
                       "whole with it (no expert tensor parallelism), so its ranks would hold other expert weights "
                       "than the plan charged")
    shard = axes.shard
    if ep > 1 and (shard * cp * tp) % ep:
        reasons.append(f"ep {ep} does not divide dp_shard {shard} x cp {cp} x tp {tp}: torchtitan takes the expert ranks "
                       "from those (dp_replicate and pp are outer dimensions)")
    moe: MoeHints | None = ctx.moe
    if ep > 1 and moe is None:
        reasons.append(f"the plan splits experts over ep {ep}, but its hints do not describe the model's experts")
    elif moe is not None and moe.num_experts % ep:
        reasons.append(f"ep {ep} does not divide the model's {moe.num_experts} experts")
    return axes.to_dict(), AC_MODES.get(recompute, "none"), notes, reasons


def _overrides(cfg: Mapping[str, Mapping[str, Any]], ac: str = "none") -> list[str]:
    """``--section.key value`` per setting, then the activation-checkpoint subcommand (tyro: after the flags)."""
    out = []
    for section, values in cfg.items():
        for key, value in values.items():
            flag = f"--{section}.{key}"
            if value is True:
                out.append(flag)
            elif isinstance(value, list):
                out.append(flag + " " + " ".join(",".join(part) for part in value))
            else:
                out.append(f"{flag} {value}")
    out.append(f"activation_checkpoint:{ac}")
    return out


def _registry_function(cfg: Mapping[str, Mapping[str, Any]], base: str, ac: str = "none",
                       fp8: tuple[Sequence[str], Sequence[str]] = ((), ()), model: TitanModel | None = None) -> str:
    """The ``config_registry`` function; ``fp8`` = (import lines, converter expressions) of an FP8 plan
    (:func:`.fp8.torchtitan_fp8`), applied to the model config as torchtitan's ``model_registry`` does;
    ``model``: the family whose flavor replaces the base function's own (:mod:`.models`)."""
    module, _, func = base.rpartition(".")
    imports, converters = fp8
    flavor = model is not None and model.flavor != model.config_flavor
    lines = [
        "# config_registry.py of your own package; run: -m torchtitan.train --module <package> --config planned",
        f"from {module} import {func} as _base",
        *([f"from torchtitan.models.{model.family} import model_registry"] if flavor and model else []),
        *([f"from torchtitan.distributed.activation_checkpoint import {AC_CLASSES[ac]}"] if ac in AC_CLASSES else []),
        *imports,
        "",
        *(["# the plan's FP8: torchtitan's converters on the model config (LM head and router left in BF16)",
           "CONVERTERS = [" + ", ".join(converters) + "]"] if converters else []),
        "",
        "def planned():",
        f'    """{base}() with the planned pipeline split, mesh and batch."""',
        "    config = _base()",
        *([f"    config.model_spec = model_registry({model.flavor!r})"] if flavor and model else []),
    ]
    for section, values in cfg.items():
        for key, value in values.items():
            lines.append(f"    config.{section}.{key} = {value!r}")
    lines.append("    config.activation_checkpoint = " + (f"{AC_CLASSES[ac]}.Config()" if ac in AC_CLASSES else "None"))
    if converters:
        lines += ["    for converter in CONVERTERS:",
                  "        config.model_spec.model = converter.build().convert(config.model_spec.model)"]
    lines.append("    return config")
    return "\n".join(lines)


def _model_notes(model: TitanModel | None, base: str, no_family: str | None, name: str | None,
                 vision: Sequence[int]) -> list[str]:
    """What the job's model is: the matched family and flavor, or why none; and what of a VLM it does not train."""
    notes: list[str] = []
    if model is not None:
        notes.append(f"torchtitan's {model.family} family, flavor {model.flavor} ({base}()"
                     + (f" with model_spec = model_registry({model.flavor!r})" if model.flavor != model.config_flavor else "")
                     + f"): {name}'s language model")
    elif no_family is not None:
        notes.append(f"no torchtitan model for {name or 'this MoE model'}: {no_family}; the config_registry function "
                     f"starts from {base}(), a placeholder for your model's config function")
    else:
        notes.append("the config_registry function starts from " + base + "(): replace it with your model's config "
                     "function")
    if vision:
        notes.append(
            f"TEMPLATE for this VLM: torchtitan 0.3 does not train {name or 'this model'}'s vision tower ("
            + (f"its {model.family} family builds the language model only" if model else "no torchtitan model has it")
            + f"): the vision encoder and projector the plan puts on stage(s) {list(vision)} (vision_encoder in the "
            "parts) need a model class of your own with a top-level vision_encoder run in the embedding step")
    notes.append("module names follow torchtitan's own models (vision_encoder, tok_embeddings, layers.<k>, norm, "
                 "lm_head); other modules are top-level children named by their Hugging Face FQN with '.' -> '_' "
                 "(fqn_map lists them): the model's forward must skip the children a stage does not hold (torchtitan "
                 "sets them to None)")
    return notes


def export_torchtitan(stages: list[StageView], ctx: ExportContext) -> Export:
    """torchtitan overrides and ``config_registry`` function for the plan, or the reasons it cannot run it."""
    reasons = _reasons(stages, ctx)
    b: ReplicaBatch | None = None
    data_axes: dict[str, Any] = {}
    ac = "none"
    knob_notes: list[str] = []
    if not reasons:
        dp, tp = stages[0].dp, stages[0].tp
        data_axes, ac, knob_notes, knob_reasons = _knobs(stages, ctx)
        reasons += knob_reasons
        b, why = per_replica_microbatch(ctx.global_batch, ctx.microbatches, dp)
        if why:
            reasons.append(f"{why} (torchtitan: m = gradient-accumulation steps x local_batch_size / "
                           "pipeline_parallel_microbatch_size)")
    fp8_imports, converters, fp8_notes, fp8_reasons = torchtitan_fp8(ctx.precision, ctx.moe is not None,
                                                                     _edge_names(stages, ctx))
    reasons += fp8_reasons
    if reasons:
        layouts = [{"stage": s.index, "layers": [s.first, s.last], "layouts": s.describe_layouts()} for s in stages]
        return Export("torchtitan", {"stage_layouts": layouts}, "# (no torchtitan setting expresses this plan: see the reasons above)",
                      (), False, tuple(reasons), CHECKED_WITH)
    parts, fqn_map = torchtitan_names(stages)
    notes = list(knob_notes) + fp8_notes
    schedule, v = ctx.schedule, ctx.chunks
    pp = len(stages) // v
    if v > 1:
        notes.append(
            f"Interleaved1F1B with {v} stages per rank: the {len(parts)} model parts of module_fqns_per_model_part are "
            f"the plan's chunks; torchtitan places part c on pipeline rank c mod {pp} (its 'loop' style), as the plan does"
        )
    parallelism: dict[str, Any] = {
        "pipeline_parallel_degree": pp,
        "pipeline_parallel_schedule": SCHEDULE_NAMES[schedule],
        **data_axes,
        "tensor_parallel_degree": tp,
        "module_fqns_per_model_part": parts,
    }
    # torchtitan 0.3 (Trainer.Config._validate_cuda_graphs) refuses CUDA graphs under pipeline parallelism, and
    # under expert parallelism with a token dispatcher that synchronizes with the CPU (the all-to-all one its MoE
    # models build by default)
    ep = max(g.ep for s in stages for g in s.segments)
    training: dict[str, Any] = {"disable_cuda_graphs": True} if pp > 1 or ep > 1 else {}
    if ctx.seq_length is not None:  # the plan's tokens per sample, not the base config's
        training.update(seq_len=ctx.seq_length)
    if b is not None and pp > 1:  # one accumulation step of m pipeline microbatches
        parallelism.update(pipeline_parallel_microbatch_size=b.micro)
        training.update(local_batch_size=b.global_batch // dp, global_batch_size=b.global_batch)
    elif b is not None:  # no PP: torchtitan ignores the microbatch size; m gradient-accumulation steps of b samples
        training.update(local_batch_size=b.micro, global_batch_size=b.global_batch)
        if b.microbatches > 1:
            notes.append(f"m = {b.microbatches} as gradient accumulation (global_batch_size / (local_batch_size x "
                         f"dp) = {b.global_batch} / ({b.micro} x {dp})): torchtitan's train step syncs gradients on every "
                         "accumulation step, the plan counts one sync per iteration")
    else:
        notes.append("no global batch or microbatch count given: set training.local_batch_size, global_batch_size and "
                     "parallelism.pipeline_parallel_microbatch_size so that torchtitan runs m microbatches")
    cfg = {"parallelism": parallelism, "training": training} if training else {"parallelism": parallelism}
    model, base, no_family = titan_model(ctx.model, ctx.moe is not None)
    if ctx.torchtitan_base:
        model, base, no_family = None, ctx.torchtitan_base, None
    overrides = _overrides(cfg, ac)
    settings: dict[str, Any] = {"config": cfg, "activation_checkpoint": ac, "overrides": overrides, "module_fqns_per_model_part": parts,
                "fqn_map": fqn_map, "microbatches": ctx.microbatches}
    if converters:
        settings.update(converters=list(converters))
    world = pp * dp * tp * stages[0].cp
    own_cli = model is not None and model.flavor == model.config_flavor  # torchtitan's own --module/--config run it
    job = f"--module {model.family} --config {model.config}" if own_cli and model else \
        '--module "$MODEL_MODULE" --config "$MODEL_CONFIG"'
    snippet = (
        f"# {world} GPUs: torchrun with --nnodes x --nproc_per_node = {world}\n"
        f"torchrun $DISTRIBUTED_ARGS -m torchtitan.train {job} \\\n    "
        + " \\\n    ".join(overrides)
        + "\n\n# or, as a config_registry function:\n"
        + _registry_function(cfg, base, ac, (fp8_imports, converters), model)
    )
    vision = [s.index for s in stages if any(r in VISION_ROLES for r in s.roles)]
    mtp = sum(s.count("mtp") for s in stages)
    notes += _model_notes(model, base, no_family, ctx.model, vision)
    if mtp and model is not None:
        notes.append(f"TEMPLATE: the plan trains {mtp} multi-token prediction module(s); {model.config}() builds none: "
                     f"build the model with model_registry({model.flavor!r}, num_mtp_layers={mtp}) and MTPLoss, as "
                     "torchtitan's deepseek_v3_debugmodel_mtp does, with the module names of its MTP block")
    settings["model"] = {"family": model.family if model else None, "flavor": model.flavor if model else None,
                         "base": base, "trains": "language model only" if vision else "whole model"}
    settings["launch"] = "command" if model is not None and not vision and not mtp else "template"
    if any(s.count("action") for s in stages) or any("+" in m for s in stages for m in s.modules):
        notes.append("torchtitan has no VLA model: the action modules need a model class of your own with these top-level names")
    if tp > 1:
        notes.append("TP > 1: the model needs a parallelize function that applies tensor parallelism to these modules")
    return Export("torchtitan", settings, snippet, tuple(notes), True, (), CHECKED_WITH)
