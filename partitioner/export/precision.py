"""An FP8 plan's precision as each framework's settings: Megatron-LM flags, torchtitan converters, DeepSpeed's no.

Contract: :func:`precision_hints` reads ``export_hints["precision"]`` (written
by ``plan`` for FP8 plans; absent under BF16) into a
:class:`~partitioner.planning.records.PrecisionHints`, or the problem's
``meta.precision``; each ``*_fp8`` function returns what its exporter adds
for it -- settings, flags or code lines, notes -- or the reasons the
framework cannot train with that recipe. A BF16 plan adds nothing.

* **Megatron-LM** (megatron-core 0.16.1): ``--fp8-format`` (TransformerConfig
  ``fp8``: ``hybrid``, E4M3 forward and E5M2 gradients, or ``e4m3``, which
  Megatron-Bridge pairs with MXFP8) and ``--fp8-recipe`` (``fp8_recipe``:
  tensorwise, delayed, blockwise, mxfp8); ``--fp8-param-gather`` when the
  plan keeps the parameters in fp8 (the DDP config's ``fp8_param_gather``;
  Megatron-LM also sets TransformerConfig ``fp8_param`` from it); and
  ``--first-last-layers-bf16 --num-layers-at-start-in-bf16 N
  --num-layers-at-end-in-bf16 N`` for the BF16 edge layers [1]_ [2]_.
  torchao's rowwise recipe is not one of Megatron's: not expressible.
* **torchtitan** (0.3): FP8 is a model-config converter, applied in the
  ``config_registry`` function (its CLI has no converter option):
  ``Float8LinearConverter`` with ``recipe_name="rowwise"``, or
  ``MXFP8LinearConverter`` for mxfp8, plus the grouped-experts converter of
  the same kind for a MoE model; the LM head and the router stay BF16 as
  in the plan (``filter_fqns=["lm_head", "router.gate"]``, as torchtitan's
  own DeepSeek-V3 FP8 config; MXFP8 takes an include list,
  ``fqns=["attention", "feed_forward", "shared_experts"]``), and the
  BF16 edge layers are filtered by name [3]_. torchtitan 0.3 has no
  tensorwise, delayed or blockwise recipe: not expressible.
* **DeepSpeed** (0.19.8): its engine trains in fp32, fp16 or bf16 (config
  sections ``fp16``, ``bf16``, ``torch_autocast``); its fp8 code quantizes
  frozen weights for inference and LoRA: an FP8 plan is not expressible.

References
----------
.. [1] megatron-core 0.16.1, ``megatron/core/transformer/transformer_config.py``
   (``fp8`` with ``arg_names ["--fp8-format"]``, ``fp8_recipe``,
   ``fp8_param``, ``first_last_layers_bf16``, ``num_layers_at_start_in_bf16``,
   ``num_layers_at_end_in_bf16``) and ``megatron/core/distributed/
   distributed_data_parallel_config.py`` (``fp8_param_gather``).
.. [2] NeMo Megatron-Bridge, ``src/megatron/bridge/training/mixed_precision.py``
   (``bf16_with_mxfp8_mixed``: ``fp8="e4m3"``; the other FP8 recipes ``"hybrid"``)
   and ``scripts/translate_mlm_to_bridge.py`` (``--fp8-param-gather`` ->
   ``mixed_precision.fp8_param_gather``).
.. [3] torchtitan 0.3.0, ``torchtitan/components/quantization/float8.py`` and
   ``mx.py``; ``torchtitan/models/deepseek_v3/config_registry.py``
   (``deepseek_v3_671b_float8``).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..costs.fp8 import FP8_RECIPES, RECIPES
from ..planning.records import PrecisionHints
from ..problem import Problem, ProblemError

__all__ = ["precision_hints", "problem_precision", "megatron_fp8", "torchtitan_fp8", "deepspeed_fp8",
           "TORCHTITAN_BF16_LINEARS", "TORCHTITAN_MXFP8_LINEARS"]

# torchtitan Linear FQN fragments left in BF16 (the plan's BF16 GEMMs: the LM head, the MoE router)
TORCHTITAN_BF16_LINEARS = ("lm_head", "router.gate")
# MXFP8LinearConverter converts the Linear layers whose FQN contains one of these (an include list)
TORCHTITAN_MXFP8_LINEARS = ("attention", "feed_forward", "shared_experts")


def precision_hints(doc: Any) -> PrecisionHints | None:
    """The :class:`PrecisionHints` of an ``export_hints["precision"]`` object; None when absent; ProblemError when malformed."""
    if doc is None:
        return None
    where = "export_hints.precision"
    if not isinstance(doc, Mapping):
        raise ProblemError("must be an object", path=where)
    recipe, gather, edge = doc.get("fp8_recipe"), doc.get("fp8_param_gather", False), doc.get("fp8_bf16_layers", 0)
    if doc.get("precision", "fp8") != "fp8":
        raise ProblemError(f"must be fp8 (a BF16 plan carries no precision hints), got {doc.get('precision')!r}",
                           path=f"{where}.precision")
    if recipe not in FP8_RECIPES:
        raise ProblemError(f"must be one of {', '.join(FP8_RECIPES)}, got {recipe!r}", path=f"{where}.fp8_recipe")
    if not isinstance(gather, bool):
        raise ProblemError(f"must be true or false, got {gather!r}", path=f"{where}.fp8_param_gather")
    if isinstance(edge, bool) or not isinstance(edge, int) or edge < 0:
        raise ProblemError(f"must be a non-negative integer, got {edge!r}", path=f"{where}.fp8_bf16_layers")
    return PrecisionHints(str(recipe), gather, edge)


def problem_precision(problem: Problem) -> PrecisionHints | None:
    """The hints of a cost-model problem's ``meta.precision`` (None under BF16 or for a hand-written problem)."""
    meta = (problem.meta or {}).get("precision")
    if not isinstance(meta, Mapping):
        return None
    return precision_hints(meta)


