"""Plans as Megatron settings: Megatron-LM flags, or Megatron Bridge MIMO per-module grids.

Two ways to run a plan, tried in this order:

* **Megatron-LM** (``pretrain_gpt.py`` / ``pretrain_vlm.py`` flags, checked
with megatron-core 0.16.1): ``--pipeline-model-parallel-layout`` with the
TP/PP flags, when every stage holds language-model layers (the vision
encoder, if any, runs on the first stage, as Megatron's LLaVA does) and all
stages share one (dp, tp). The layout string lists the stages separated by
``|``: ``E`` embedding, ``t`` decoder layer, ``m`` MTP module, ``L`` loss,
``x*N`` repeats a symbol and ``(...)*N`` a group [1]. A VLM with a Megatron
Bridge recipe gets that recipe's launch (:mod:`.bridge`); another VLM the
flags marked a template (``settings["launch"]``).

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.megatron.export``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from ...costs.memory.recompute import MODULES as RECOMPUTE_MODULES
from ...costs.memory.recompute import OP, merge_settings, modules_of
from ...problem import expert_tensor_parallel
from ..common import VISION_ROLES, Export, ExportContext, MoeHints, PrecisionHints
from ..stages import (
    SegmentKnobs,
    StageView,
    chunk_reasons,
    layout_reasons,
    one_recompute,
    one_zero,
    per_replica_microbatch,
    segment_acts,
    segment_knobs,
)
from .bridge import BRIDGE_COMMIT, BRIDGE_RECIPES, BridgeRecipe, bridge_fp8, bridge_overrides, bridge_snippet
from .fp8 import megatron_fp8
from .mla import latent_attention
from .moe import moe_router_settings
from .rules import RULES, SCHEDULE_REFUSALS

__all__ = ["export_megatron", "megatron_layout", "parse_megatron_layout", "mimo_grid", "megatron_recompute", "mtp_reasons",
           "CHECKED_WITH"]

CHECKED_WITH = "megatron-core 0.16.1 (Megatron-LM core_r0.16 flags); MIMO grid per Megatron Bridge's MimoParallelismConfig"


# --------------------------------------------------------------------------- layout strings


def _stage_symbols(stage: StageView) -> str:
    sym = "E" if stage.count("embedding") else ""
    n = stage.count("decoder")
    sym += ("t" if n == 1 else f"t*{n}") if n else ""
    k = stage.count("mtp")  # multi-token prediction modules: after the decoder layers, before the loss
    sym += ("m" if k == 1 else f"m*{k}") if k else ""
    sym += "L" if stage.count("loss") else ""
    return sym


def megatron_layout(stage_symbols: Sequence[str]) -> str:
    """Join per-stage symbol strings (``"Et*3"``, ``"t*4"``, ``"t*4L"``) into a layout string.

    Runs of three or more identical stages are written ``(S|)*k``; a run
    that ends the pipeline is written ``(S|)*(k-1),S`` so that no empty
    stage follows. ``parse_megatron_layout(megatron_layout(s))`` gives the
    stages back.
    """
    chunks: list[tuple[str, bool]] = []  # (text, ends with its own stage separator)
    i, n = 0, len(stage_symbols)
    while i < n:
        j = i
        while j + 1 < n and stage_symbols[j + 1] == stage_symbols[i]:
            j += 1
        k, sym = j - i + 1, stage_symbols[i]
        if k >= 3 and sym:
            if j == n - 1:
                chunks.append((f"({sym}|)*{k - 1},{sym}", False))
            else:
                chunks.append((f"({sym}|)*{k}", True))
        else:
            chunks.extend((sym, False) for _ in range(k))
        i = j + 1
    text = ""
    for c, (chunk, _closed) in enumerate(chunks):
        if c > 0:
            text += "," if chunks[c - 1][1] else "|"
        text += chunk
    return text


def parse_megatron_layout(layout: str) -> list[list[str]]:
    """Parse a ``--pipeline-model-parallel-layout`` string into per-stage symbol lists.

    Follows Megatron Core's grammar: commas are dropped, ``(...)*N`` and
    ``x*N`` are unrolled, stages are split at ``|``; symbols are ``E``,
    ``t``, ``m``, ``L``. Raises ValueError on anything else.
    """
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), text)
    stages = []
    for chunk in text.split("|"):
        bad = [c for c in chunk if c not in "EtmL"]
        if bad:
            raise ValueError(f"invalid layer symbol {bad[0]!r} in layout {layout!r}")
        stages.append(list(chunk))
    return stages


# --------------------------------------------------------------------------- shared checks


def _split(stages: Sequence[StageView]) -> tuple[list[StageView], list[StageView], list[StageView]]:
    """(vision-only stages before the language model, language-model stages, stages after it)."""
    llm_idx = [s.index for s in stages if s.is_llm]
    first, last = llm_idx[0], llm_idx[-1]
    return list(stages[:first]), list(stages[first : last + 1]), list(stages[last + 1 :])


def mtp_reasons(llm: Sequence[StageView], v: int) -> list[str]:
    """Why Megatron-Core cannot place the plan's multi-token prediction modules (empty: it can).

    ``llm`` are the language-model chunks in layout order (chunk c on pipeline
    rank c mod P, virtual stage c // P, P = len(llm) / v). Megatron-Core's
    ``PipelineParallelLayerLayout.validate_layer_layout`` (0.16.1) asserts
    that all MTP layers are in one virtual stage and that it is the last
    virtual stage of its rank (so never a non-last one of the first rank).
    """
    chunks = [c for c, s in enumerate(llm) if s.count("mtp")]
    if not chunks:
        return []
    pp = len(llm) // v
    if len(chunks) > 1:
        return [f"the multi-token prediction modules fall in {len(chunks)} stages ({', '.join(str(llm[c].index) for c in chunks)}): "
                "Megatron-Core requires all MTP layers in one (virtual) pipeline stage"]
    c = chunks[0]
    if c // pp != v - 1:
        return [f"the multi-token prediction modules are in virtual stage {c // pp} of pipeline rank {c % pp} (stage "
                f"{llm[c].index}), not its last ({v - 1}): Megatron-Core places MTP layers only in the last virtual "
                "stage of a rank"]
    return []


def _one_layout(stages: Sequence[StageView]) -> tuple[int, ...] | None:
    layouts = set().union(*(s.layouts for s in stages))
    return next(iter(layouts)) if len(layouts) == 1 else None


def _stage_order_ranks(stages: Sequence[StageView], offset: int) -> bool:
    """Do the stages sit on ranks offset, offset+1, ... in stage order (Megatron's pp-outermost rank order)?"""
    ids = [d for s in stages for d in sorted(s.device_ids)]
    return ids == list(range(offset, offset + len(ids)))


def _layout_symbols(llm: Sequence[StageView]) -> tuple[list[str], list[str]]:
    notes: list[str] = []
    symbols = [_stage_symbols(s) for s in llm]
    if not any(s.count("embedding") for s in llm):
        symbols[0] = "E" + symbols[0]
        notes.append("no embedding layer in the plan: E placed on the first language-model stage")
    if not any(s.count("loss") for s in llm):
        symbols[-1] = symbols[-1] + "L"
        notes.append(
            "the model has no LM loss (its loss is the action output); L marks where Megatron computes the loss: "
            "the last language-model stage"
        )
    return symbols, notes


# --------------------------------------------------------------------------- knobs and the 5D axes

# the cost model's CP algorithm -> Megatron-LM's --cp-comm-type
CP_COMM = {"ring": "p2p", "p2p": "p2p", "ulysses": "a2a", "a2a": "a2a", "allgather": "allgather", "all-gather": "allgather"}
# ZeRO stage -> (DistributedDataParallelConfig fields, flags): ZeRO-1 is the distributed optimizer (optimizer
# states sharded over dp), ZeRO-3 Megatron-FSDP sharding optimizer states, gradients and parameters
ZERO_SETTINGS: Mapping[int, tuple[Mapping[str, Any], tuple[str, ...]]] = MappingProxyType({
    0: ({}, ()),
    1: ({"use_distributed_optimizer": True}, ("--use-distributed-optimizer",)),
    3: ({"use_megatron_fsdp": True, "data_parallel_sharding_strategy": "optim_grads_params"},
        ("--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params")),
})
# recompute -> (TransformerConfig fields, flags): selective is the core attention (Megatron's default
# recompute_modules); full keeps each layer's input and replays its forward, as the cost model counts it
RECOMPUTE_SETTINGS: Mapping[str, tuple[Mapping[str, Any], tuple[str, ...]]] = MappingProxyType({
    "none": ({}, ()),
    "selective": ({"recompute_granularity": "selective"}, ("--recompute-granularity selective",)),
    "full": ({"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1},
             ("--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1")),
})


DISPATCHER = "alltoall"
"""Megatron's token dispatcher for the plan's experts: all-to-all over the ep ranks, as the cost model charges it."""


def _layer_freq(moe_layers: Sequence[bool]) -> str:
    """``--moe-layer-freq`` as Megatron-LM's Python-list expression, run-length coded: ``([0]*1+[1]*26)``."""
    runs: list[list[int]] = []
    for flag in moe_layers:
        if runs and runs[-1][0] == int(flag):
            runs[-1][1] += 1
        else:
            runs.append([int(flag), 1])
    return "(" + "+".join(f"[{v}]*{n}" for v, n in runs) + ")"


@dataclass(frozen=True)
class _Settings:
    """TransformerConfig fields, DistributedDataParallelConfig fields and the flags that set them."""

    core: Mapping[str, Any] = field(default_factory=dict)
    ddp: Mapping[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    te_core: Mapping[str, Any] = field(default_factory=dict)  # TransformerConfig fields megatron-core checks against TE

    def __add__(self, other: "_Settings") -> "_Settings":
        return _Settings({**self.core, **other.core}, {**self.ddp, **other.ddp},
                         tuple(dict.fromkeys(self.flags + other.flags)), {**self.te_core, **other.te_core})


def _zero_settings(zero: int) -> _Settings:
    """The settings of one ZeRO stage (:data:`ZERO_SETTINGS`)."""
    ddp, flags = ZERO_SETTINGS[zero]
    return _Settings({}, ddp, flags)


def megatron_recompute(knobs: Sequence[SegmentKnobs], acts: Sequence[Sequence[str] | None] | None,
                       rule: str) -> tuple[_Settings, list[str]]:
    """(settings, reasons) of the plan's recompute settings in Megatron-Core.

    ``none``, ``selective`` and ``full``: :data:`RECOMPUTE_SETTINGS`; a module
    set (:mod:`partitioner.costs.memory.recompute`): ``--recompute-granularity
    selective --recompute-modules m1 m2 ...`` (with ``moe_act``,
    ``--moe-grouped-gemm``, which Megatron-Core requires for it). Segments
    merge into one list when each runs as planned under it
    (:func:`~partitioner.costs.memory.recompute.merge_settings`: a module acts only
    on the layers that have it, ``acts`` per layer from the cost model's
    hints, :func:`~.stages.segment_acts`); else ``rule`` says why not.
    torchtitan's per-op policy (``op``) has no Megatron setting.
    """
    merged = merge_settings([(k.recompute, segment_acts(k, acts)) for k in knobs])
    if merged is None:
        _, mixed = one_recompute(knobs, rule)
        return _Settings(), mixed
    if merged == OP:
        return _Settings(), ["per-op selective recompute (torchtitan's SelectiveAC policy) has no Megatron-LM setting: "
                             "Megatron recomputes whole layers or the modules of --recompute-modules"]
    if merged in RECOMPUTE_SETTINGS:
        core, flags = RECOMPUTE_SETTINGS[merged]
        return _Settings(core, {}, flags), []
    mods = [m for m in RECOMPUTE_MODULES if m in modules_of(merged)]
    grouped = {"moe_grouped_gemm": True} if "moe_act" in mods else {}
    return _Settings({"recompute_granularity": "selective", "recompute_modules": mods, **grouped}, {},
                     ("--recompute-granularity selective", "--recompute-modules " + " ".join(mods),
                      *(("--moe-grouped-gemm",) if grouped else ()))), []


def _moe_settings(moe: MoeHints, ep: int, etp: int) -> tuple[_Settings, list[str]]:
    """``--num-experts`` and the MoE flags of a MoE language model, with its router and performance settings
    (:func:`.moe.moe_router_settings`), and their notes; ``etp`` the ranks the plan split each expert over
    (:func:`~partitioner.problem.expert_tensor_parallel`), always written."""
    core: dict[str, Any] = {
        "num_moe_experts": moe.num_experts, "moe_router_topk": moe.top_k, "moe_ffn_hidden_size": moe.ffn_hidden,
        "moe_token_dispatcher_type": DISPATCHER, "expert_model_parallel_size": ep, "expert_tensor_parallel_size": etp}
    flags = [f"--num-experts {moe.num_experts}", f"--moe-router-topk {moe.top_k}", f"--moe-ffn-hidden-size {moe.ffn_hidden}",
             f"--moe-token-dispatcher-type {DISPATCHER}", f"--expert-model-parallel-size {ep}", f"--expert-tensor-parallel-size {etp}"]
    if moe.shared_ffn:
        core.update(moe_shared_expert_intermediate_size=moe.shared_ffn)
        flags.append(f"--moe-shared-expert-intermediate-size {moe.shared_ffn}")
    if moe.moe_layers and not all(moe.moe_layers):
        core.update(moe_layer_freq=[int(b) for b in moe.moe_layers])
        flags.append(f'--moe-layer-freq "{_layer_freq(moe.moe_layers)}"')
    router = moe_router_settings(moe, DISPATCHER)
    return _Settings({**core, **router.core}, {}, (*flags, *router.flags), router.te_core), list(router.notes)


def _axis_settings(shape: tuple[int, ...], ctx: ExportContext) -> tuple[_Settings, list[str], list[str]]:
    """The 5D axes: ``--context-parallel-size`` with ``--cp-comm-type``, and the MoE flags; (settings, reasons, notes).

    ``--expert-tensor-parallel-size`` is what the plan charged (tp when the plan has no expert split), so that
    each rank builds the experts the plan's weights hold."""
    dp, tp, cp, ep, etp = shape
    etp = expert_tensor_parallel(tp, ep, etp)
    out, reasons = _Settings(), []
    if cp > 1:
        algo = ctx.cp_algorithm or "ring"
        if algo not in CP_COMM:
            reasons.append(f"context parallelism with algorithm {algo!r}: Megatron-LM's --cp-comm-type offers p2p (ring), "
                           "a2a (Ulysses), allgather and a2a+p2p")
        else:
            out += _Settings({"context_parallel_size": cp, "cp_comm_type": CP_COMM[algo]}, {},
                             (f"--context-parallel-size {cp}", f"--cp-comm-type {CP_COMM[algo]}"))
    moe = ctx.moe
    if ep > 1 and moe is None:
        reasons.append(f"the plan splits experts over ep {ep}, but its hints do not describe the model's experts "
                       "(export the result of `partitioner plan`, whose export_hints carry them)")
    if moe is not None:
        if moe.num_experts % ep:
            reasons.append(f"ep {ep} does not divide the model's {moe.num_experts} experts (Megatron-LM: num_moe_experts "
                           "% expert_model_parallel_size == 0)")
        if (dp * tp * cp) % (ep * etp):
            reasons.append(f"ep {ep} x etp {etp} does not divide tp {tp} x cp {cp} x dp {dp} (Megatron's expert rank "
                           "generator folds ep x etp onto the same ranks)")
        experts, notes = _moe_settings(moe, ep, etp)
        return out + experts, reasons, notes
    return out, reasons, []


def _knob_flags(stages: Sequence[StageView], shape: tuple[int, ...], ctx: ExportContext
                ) -> tuple[_Settings, list[str], list[str]]:
    """(settings, notes, reasons) of the knobs and 5D axes; Megatron-LM sets each knob once for all ranks and layers."""
    knobs, reasons = segment_knobs(stages)
    zero, notes, zr = one_zero(knobs, "Megatron-LM sets one optimizer sharding (--use-distributed-optimizer, or "
                                      "Megatron-FSDP's sharding strategy) for every rank")
    recompute, rr = megatron_recompute(knobs, ctx.recompute_acts, "Megatron-LM applies one --recompute-granularity (and "
                                       "one --recompute-modules list) to every layer of every stage (its VLM path copies "
                                       "the language config, recompute included, into the vision encoder's)")
    axes, ar, axis_notes = _axis_settings(shape, ctx)
    return _zero_settings(zero) + recompute + axes, notes + axis_notes, reasons + zr + rr + ar


# --------------------------------------------------------------------------- Megatron-LM flags


def _megatron_lm(stages: list[StageView], ctx: ExportContext) -> tuple[dict[str, Any], list[str], list[str], list[str]]:
    """(settings, flag lines, notes, reasons it cannot run the plan)."""
    schedule, v = ctx.schedule, ctx.chunks
    if schedule not in RULES.schedules:
        return {}, [], [], [SCHEDULE_REFUSALS.get(schedule, f"schedule {schedule!r} is not one Megatron-LM runs")]
    if schedule == "interleaved":
        chunk_why = chunk_reasons(stages, v)
        if chunk_why:
            return {}, [], [], chunk_why
    pre, llm, post = _split(stages)
    reasons: list[str] = []
    if pre:
        reasons.append(
            f"stage(s) {[s.index for s in pre]} run only the vision encoder/projector: Megatron-LM runs the vision "
            "encoder on the first pipeline stage (its separate encoder pipeline, --encoder-pipeline-model-parallel-size, "
            "was removed after megatron-core 0.13)"
        )
    if post:
        reasons.append(
            f"stage(s) {[s.index for s in post]} run only the action head: Megatron-LM's pipeline layout has no layer "
            "type for it (fold it into the last decoder stage)"
        )
    reasons += layout_reasons(llm, "Megatron-LM gives every pipeline stage, and every layer of a stage, the same TP and DP")
    reasons += mtp_reasons(llm, v)
    layout = _one_layout(llm)
    if reasons or layout is None:
        return {}, [], [], reasons
    dp, tp = layout[0], layout[1]
    b, why = per_replica_microbatch(ctx.global_batch, ctx.microbatches, dp)
    if why:
        return {}, [], [], [f"{why} (Megatron-LM: m = global batch / (micro-batch-size x dp))"]
    knobs, knob_notes, knob_reasons = _knob_flags(stages, layout, ctx)
    if knob_reasons:
        return {}, [], [], knob_reasons
    if ctx.mla is None and any(a and "mla_up_proj" in a for a in ctx.recompute_acts or ()):
        return {}, [], [], ["the plan's layers have multi-head latent attention (the mla_up_proj recompute module acts "
                            "on them), but its hints do not describe it: export the result of `partitioner plan`, whose "
                            "export_hints.mla carry the latent widths"]
    mla_core, mla_flags = latent_attention(ctx.mla)
    knobs = _Settings(mla_core, {}, tuple(mla_flags)) + knobs
    symbols, notes = _layout_symbols(llm)
    notes += knob_notes
    text = megatron_layout(symbols)
    n_layers = sum(s.count("decoder") for s in llm)
    pp = len(llm) // v  # interleaved: the layout lists the P·v chunks, chunk c on pipeline rank c mod P
    fp8_core, fp8_ddp, fp8_flags, fp8_notes, fp8_reasons = megatron_fp8(ctx.precision, n_layers, pp)
    if fp8_reasons:
        return {}, [], [], fp8_reasons
    knobs += _Settings(fp8_core, fp8_ddp, tuple(fp8_flags))
    notes += fp8_notes
    sequence_parallel = tp > 1 and ctx.sequence_parallel
    n_mtp = sum(s.count("mtp") for s in llm)
    core = {
        "num_layers": n_layers,
        **({"mtp_num_layers": n_mtp} if n_mtp else {}),
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": pp,
        "pipeline_model_parallel_layout": text,
        "sequence_parallel": sequence_parallel,
        "bf16": True,  # the cost model's bf16 activations; Megatron-LM derives pipeline_dtype from --bf16
        **knobs.core,
        **({"virtual_pipeline_model_parallel_size": v} if v > 1 else {}),
    }
    if v > 1:
        notes.append(
            f"interleaved 1F1B with {v} virtual stages per pipeline rank: the layout's {len(llm)} stages give it "
            f"(Megatron-LM sets virtual_pipeline_model_parallel_size = {len(llm)} / {pp}); do not also pass "
            "--num-virtual-stages-per-pipeline-rank or --num-layers-per-virtual-pipeline-stage: Megatron-LM refuses "
            "either together with --pipeline-model-parallel-layout"
        )
    settings: dict[str, Any] = {"path": "megatron-lm", "schedule": schedule, "transformer_config": core, "data_parallel_size": dp,
                                "ddp_config": dict(knobs.ddp), "microbatches": ctx.microbatches}
    if knobs.te_core:  # set by the flags too; megatron-core validates them only where Transformer Engine is installed
        settings["transformer_config_te"] = dict(knobs.te_core)
    flags = [
        f"--num-layers {n_layers}",
        *((f"--mtp-num-layers {n_mtp}",) if n_mtp else ()),
        f"--tensor-model-parallel-size {tp}",
        f"--pipeline-model-parallel-size {pp}",
        f'--pipeline-model-parallel-layout "{text}"',
        "--bf16",
        *(("--sequence-parallel",) if sequence_parallel else ()),
        *knobs.flags,
    ]
    if b is not None:
        settings.update(training={"micro_batch_size": b.micro, "global_batch_size": b.global_batch,
                                  "microbatches": b.microbatches})
        flags += [f"--micro-batch-size {b.micro}", f"--global-batch-size {b.global_batch}"]
    else:
        notes.append("no global batch or microbatch count given: set --micro-batch-size and --global-batch-size so that m holds")
    if tp > 1:
        notes.append("TP > 1: launch with CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's TP/sequence-parallel communication overlap needs it)")
        settings.update(env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    if "vision" in llm[0].roles:
        notes.append(
            "the vision encoder runs on the first pipeline stage (Megatron's LLaVA path); that path deep-copies the "
            "language config into the vision config, layout included: set vision_config.pipeline_model_parallel_layout "
            "= None (and the vision config's own num_layers), or the ViT is built with the decoder's layout and depth"
        )
    if any("action" in s.roles for s in llm):
        notes.append(
            "the action head runs after the decoder layers on the last language-model stage: it is not a layer type of "
            "Megatron's layout; attach it as the model's post-process (output) module"
        )
    fused = sorted({m for s in llm for m in s.modules if "+" in m})
    if fused:
        notes.append(
            "each decoder layer also holds the action expert's layer (" + ", ".join(fused)
            + ": attention shared at every layer); Megatron's GPT layout has no such layer type, the cuts apply to both"
        )
    return settings, flags, notes, []


# --------------------------------------------------------------------------- MIMO grids


@dataclass(frozen=True)
class ModuleGrid:
    """One Megatron Bridge ``ModuleParallelismConfig``: a module's (tp, pp, dp) and its first rank."""

    tp: int
    pp: int
    dp: int
    rank_offset: int

    @property
    def size(self) -> int:
        """The ranks the module spans: tp x pp x dp."""
        return self.tp * self.pp * self.dp

    def to_dict(self) -> dict[str, Any]:
        """The ``ModuleParallelismConfig`` keyword arguments."""
        return {"tensor_model_parallel_size": self.tp, "pipeline_model_parallel_size": self.pp,
                "data_parallel_size": self.dp, "rank_offset": self.rank_offset}


@dataclass(frozen=True)
class MimoGrid:
    """A valid Megatron Bridge ``MimoParallelismConfig``: per module its grid, and how the modules share the world."""

    deployment_mode: str
    modules: Mapping[str, ModuleGrid]
    llm_module_name: str = "llm"

    @property
    def llm(self) -> ModuleGrid:
        return self.modules[self.llm_module_name]

    def to_dict(self) -> dict[str, Any]:
        """The ``MimoParallelismConfig`` fields."""
        return {"llm_module_name": self.llm_module_name, "deployment_mode": self.deployment_mode,
                "module_parallelisms": {name: g.to_dict() for name, g in self.modules.items()}}


def _module_entry(stages: Sequence[StageView], segs: str) -> tuple[ModuleGrid | None, str | None]:
    """One module's grid from all its stages, or why there is none.

    The segments that count: those with vision layers for ``"vision"``,
    those with language-model (or action) layers for ``"llm"``; the
    projector follows whichever module it shares a stage with.
    """
    layouts = set()
    for s in stages:
        for seg in s.segments:
            roles = s.segment_roles(seg)
            if any(r == "vision" if segs == "vision" else r not in VISION_ROLES for r in roles):
                layouts.add((seg.dp, seg.tp))  # cp/ep/etp: refused by export_megatron for MIMO
    if len(layouts) != 1:
        return None, "its stages use " + ", ".join(f"dp {d} x tp {t}" for d, t in sorted(layouts)) + " (a module has one layout)"
    dp, tp = next(iter(layouts))
    ids = sorted(d for s in stages for d in s.device_ids)
    return ModuleGrid(tp, len(stages), dp, ids[0]), None


def _heterogeneous(modules: Sequence[tuple[str, Sequence[StageView], ModuleGrid]], world: int) -> list[str]:
    """Why disjoint modules do not each sit on consecutive ranks in stage order, tiling the world; [] when they do."""
    reasons = []
    for name, mod, g in modules:
        if sum(s.devices for s in mod) != g.size:
            reasons.append(f"MIMO module {name!r}: its stages have unequal sizes {[s.devices for s in mod]} (pp x dp x tp ranks)")
        elif not _stage_order_ranks(mod, g.rank_offset):
            reasons.append(
                f"MIMO module {name!r}: its stages' GPUs {[list(s.device_ids) for s in mod]} are not consecutive ranks "
                "in stage order from its rank_offset"
            )
    ends = sorted((g.rank_offset, g.rank_offset + g.size) for _, _, g in modules)
    if not reasons and (ends[0][0] != 0 or ends[-1][1] != world or any(a[1] != b[0] for a, b in zip(ends, ends[1:]))):
        reasons.append(f"MIMO modules' rank ranges {ends} do not tile the world 0..{world - 1}")
    return reasons


def _colocated(modules: Sequence[tuple[str, Sequence[StageView], ModuleGrid]], world: int, shared: set[int]) -> list[str]:
    """Why modules sharing GPUs do not each span the whole world; [] when they do."""
    reasons = []
    for name, mod, g in modules:
        covered = sorted(d for s in mod for d in s.device_ids)
        if covered != list(range(world)) or g.size != world:
            reasons.append(
                f"MIMO module {name!r} shares GPUs with another module (stage(s) {sorted(shared)}), so a valid grid "
                f"is colocated: every module on all {world} ranks; {name!r} runs on {len(covered)} GPUs"
            )
    return reasons


def mimo_grid(stages: Sequence[StageView], world: int) -> tuple[MimoGrid | None, list[str]]:
    """Megatron Bridge ``MimoParallelismConfig`` for the plan, or the reasons there is no valid one.

    Modules: ``vision`` (the stages holding vision/projector layers before
    the language model) and ``llm`` (the stages holding language-model
    layers). Valid grids: disjoint modules on consecutive ranks in stage
    order that tile ``0..world-1`` (heterogeneous), or modules that each
    span the whole world from rank 0 (colocated).
    """
    reasons: list[str] = []
    vision = [s for s in stages if "vision" in s.roles]
    llm = [s for s in stages if s.is_llm]
    post = [s for s in stages if s.index > llm[-1].index]
    if post:
        reasons.append(
            f"stage(s) {[s.index for s in post]} run only the action head: MIMO's modules are modality encoders feeding "
            "the one language module, nothing runs after it"
        )
    modules: list[tuple[str, Sequence[StageView], ModuleGrid]] = []
    for name, mod in (("vision", vision), ("llm", llm)):
        grid, why = _module_entry(mod, name)
        if grid is None:
            reasons.append(f"MIMO module {name!r}: {why}")
        else:
            modules.append((name, mod, grid))
    if reasons:
        return None, reasons
    shared = {s.index for s in vision} & {s.index for s in llm}
    mode = "colocated" if shared else "heterogeneous"
    reasons = _colocated(modules, world, shared) if shared else _heterogeneous(modules, world)
    if reasons:
        return None, reasons
    return MimoGrid(mode, {name: g for name, _, g in modules}), []


# --------------------------------------------------------------------------- exporter


def _not_expressible(stages: Sequence[StageView], reasons: Sequence[str], notes: Sequence[str] = ()) -> Export:
    return Export("megatron", {"path": None, "stage_layouts": _stage_layouts(stages)},
                  "# (no Megatron setting expresses this plan: see the reasons above)", tuple(notes), False, tuple(reasons),
                  CHECKED_WITH)


def export_megatron(stages: list[StageView], ctx: ExportContext) -> Export:
    """Megatron-LM flags when they express the plan, else a valid MIMO grid, else the reasons."""
    if not any(s.is_llm for s in stages):
        return Export("megatron", {}, "# (no Megatron setting expresses this plan)", (), False,
                      ("this plan has no language-model stage; Megatron's pipeline layout describes decoder stages",), CHECKED_WITH)
    settings, flags, notes, lm_reasons = _megatron_lm(stages, ctx)
    if not lm_reasons:
        if any(r in VISION_ROLES for s in stages for r in s.roles):
            recipe = BRIDGE_RECIPES.get(ctx.model or "")
            if recipe is not None:
                return _bridge_export(stages, settings, notes, recipe, ctx)
            return _template_export(settings, flags, notes, ctx)
        env = "export CUDA_DEVICE_MAX_CONNECTIONS=1\n" if "env" in settings else ""
        snippet = env + "torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $MODEL_ARGS \\\n    " + " \\\n    ".join(flags)
        return Export("megatron", {**settings, "launch": "command"}, snippet, tuple(notes), True, (), CHECKED_WITH)
    lm = tuple(f"Megatron-LM: {r}" for r in lm_reasons)
    if ctx.schedule != "1f1b":
        return _not_expressible(stages, lm + (f"MIMO: the export writes MIMO grids for 1F1B plans only (this plan is for "
                                              f"{ctx.schedule})",))
    grid, mimo_reasons = mimo_grid(stages, sum(s.devices for s in stages))
    if grid is None:
        return _not_expressible(stages, lm + tuple(f"MIMO: {r}" for r in mimo_reasons))
    exported, mimo_reasons, notes = _mimo_export(stages, grid, ctx, lm_reasons)
    return exported or _not_expressible(stages, lm + tuple(f"MIMO: {r}" for r in mimo_reasons), notes)


# notes of the Megatron-LM flags that the Bridge recipe's provider makes moot (it reads the router from the
# checkpoint's config and builds the vision encoder with its own config)
_LM_ONLY_NOTES = ("--moe-router-topk-scaling-factor", "do not state the router", "Megatron's LLaVA path")


def _bridge_export(stages: Sequence[StageView], settings: Mapping[str, Any], notes: Sequence[str], recipe: BridgeRecipe,
                   ctx: ExportContext) -> Export:
    """The plan as its Megatron Bridge recipe's launch (:mod:`.bridge`), or why the overrides cannot set it."""
    core, ddp = settings["transformer_config"], settings["ddp_config"]
    te_core = settings.get("transformer_config_te", {})
    training = settings.get("training")
    batch = (training["micro_batch_size"], training["global_batch_size"]) if training else None
    fp8 = None
    if core.get("fp8"):
        fp8, why = bridge_fp8(str(core["fp8_recipe"]), bool(core.get("fp8_param")),
                              int(core.get("num_layers_at_start_in_bf16", 0)) if core.get("first_last_layers_bf16") else 0)
        if why:
            return _not_expressible(list(stages), (f"Megatron Bridge: {why}",))
    overrides = bridge_overrides(core, ddp, te_core, batch, fp8, ctx.seq_length)
    env = dict(settings.get("env", {}))
    world = settings["data_parallel_size"] * core["tensor_model_parallel_size"] * core["pipeline_model_parallel_size"] \
        * core.get("context_parallel_size", 1)
    out = {**settings, "path": "megatron-bridge", "launch": "command",
           "bridge": {"commit": BRIDGE_COMMIT, "recipe": recipe.function, "step_func": recipe.step_func,
                      "hf_path": recipe.hf_path, "source": recipe.source, "overrides": overrides}}
    kept = [n for n in notes if not any(m in n for m in _LM_ONLY_NOTES)]
    kept.append(f"Megatron Bridge's {recipe.function} (full SFT: vision encoder, projector and language model "
                "trained) with the plan's overrides; the model's shape and router (experts, top-k, score function, "
                "expert bias, scaling factor, load-balancing loss) are its provider's, read from "
                f"{recipe.hf_path}'s config; the vision encoder runs on the first pipeline stage, as the plan has it")
    if batch is None:
        kept.append("no global batch or microbatch count given: add train.micro_batch_size and train.global_batch_size "
                    "so that m holds")
    if ctx.seq_length is None:
        kept.append("the plan's sequence length is not in the result: add dataset.seq_length=<tokens per sample the "
                    "plan was costed with> (the recipe's own is its default)")
    return Export("megatron", out, bridge_snippet(recipe, overrides, world, env), tuple(kept), True, (),
                  f"megatron-core 0.16.1 (the overrides' TransformerConfig and DDP-config fields); Megatron Bridge recipe, "
                  f"runner and field names at {BRIDGE_COMMIT[:12]} (Bridge itself not run: it needs Transformer Engine)")


def _template_export(settings: Mapping[str, Any], flags: Sequence[str], notes: Sequence[str],
                     ctx: ExportContext) -> Export:
    """A VLM without a Megatron Bridge recipe: the layout as Megatron-LM flags, marked as a template, not a launch."""
    env = "export CUDA_DEVICE_MAX_CONNECTIONS=1\n" if "env" in settings else ""
    head = ("# TEMPLATE, not a launch: neither Megatron-LM nor Megatron Bridge ships an entry point for "
            f"{ctx.model or 'this VLM'}; these flags set the language model's layout and knobs in the model code you "
            "bring (pretrain_gpt.py trains the language model alone)\n")
    snippet = head + env + "torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $MODEL_ARGS \\\n    " + " \\\n    ".join(flags)
    kept = [*notes, "template: the vision encoder and projector need model code of their own (Megatron Bridge has "
                    "recipes for Qwen2.5-VL, Qwen3-VL and GLM-4.5V: " + ", ".join(sorted(BRIDGE_RECIPES)) + ")"]
    return Export("megatron", {**settings, "launch": "template"}, snippet, tuple(kept), True, (), CHECKED_WITH)


def _mimo_fp8(stages: Sequence[StageView], grid: MimoGrid, hints: PrecisionHints,
              module_knobs: Mapping[str, Mapping[str, dict[str, Any]]]) -> tuple[list[str], list[str]]:
    """Each MIMO module's FP8 (each is a Megatron model of its own) added to its knobs: (notes, reasons)."""
    n_llm = sum(s.count("decoder") for s in stages)
    notes: list[str] = []
    reasons: list[str] = []
    for name, knobs in module_knobs.items():
        mine = replace(hints, bf16_layers=0) if name != "llm" and hints.bf16_layers else hints  # the LM's edge layers
        core8, ddp8, _, notes8, why8 = megatron_fp8(mine, n_llm, grid.llm.pp)
        knobs["transformer_config"].update(core8)
        knobs["ddp_config"].update(ddp8)
        reasons += [f"MIMO module {name!r}: {w}" for w in why8]
        notes += [n for n in notes8 if n not in notes]
    return notes, reasons


def _mimo_export(stages: Sequence[StageView], grid: MimoGrid, ctx: ExportContext,
                 lm_reasons: Sequence[str]) -> tuple[Export | None, list[str], list[str]]:
    """The export of a valid MIMO grid, or why its axes, knobs, FP8 or batch cannot be set (and its notes so far)."""
    reasons = []
    axes = sorted({f"{a} {v}" for s in stages for g in s.segments for a, v in zip(("cp", "ep", "etp"), g.shape[2:]) if v != 1})
    if axes:
        reasons.append("the plan uses " + ", ".join(axes) + ": the export writes MIMO grids of (tp, pp, dp) only")
    module_knobs, knob_reasons = _mimo_knobs(stages)
    reasons += knob_reasons
    notes: list[str] = []
    if ctx.precision is not None:
        notes, fp8_reasons = _mimo_fp8(stages, grid, ctx.precision, module_knobs)
        reasons += fp8_reasons
    micro = []
    for name, g in grid.modules.items():
        b, why = per_replica_microbatch(ctx.global_batch, ctx.microbatches, g.dp)
        if why:
            reasons.append(f"MIMO module {name!r}: {why}")
        elif b is not None:
            micro.append(f"{name}: {b.micro}")
    if reasons:
        return None, reasons, notes
    _, llm, _ = _split(stages)
    symbols, layout_notes = _layout_symbols(llm)
    notes += layout_notes
    settings = {"path": "mimo", "launch": "template", "mimo": grid.to_dict(), "llm_transformer_config": {
        "num_layers": sum(s.count("decoder") for s in llm),
        "pipeline_model_parallel_size": grid.llm.pp,
        "tensor_model_parallel_size": grid.llm.tp,
        "pipeline_model_parallel_layout": megatron_layout(symbols),
    }, "module_knobs": module_knobs}
    if micro:
        notes.append(f"per-replica microbatch of each module (m = {ctx.microbatches}): " + ", ".join(micro))
    if any("projector" in s.roles for s in llm):
        notes.append(
            "the projector runs on the language-model GPUs (it sends the small vision features across, "
            "seed lesson 15); MIMO keeps it in the vision submodule: move it there or customize the submodule"
        )
    if any(g.tp > 1 for g in grid.modules.values()):
        notes.append("TP > 1: launch with CUDA_DEVICE_MAX_CONNECTIONS=1")
    notes.append("Megatron-LM flags cannot run it: " + "; ".join(lm_reasons))
    notes.append("template: a MimoParallelismConfig for your MIMO model, not a launch (Megatron Bridge ships no MIMO "
                 "recipe for this model); its finalize (rank ranges, world) is Bridge's and is not run here")
    snippet = "# TEMPLATE, not a launch: the plan's MIMO grid (Megatron Bridge)\n" + _mimo_snippet(grid, module_knobs)
    return Export("megatron", settings, snippet, tuple(notes), True, (), CHECKED_WITH), [], notes


def _stage_layouts(stages: Sequence[StageView]) -> list[dict[str, Any]]:
    return [{"stage": s.index, "layers": [s.first, s.last],
             "segments": [{"layers": [g.first, g.last], "dp": g.dp, "tp": g.tp, "cp": g.cp, "ep": g.ep, "etp": g.etp,
                           "variant": g.variant} for g in s.segments]} for s in stages]


def _mimo_knobs(stages: Sequence[StageView]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Per MIMO module, its TransformerConfig recompute fields and DDP-config optimizer fields; or why not.

    Each MIMO module is its own Megatron model with its own configs, so the
    knobs may differ between modules but not inside one.
    """
    knobs, reasons = segment_knobs(stages)
    out: dict[str, dict[str, Any]] = {}
    for name in ("vision", "llm"):
        mine = [k for k in knobs if (("vision" in k.roles) if name == "vision" else not all(r in VISION_ROLES for r in k.roles))]
        zero, _, zr = one_zero(mine, f"MIMO module {name!r} has one optimizer setting")
        recompute, rr = megatron_recompute(mine, None, f"MIMO module {name!r} has one TransformerConfig")
        reasons += zr + rr
        settings = _zero_settings(zero) + recompute
        out[name] = {"transformer_config": dict(settings.core), "ddp_config": dict(settings.ddp)}
    return out, reasons


def _mimo_snippet(grid: MimoGrid, module_knobs: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    lines = [
        "from megatron.bridge.models.mimo.mimo_config import MimoParallelismConfig, ModuleParallelismConfig",
        "",
        "parallelism = MimoParallelismConfig(",
        f"    llm_module_name={grid.llm_module_name!r},",
        f"    deployment_mode={grid.deployment_mode!r},",
        "    module_parallelisms={",
    ]
    for name, g in grid.modules.items():
        args = ", ".join(f"{k}={v}" for k, v in g.to_dict().items())
        lines.append(f"        {name!r}: ModuleParallelismConfig({args}),")
    lines += ("    },", ")")
    for name, k in (module_knobs or {}).items():
        for cfg, values in k.items():
            for key, value in values.items():
                lines.append(f"# module {name!r}: {cfg}.{key} = {value!r}")
    return "\n".join(lines)
