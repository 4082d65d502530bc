"""A layout as a user states it -- Megatron-style sizes, batch and memory knobs -- and where each value came from.

Contract: :class:`Recipe` is one model-wide training layout in the terms
Megatron-LM's launch flags use: ``tp``, ``pp``, ``vpp``, ``cp``, ``ep``, ``etp``
(None: Megatron's default, the tensor-parallel size), the microbatch size ``mbs``
per data-parallel replica and the global batch ``gbs``, the ZeRO stage (1 is the
distributed optimizer, 3 Megatron-FSDP / FSDP), the recompute setting (none,
selective, full, or Megatron-Core ``--recompute-modules`` joined by ``+``) and an
optional ``--pipeline-model-parallel-layout`` string. The recipe readers of the
framework homes (:mod:`.megatron.recipe`, :mod:`.torchtitan.recipe`) and the
``estimate`` command build one; :mod:`partitioner.planning.recipes.estimate` turns
it into a plan.

More (the detail of this module): ``docs/internals/frameworks.md``, section ``partitioner.frameworks.recipe``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ..costs.axes.options import CP_ALGORITHMS
from ..costs.memory.recompute_names import canonical_setting
from ..costs.variants import Knobs
from ..problem import ProblemError

__all__ = ["Recipe", "RECIPE_FIELDS", "ZERO_STAGES"]

ZERO_STAGES = (0, 1, 3)
"""The ZeRO stages the cost model prices (0; 1 = the distributed optimizer; 3 = FSDP full shard)."""

RECIPE_FIELDS: Mapping[str, str] = MappingProxyType({
    "tp": "--tp", "pp": "--pp", "vpp": "--vpp", "cp": "--cp", "ep": "--ep", "etp": "--etp", "dp": "--dp",
    "mbs": "--mbs", "gbs": "--gbs", "zero": "--zero", "recompute": "--recompute", "pipeline_layout":
    "--pipeline-model-parallel-layout", "num_layers": "--num-layers", "nodes": "--nodes", "precision": "--precision",
    "fp8_recipe": "--fp8-recipe", "sequence_parallel": "--sequence-parallel",
    "first_stage_layers": "--decoder-first-pipeline-num-layers", "last_stage_layers": "--decoder-last-pipeline-num-layers",
    "memory_count": "-c memory_count", "cp_algorithm": "--cp-comm-type",
    "expert_fused_glu": "-c expert_fused_glu", "layer_parts": "PipelineModule parts",
})
"""Each field of :class:`Recipe` and the ``estimate`` option that states it (the default of ``origin``)."""

_POSITIVE = ("tp", "pp", "vpp", "cp", "ep", "mbs")
_OPTIONAL_POSITIVE = ("etp", "dp", "gbs", "num_layers", "nodes", "first_stage_layers", "last_stage_layers")


@dataclass(frozen=True)
class Recipe:
    """One model-wide layout, stated as Megatron-LM's flags state it [1]_.

    Parameters
    ----------
    tp, pp, vpp, cp, ep : int
        Tensor-, pipeline-, virtual-pipeline-, context- and expert-parallel sizes (1: off).
    etp : int or None
        Expert tensor-parallel size; None is Megatron-LM's default, ``tp``.
    dp : int or None
        The data-parallel size when stated (a check: Megatron derives it as world / (tp pp cp)).
    mbs : int
        Samples per microbatch per data-parallel replica (``--micro-batch-size``).
    gbs : int or None
        Samples per iteration (``--global-batch-size``); None when not stated.
    zero : int
        0, 1 (``--use-distributed-optimizer``) or 3 (Megatron-FSDP ``optim_grads_params``, FSDP full shard).
    recompute : str
        ``none``, ``selective``, ``full`` or Megatron-Core recompute modules joined by ``+`` (canonical spelling).
    pipeline_layout : str or None
        A ``--pipeline-model-parallel-layout`` string; None: Megatron's even split.
    num_layers : int or None
        ``--num-layers`` when stated (checked against the model's decoder layers).
    nodes : int or None
        Nodes when the recipe states them (torchrun's ``--nnodes``).
    precision, fp8_recipe : str or None
        ``fp8`` and its scaling recipe when the recipe trains in FP8 (``--fp8-format``, ``--fp8-recipe``).
    sequence_parallel : bool or None
        Megatron's ``--sequence-parallel`` as the recipe states it; None: the cost options' (on by default).
    first_stage_layers, last_stage_layers : int or None
        Decoder layers of the first and of the last pipeline stage (Megatron-LM's
        ``--decoder-first-pipeline-num-layers`` and ``--decoder-last-pipeline-num-layers``: an uneven split,
        the stages between them splitting the rest evenly).
    memory_count : str or None
        The framework's count of weight, gradient and optimizer bytes
        (:data:`~partitioner.costs.memory.param_memory.PARAM_MEMORY`) at the recipe's
        ZeRO stage, set by a reader whose framework keeps another count than
        Megatron-LM's (torchtitan's FSDP2); None: the cost model's default (Megatron-LM's).
    cp_algorithm : str or None
        The context-parallel attention algorithm as the cost options name it
        (``p2p``, ``a2a``, ``all_gather``; Megatron's ``--cp-comm-type``); None: the cost options' (p2p).
    expert_fused_glu : bool or None
        Whether the framework runs the routed experts' gated activation fused
        (:attr:`~partitioner.frameworks.FrameworkRules.expert_fused_glu`), set by a reader whose
        framework does not (torchtitan's); None: the cost options' (Megatron-Core's fused SwiGLU).
    layer_parts : tuple of int or None
        Stage boundaries over the problem's layers, as DeepSpeed's ``PipelineModule`` states them
        (``parts``: stage s runs layers ``parts[s]`` to ``parts[s + 1] - 1``, the vision encoder's
        included); None: the split of the layout or of Megatron's rule.
    origin : mapping of str to str
        Per field, how it was stated (``--tp``, ``launch.sh: --tensor-model-parallel-size``): the path of an error.
    notes : tuple of str
        What the reader saw and did not use (flags the cost model does not price), for the report.

    References
    ----------
    .. [1] NVIDIA Megatron-LM, ``megatron/training/arguments.py``
       (``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
       ``--context-parallel-size``, ``--expert-model-parallel-size``,
       ``--expert-tensor-parallel-size`` defaulting to the tensor-parallel size,
       ``--micro-batch-size``, ``--global-batch-size``,
       ``--use-distributed-optimizer``, ``--recompute-granularity``,
       ``--recompute-modules``, ``--pipeline-model-parallel-layout``).
    """

    tp: int = 1
    pp: int = 1
    vpp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None
    dp: int | None = None
    mbs: int = 1
    gbs: int | None = None
    zero: int = 0
    recompute: str = "none"
    pipeline_layout: str | None = None
    num_layers: int | None = None
    nodes: int | None = None
    precision: str | None = None
    fp8_recipe: str | None = None
    sequence_parallel: bool | None = None
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    memory_count: str | None = None
    cp_algorithm: str | None = None
    expert_fused_glu: bool | None = None
    layer_parts: tuple[int, ...] | None = None
    origin: Mapping[str, str] = field(default_factory=dict, compare=False)
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        for name in _POSITIVE + _OPTIONAL_POSITIVE:
            value = getattr(self, name)
            if value is None and name in _OPTIONAL_POSITIVE:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ProblemError(f"must be a positive integer, got {value!r}", path=self.where(name))
        if self.zero not in ZERO_STAGES:
            raise ProblemError(f"must be one of {', '.join(map(str, ZERO_STAGES))} (the ZeRO stages the cost model "
                               f"prices: 1 is the distributed optimizer, 3 FSDP), got {self.zero!r}",
                               path=self.where("zero"))
        try:
            canonical = canonical_setting(self.recompute) if isinstance(self.recompute, str) else None
        except ValueError as err:
            raise ProblemError(str(err), path=self.where("recompute")) from None
        if canonical is None:
            raise ProblemError(f"must be a recompute setting, got {self.recompute!r}", path=self.where("recompute"))
        object.__setattr__(self, "recompute", canonical)
        if self.pipeline_layout is not None and (not isinstance(self.pipeline_layout, str) or not self.pipeline_layout):
            raise ProblemError(f"must be a layout string such as 'Et*4|t*4|t*4|t*4L', got {self.pipeline_layout!r}",
                               path=self.where("pipeline_layout"))
        if self.sequence_parallel is not None and not isinstance(self.sequence_parallel, bool):
            raise ProblemError(f"must be true or false, got {self.sequence_parallel!r}",
                               path=self.where("sequence_parallel"))
        if self.cp_algorithm is not None and self.cp_algorithm not in CP_ALGORITHMS:
            raise ProblemError(f"must be one of {', '.join(CP_ALGORITHMS)}, got {self.cp_algorithm!r}",
                               path=self.where("cp_algorithm"))
        if self.layer_parts is not None:
            parts = tuple(self.layer_parts) if isinstance(self.layer_parts, (list, tuple)) else None
            if parts is None or len(parts) < 2 or any(isinstance(p, bool) or not isinstance(p, int) for p in parts):
                raise ProblemError(f"must be a list of two or more layer indices, got {self.layer_parts!r}",
                                   path=self.where("layer_parts"))
            object.__setattr__(self, "layer_parts", parts)
        if self.ep == 1 and self.etp not in (None, 1, self.tp):
            raise ProblemError(f"etp {self.etp} without expert parallelism (ep 1): set --ep, or leave etp at tp "
                               f"({self.tp})", path=self.where("etp"))

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any], origin: Mapping[str, str] | None = None,
                    notes: tuple[str, ...] = ()) -> "Recipe":
        """A recipe of the stated ``fields`` (the others keep their defaults); ``origin`` names where each came from."""
        unknown = sorted(set(fields) - set(RECIPE_FIELDS))
        if unknown:
            raise ProblemError(f"unknown recipe field(s) {', '.join(unknown)} (fields: {', '.join(RECIPE_FIELDS)})",
                               path="recipe")
        return cls(**dict(fields), origin=dict(origin or {}), notes=notes)

    def where(self, name: str) -> str:
        """How field ``name`` was stated (the option, or the recipe file and its flag)."""
        return self.origin.get(name, RECIPE_FIELDS.get(name, name))

    @property
    def expert_tp(self) -> int:
        """``etp``; Megatron-LM's default (the tensor-parallel size) when not stated [1]_.

        References
        ----------
        .. [1] As cited in :class:`Recipe`.
        """
        return self.tp if self.etp is None else self.etp

    @property
    def knobs(self) -> Knobs:
        """The memory knobs as the cost model names them (:class:`~partitioner.costs.variants.Knobs`)."""
        return Knobs(self.zero, self.recompute)

    def stated(self) -> dict[str, Any]:
        """The fields as stated (None: not stated, the default applies), for the JSON."""
        return {name: getattr(self, name) for name in RECIPE_FIELDS}

    def to_dict(self) -> dict[str, Any]:
        """The recipe's fields, ``etp`` resolved, and the notes."""
        doc = self.stated()
        doc["etp"] = self.expert_tp
        if self.notes:
            doc["notes"] = list(self.notes)
        return doc
