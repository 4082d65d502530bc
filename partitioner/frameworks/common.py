"""The records every framework home shares: its rules, the export context, the export and the layer hints.

* :class:`FrameworkRules`: what one framework runs (schedules, ZeRO stages,
  recompute, mesh axes, where it may cut, its bytes-per-parameter count per
  ZeRO stage). Each home states its own once (``RULES`` of
  :mod:`partitioner.frameworks.megatron` and the others); the planner
  (:mod:`partitioner.planning.targets`) and the exporters read them.
* :class:`ExportContext`: what an exporter knows besides the plan (batch,
  m, schedule, MoE hints, CP algorithm, the plan's schedule table).
* :class:`Export`: one framework's settings for a plan, or why there are none.
* :class:`ExportHints`, :class:`MoeHints`: what a ``plan`` result carries for
  its exports, and the language model's experts; the layers' roles and
  FQNs are :class:`~partitioner.problem.LayerHint` records (re-exported here).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..costs.memory.recompute import OP, is_module_setting
from ..costs.variants import Knobs
from ..presets import MlaHints, ModelSpec, is_moe_layer
from ..problem import LayerHint

__all__ = ["FrameworkRules", "Mesh", "CutGroups", "one_group_per_layer", "ExportContext", "ScheduleTime", "PlanArgs",
           "Export", "ExportHints", "LayerHint", "MoeHints", "MlaHints", "PrecisionHints", "LLM_ROLES", "VISION_ROLES"]

# the language model's layer roles (the cost model's hints; mtp: its multi-token prediction modules)
LLM_ROLES = ("embedding", "decoder", "mtp", "loss")
VISION_ROLES = ("vision", "projector")  # the vision encoder's and projector's
Mesh = tuple[int, int, int, int, int]  # (dp, tp, cp, ep, etp): the one mesh of a framework's plan
CutGroups = Callable[[Sequence[str]], list[tuple[int, int]]]


def one_group_per_layer(roles: Sequence[str]) -> list[tuple[int, int]]:
    """Every layer its own group: a framework that may cut between any two layers."""
    return [(i, i) for i in range(len(roles))]


@dataclass(frozen=True)
class FrameworkRules:
    """What one training framework runs, stated once in its home and read by the planner and its exporter.

    Parameters
    ----------
    name : str
        The framework (``plan --target`` and ``export --to`` say it).
    schedules : tuple of str
        The pipeline schedules it runs (a plan under another is refused, never run under one of these).
    zero : tuple of int
        The ZeRO stages it sets (one for the whole model).
    recompute : tuple of str
        The recompute settings it has (``none``, ``selective``, ``full``, torchtitan's per-op ``op``).
    recompute_decoder_only : bool
        Whether it recomputes only the blocks holding decoder layers.
    cut_groups : callable
        Layer roles -> the runs ``(first, last)`` of layers no stage cut may
        separate (singletons where it may cut anywhere); a
        :class:`~partitioner.problem.ProblemError` at ``target`` when the
        model cannot meet the rule.
    memory : mapping of int to str
        ZeRO stage -> the bytes-per-parameter count its optimizer keeps there
        (a name of :data:`partitioner.costs.PARAM_MEMORY`).
    cp : bool
        Whether it runs context parallelism.
    etp : bool
        Whether it runs an expert tensor-parallel size of its own.
    recompute_per_stage : bool
        Whether each pipeline stage sets its own recompute (else one setting for the model).
    fp8_recipes : tuple of str
        The FP8 scaling recipes it trains with (:data:`partitioner.costs.compute.fp8.RECIPES`; none: no FP8 training).
    fp8_note : str
        Where that comes from (said when a plan's recipe is refused).
    modules : bool
        Whether it runs module recompute (Megatron's ``--recompute-modules``: any module set of
        :mod:`partitioner.costs.memory.recompute`).
    expert_fused_glu : bool
        Whether its routed experts run the gated activation fused, keeping 3f per routed token copy instead of
        4f (:attr:`partitioner.costs.CostOptions.expert_fused_glu`; ``plan --target`` and a recipe read from
        its files charge it unless the user sets the option).
    mtp_stages : int or None
        The most pipeline stages a plan may have when its model trains multi-token prediction modules
        (None: any number; 0: it trains none). Its exporter states the reason where the framework's own code
        refuses (``_mtp_reasons`` in its home).
    """

    name: str
    schedules: tuple[str, ...]
    zero: tuple[int, ...]
    recompute: tuple[str, ...]
    recompute_decoder_only: bool
    cut_groups: CutGroups
    memory: Mapping[int, str]
    cp: bool = True
    etp: bool = True
    recompute_per_stage: bool = False
    fp8_recipes: tuple[str, ...] = ()
    fp8_note: str = ""
    modules: bool = False
    expert_fused_glu: bool = True
    mtp_stages: int | None = None

    def runs_mesh(self, mesh: Mesh) -> bool:
        """Whether the framework runs the one mesh ``(dp, tp, cp, ep, etp)``."""
        return (self.cp or mesh[2] == 1) and (self.etp or mesh[4] == 1)

    def allows(self, knobs: Knobs) -> bool:
        """Whether it sets the ZeRO stage and recompute of ``knobs`` (a module set when it runs :attr:`modules`)."""
        return knobs.zero in self.zero and (knobs.recompute in self.recompute or (
            self.modules and is_module_setting(knobs.recompute) and knobs.recompute != OP))


@dataclass(frozen=True)
class ScheduleTime:
    """One simulated iteration of a plan's schedule table: what the re-plan hint of a refused schedule compares."""

    schedule: str
    virtual_stages: int
    iteration_ms: float


@dataclass(frozen=True)
class PlanArgs:
    """The ``plan`` arguments of a result (the re-plan command a refused schedule shows)."""

    model: str
    cluster: str
    nodes: int
    global_batch: int


@dataclass(frozen=True)
class ExportContext:
    """What an exporter knows besides the plan and its layer hints.

    Parameters
    ----------
    global_batch, microbatches : int or None
        The global batch and m; both are needed to set the batch so that m holds.
    schedule : str
        The plan's pipeline schedule (under ``interleaved`` the plan's stages are its P·v chunks).
    virtual_stages : int
        v of an interleaved plan (1 otherwise).
    sequence_parallel : bool
        Megatron-LM's ``--sequence-parallel`` with tp > 1.
    torchtitan_base : str or None
        The ``config_registry`` function the torchtitan snippet starts from.
    precision : PrecisionHints or None
        The plan's FP8 training (None: BF16).
    moe : MoeHints or None
        The language model's experts (a MoE model).
    cp_algorithm : str or None
        The context-parallel attention the plan was costed with.
    recompute_acts : tuple or None
        Per layer of the plan, the recompute modules that act on it (the cost
        model's hints; None for a layer without, or none at all): where
        Megatron's one ``--recompute-modules`` list acts.
    by_schedule : tuple of ScheduleTime
        ``plan``'s schedule table (the re-plan hint of a refused schedule).
    plan_args : PlanArgs or None
        The ``plan`` arguments (the re-plan command).
    model : str or None
        The model preset's name (``export_hints.model``): picks a framework's own recipe for it
        (Megatron Bridge's for the VLMs NVIDIA ships recipes for).
    seq_length : int or None
        The language model's tokens per sample the plan was costed with (a recipe's own sequence
        length is set to it).
    mla : MlaHints or None
        The language model's multi-head latent attention, multi-token prediction and group routing
        (``export_hints.mla``; None: none of them, or a result written before they were hinted).
    """

    global_batch: int | None = None
    microbatches: int | None = None
    schedule: str = "1f1b"
    virtual_stages: int = 1
    sequence_parallel: bool = True
    torchtitan_base: str | None = None
    precision: "PrecisionHints | None" = None
    moe: "MoeHints | None" = None
    cp_algorithm: str | None = None
    recompute_acts: tuple[tuple[str, ...] | None, ...] | None = None
    by_schedule: tuple[ScheduleTime, ...] = ()
    plan_args: PlanArgs | None = None
    model: str | None = None
    seq_length: int | None = None
    mla: MlaHints | None = None

    @property
    def chunks(self) -> int:
        """v: the model chunks per pipeline rank (1 unless the plan is interleaved)."""
        return self.virtual_stages if self.schedule == "interleaved" and self.virtual_stages >= 1 else 1


@dataclass(frozen=True)
class Export:
    """One framework's settings for a plan.

    ``settings`` is machine-readable, ``snippet`` paste-ready, ``notes``
    advice that does not change what runs. ``expressible`` is False when
    the framework cannot run the plan as planned; ``reasons`` then says
    why. ``checked_with`` names the framework versions the settings were
    checked against.
    """

    target: str
    settings: Mapping[str, Any]
    snippet: str
    notes: tuple[str, ...] = ()
    expressible: bool = True
    reasons: tuple[str, ...] = ()
    checked_with: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "expressible": self.expressible,
            "reasons": list(self.reasons),
            "checked_with": self.checked_with,
            "settings": dict(self.settings),
            "snippet": self.snippet,
            "notes": list(self.notes),
        }

    def text(self) -> str:
        lines = [f"# NOT EXPRESSIBLE in {self.target}: {r}" for r in self.reasons]
        lines += [f"# checked with {self.checked_with}"] if self.checked_with else []
        lines += [self.snippet.rstrip()]
        lines += [f"# note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class MoeHints:
    """The language model's mixture of experts, as the exports need it.

    ``moe_layers`` says, per decoder layer of the language model, whether it
    has routed experts (the others have the dense MLP); ``shared_ffn`` is
    the width of the shared experts together (0: none). The router:
    ``router_score`` its scoring function (``softmax`` or ``sigmoid``),
    ``norm_topk`` whether the k chosen weights are renormalised to sum to 1,
    ``expert_groups`` / ``group_top_k`` group-limited routing (0: none), as
    the model's :class:`~partitioner.presets.ModuleSpec` states them;
    ``router_score`` empty: the router is not stated (hints written before
    these fields were), and the exports write no routing settings.
    ``topk_scale`` multiplies the routed experts' combined output
    (``routed_scaling_factor``; 0: not stated, hints written before it was).
    """

    num_experts: int
    top_k: int
    ffn_hidden: int
    shared_ffn: int = 0
    moe_layers: tuple[bool, ...] = ()
    router_score: str = ""
    norm_topk: bool = False
    expert_groups: int = 0
    group_top_k: int = 0
    topk_scale: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"num_experts": self.num_experts, "top_k": self.top_k, "ffn_hidden": self.ffn_hidden,
                "shared_ffn": self.shared_ffn, "moe_layers": [int(b) for b in self.moe_layers],
                "router_score": self.router_score, "norm_topk": self.norm_topk, "expert_groups": self.expert_groups,
                "group_top_k": self.group_top_k, "topk_scale": self.topk_scale}

    @classmethod
    def of_model(cls, spec: ModelSpec) -> "MoeHints | None":
        """The experts of the language model of ``spec`` (``export_hints.moe``), None for a dense model.

        Layer i of the ``llm`` module is a MoE layer per :func:`partitioner.presets.is_moe_layer`.
        """
        llm = next((m for m in spec.modules if m.kind == "llm" and m.experts), None)
        if llm is None:
            return None
        return cls(llm.experts, llm.top_k, llm.moe_ffn, llm.shared_ffn, tuple(is_moe_layer(llm, i) for i in range(llm.layers)),
                   router_score=llm.router_score, norm_topk=llm.norm_topk, expert_groups=llm.expert_groups,
                   group_top_k=llm.group_top_k, topk_scale=llm.routed_scale)


@dataclass(frozen=True)
class PrecisionHints:
    """The plan's FP8 training, as the exports need it (``export_hints.precision``; absent under BF16).

    ``fp8_recipe`` is the cost option's recipe (:data:`partitioner.costs.compute.fp8.FP8_RECIPES`),
    ``param_gather`` whether the parameters are kept in fp8, ``bf16_layers``
    the decoder layers kept in BF16 at each end of the language model.
    """

    fp8_recipe: str
    param_gather: bool
    bf16_layers: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"precision": "fp8", "fp8_recipe": self.fp8_recipe, "fp8_param_gather": self.param_gather,
                "fp8_bf16_layers": self.bf16_layers}


@dataclass(frozen=True)
class ExportHints:
    """What a ``plan`` result carries for its exports (its ``export_hints``).

    ``layers`` gives each layer's role and module FQNs, ``moe`` the language
    model's experts (a MoE model), ``precision`` its FP8 training (none
    under BF16), ``cp_algorithm`` the context-parallel
    attention the plan was costed with (when the result names one), ``mla``
    the language model's latent attention, multi-token prediction and group
    routing (:class:`~partitioner.presets.MlaHints`; none without them).
    """

    model: str
    layers: tuple[LayerHint, ...]
    moe: MoeHints | None = None
    precision: PrecisionHints | None = None
    cp_algorithm: str | None = None
    mla: MlaHints | None = None

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"model": self.model, "layers": [h.to_dict() for h in self.layers]}
        if self.moe is not None:
            doc.update(moe=self.moe.to_dict())
        if self.precision is not None:
            doc.update(precision=self.precision.to_dict())
        if self.cp_algorithm is not None:
            doc.update(cp_algorithm=self.cp_algorithm)
        if self.mla is not None:
            doc.update(mla=self.mla.to_dict())
        return doc