def megatron_fp8(hints: PrecisionHints | None, n_layers: int, pp: int
                 ) -> tuple[dict[str, Any], dict[str, Any], list[str], list[str], list[str]]:
    """(TransformerConfig fields, DDP-config fields, flags, notes, reasons) of the plan's FP8 in Megatron-LM.

    ``n_layers`` decoder layers on ``pp`` pipeline ranks: megatron-core
    refuses more BF16 edge layers than a pipeline rank holds
    (``num_layers // pp``), and first/last BF16 layers with delayed scaling.
    """
    if hints is None:
        return {}, {}, [], [], []
    rec = RECIPES[hints.fp8_recipe]
    if rec.megatron is None:
        return {}, {}, [], [], [f"FP8 recipe {hints.fp8_recipe} is torchao's (torchtitan); megatron-core 0.16.1's "
                                "fp8_recipe offers tensorwise, delayed, blockwise, mxfp8 (and custom quantizer factories)"]
    core: dict[str, Any] = {"fp8": rec.megatron_format, "fp8_recipe": rec.megatron}
    ddp: dict[str, Any] = {}
    flags = [f"--fp8-format {rec.megatron_format}", f"--fp8-recipe {rec.megatron}"]
    notes = [f"FP8 ({rec.megatron} scaling, format {rec.megatron_format}) in the transformer layers' linear layers "
             "through Transformer Engine; the embedding, the output layer, the router and the attention core run in "
             "BF16 as the plan costs them"]
    reasons: list[str] = []
    if hints.param_gather:
        core["fp8_param"] = True
        ddp["fp8_param_gather"] = True
        flags.append("--fp8-param-gather")
        if rec.megatron == "mxfp8":
            ddp["reuse_grad_buf_for_mxfp8_param_ag"] = True
            flags.append("--reuse-grad-buf-for-mxfp8-param-ag")
            notes.append("MXFP8 with fp8 parameters gathers them through the gradient buffer "
                         "(--reuse-grad-buf-for-mxfp8-param-ag, as Megatron-Bridge's bf16_with_mxfp8_mixed sets it)")
    if hints.bf16_layers:
        per_rank = n_layers // pp if pp else n_layers
        if hints.bf16_layers > per_rank:
            reasons.append(f"{hints.bf16_layers} BF16 layers at each end exceed the {per_rank} decoder layers of a "
                           "pipeline rank (megatron-core: num_layers_at_start_in_bf16 <= num_layers // pp)")
        core.update(first_last_layers_bf16=True, num_layers_at_start_in_bf16=hints.bf16_layers,
                    num_layers_at_end_in_bf16=hints.bf16_layers)
        flags += ["--first-last-layers-bf16", f"--num-layers-at-start-in-bf16 {hints.bf16_layers}",
                  f"--num-layers-at-end-in-bf16 {hints.bf16_layers}"]
    return core, ddp, flags, notes, reasons


