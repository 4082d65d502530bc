"""An FP8 plan as torchtitan settings: the model-config converters of :func:`torchtitan_fp8`.

torchtitan 0.3 applies FP8 as a model-config converter, in the
``config_registry`` function (its CLI has no converter option):
``Float8LinearConverter`` with ``recipe_name="rowwise"``, or
``MXFP8LinearConverter`` for mxfp8, plus the grouped-experts converter of
the same kind for a MoE model; the LM head and the router stay BF16 as in
the plan (``filter_fqns=["lm_head", "router.gate"]``, as torchtitan's own
DeepSeek-V3 FP8 config; MXFP8 takes an include list,
``fqns=["attention", "feed_forward", "shared_experts"]``), and the BF16
edge layers are filtered by name [1]. A recipe outside
:data:`~.rules.RULES` ``.fp8_recipes`` (tensorwise, delayed, blockwise) is
not expressible.

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.torchtitan.fp8``.
"""
from __future__ import annotations

from typing import Sequence

from ...costs.compute.fp8 import RECIPES
from ..common import PrecisionHints
from .rules import RULES

__all__ = ["torchtitan_fp8", "TORCHTITAN_BF16_LINEARS", "TORCHTITAN_MXFP8_LINEARS"]

# torchtitan Linear FQN fragments left in BF16 (the plan's BF16 GEMMs: the LM head, the MoE router)
TORCHTITAN_BF16_LINEARS = ("lm_head", "router.gate")
# MXFP8LinearConverter converts the Linear layers whose FQN contains one of these (an include list)
TORCHTITAN_MXFP8_LINEARS = ("attention", "feed_forward", "shared_experts")


def torchtitan_fp8(hints: PrecisionHints | None, moe: bool, edge_names: Sequence[str] = ()
                   ) -> tuple[list[str], list[str], list[str], list[str]]:
    """(import lines, converter expressions, notes, reasons) of the plan's FP8 in torchtitan 0.3.

    ``moe``: the model has routed experts (their grouped GEMMs get the
    converter of the same kind); ``edge_names``: the torchtitan FQN
    prefixes of the decoder layers kept in BF16 (``layers.0.``, ...).
    """
    if hints is None:
        return [], [], [], []
    if hints.fp8_recipe not in RULES.fp8_recipes:
        return [], [], [], [f"FP8 recipe {hints.fp8_recipe}: {RULES.fp8_note}; it has no {hints.fp8_recipe} recipe "
                            "(plan with --fp8-recipe rowwise or mxfp8)"]
    rec = RECIPES[hints.fp8_recipe]
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
