"""An FP8 plan as Megatron-LM settings: :func:`megatron_fp8`.

megatron-core 0.16.1: ``--fp8-format`` (TransformerConfig ``fp8``:
``hybrid``, E4M3 forward and E5M2 gradients, or ``e4m3``, which
Megatron-Bridge pairs with MXFP8) and ``--fp8-recipe`` (``fp8_recipe``:
tensorwise, delayed, blockwise, mxfp8); ``--fp8-param-gather`` when the
plan keeps the parameters in fp8 (the DDP config's ``fp8_param_gather``;
Megatron-LM also sets TransformerConfig ``fp8_param`` from it); and
``--first-last-layers-bf16 --num-layers-at-start-in-bf16 N
--num-layers-at-end-in-bf16 N`` for the BF16 edge layers [1] [2]. A
recipe outside :data:`~.rules.RULES` ``.fp8_recipes`` (torchao's rowwise)
is not expressible.

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.megatron.fp8``.
"""
from __future__ import annotations

from typing import Any

from ...costs.compute.fp8 import RECIPES
from ..common import PrecisionHints
from .rules import RULES

__all__ = ["megatron_fp8"]


def megatron_fp8(hints: PrecisionHints | None, n_layers: int, pp: int
                 ) -> tuple[dict[str, Any], dict[str, Any], list[str], list[str], list[str]]:
    """(TransformerConfig fields, DDP-config fields, flags, notes, reasons) of the plan's FP8 in Megatron-LM.

    ``n_layers`` decoder layers on ``pp`` pipeline ranks: megatron-core
    refuses more BF16 edge layers than a pipeline rank holds
    (``num_layers // pp``), and first/last BF16 layers with delayed scaling.
    """
    if hints is None:
        return {}, {}, [], [], []
    if hints.fp8_recipe not in RULES.fp8_recipes:
        return {}, {}, [], [], [f"FP8 recipe {hints.fp8_recipe} is torchao's (torchtitan); megatron-core 0.16.1's "
                                "fp8_recipe offers tensorwise, delayed, blockwise, mxfp8 (and custom quantizer factories)"]
    rec = RECIPES[hints.fp8_recipe]
    core: dict[str, Any] = {"fp8": rec.megatron_format, "fp8_recipe": rec.megatron}
    ddp: dict[str, Any] = {}
    flags = [f"--fp8-format {rec.megatron_format}", f"--fp8-recipe {rec.megatron}"]
    notes = [f"FP8 ({rec.megatron} scaling, format {rec.megatron_format}) in the transformer layers' linear layers "
             "through Transformer Engine; the embedding, the output layer, the router and the attention core run in "
             "BF16 as the plan costs them"]
    reasons: list[str] = []
    if hints.param_gather:
        core.update(fp8_param=True)
        ddp.update(fp8_param_gather=True)
        flags.append("--fp8-param-gather")
        if rec.megatron == "mxfp8":
            ddp.update(reuse_grad_buf_for_mxfp8_param_ag=True)
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