def torchtitan_fp8(hints: PrecisionHints | None, moe: bool, edge_names: Sequence[str] = ()
                   ) -> tuple[list[str], list[str], list[str], list[str]]:
    """(import lines, converter expressions, notes, reasons) of the plan's FP8 in torchtitan 0.3.

    ``moe``: the model has routed experts (their grouped GEMMs get the
    converter of the same kind); ``edge_names``: the torchtitan FQN
    prefixes of the decoder layers kept in BF16 (``layers.0.``, ...).
    """
    if hints is None:
        return [], [], [], []
    rec = RECIPES[hints.fp8_recipe]
    if rec.torchtitan is None:
        return [], [], [], [f"FP8 recipe {hints.fp8_recipe}: torchtitan 0.3's Float8LinearConverter takes recipe_name "
                            "rowwise or rowwise_with_gw_hp (torchao), MXFP8LinearConverter mxfp8; it has no "
                            f"{hints.fp8_recipe} recipe (plan with --fp8-recipe rowwise or mxfp8)"]
    notes = ["FP8 is a model-config converter, applied by the config_registry function (torchtitan's CLI has no "
             "converter option: the overrides alone run BF16); enable --compile.enable, which torchtitan needs for "
             "fast float8 casts"]
    if rec.torchtitan == "float8":
        imports = ["from torchtitan.components.quantization import Float8LinearConverter"
                   + (", Float8GroupedExpertsConverter" if moe else "")]
        skip = [*TORCHTITAN_BF16_LINEARS, *edge_names]
        converters = [f"Float8LinearConverter.Config(recipe_name={rec.name!r}, filter_fqns={skip!r})"]
        if moe:
            converters.append("Float8GroupedExpertsConverter.Config()")
        notes.append("torchao's Float8Linear casts the weights in every pass (no fp8 weight cache) and gathers for "
                     "tensor parallelism in BF16 with rowwise scales, as the plan costs them")
        return imports, converters, notes, []
    include = list(TORCHTITAN_MXFP8_LINEARS)
    reasons = []
    if edge_names:
        reasons.append("BF16 edge layers with MXFP8: torchtitan's MXFP8LinearConverter takes an include list of FQN "
                       "fragments, which cannot leave out whole decoder layers whose modules share their names")
    imports = ["from torchtitan.components.quantization import MXFP8LinearConverter"
               + (", MXFP8GroupedExpertsConverter" if moe else "")]
    converters = [f"MXFP8LinearConverter.Config(fqns={include!r})"]
    if moe:
        converters.append("MXFP8GroupedExpertsConverter.Config()")
    return imports, converters, notes, reasons


def deepspeed_fp8(hints: PrecisionHints | None) -> list[str]:
    """Why DeepSpeed cannot train the plan's FP8 (empty under BF16)."""
    if hints is None:
        return []
    return [f"the plan trains in FP8 ({hints.fp8_recipe} scaling): DeepSpeed 0.19.8's engine trains in fp32, fp16 or "
            "bf16 (config sections fp16, bf16, torch_autocast); its fp8 code quantizes frozen weights for inference "
            "and LoRA (deepspeed.linear, ops.fp_quantizer). Plan without --precision fp8 for DeepSpeed"]
