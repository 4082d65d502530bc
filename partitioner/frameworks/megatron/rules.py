"""What Megatron-LM runs: :data:`RULES`, read by ``plan --target megatron`` and by the exporter.

* Schedules: 1F1B (``forward_backward_pipelining_without_interleaving``) and
interleaved 1F1B (``forward_backward_pipelining_with_interleaving``, the
virtual stages given by the layout) [1]; it has no zero-bubble and no
all-forward-then-all-backward schedule. * One mesh (dp, tp, cp) for every
stage and layer (its TP/PP flags); ep and etp once per model. Megatron
Bridge's MIMO per-module grids are written by the exporter but not searched
by the planner. * Knobs, once for all ranks and layers: ZeRO-0, ZeRO-1 (the
distributed optimizer) or ZeRO-3 (Megatron-FSDP), and
``--recompute-granularity`` selective (with ``--recompute-modules``: any
module set) or full.

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.megatron.rules``.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Sequence

from ..common import LLM_ROLES, FrameworkRules

__all__ = ["RULES", "SCHEDULE_REFUSALS", "cut_groups"]

# why a plan under a schedule Megatron-LM lacks is not expressible (the exporter says it)
SCHEDULE_REFUSALS = MappingProxyType({
    "zb-h1": "schedule zb-h1 is not expressible: Megatron-LM's pipeline schedules are 1F1B and interleaved 1F1B "
             "(megatron.core.pipeline_parallel.schedules); it has no zero-bubble (B/W split) schedule. Plan with "
             "--schedule 1f1b or interleaved",
    "gpipe": "schedule gpipe is not expressible: Megatron-LM has no all-forward-then-all-backward pipeline schedule "
             "(only 1F1B and interleaved 1F1B). Plan with --schedule 1f1b or interleaved",
})


def cut_groups(roles: Sequence[str]) -> list[tuple[int, int]]:
    """The runs of layers no Megatron-LM stage cut separates: the layers before the first language-model layer
    join it (the vision encoder and projector run on the first language-model stage) and the layers after the
    last one join it (no stage of the action head alone); singletons in between."""
    L = len(roles)
    llm = [i for i, r in enumerate(roles) if r in LLM_ROLES]
    if not llm:
        return [(i, i) for i in range(L)]
    lo, hi = llm[0], llm[-1]
    return [(0, lo)] + [(i, i) for i in range(lo + 1, hi)] + ([(hi, L - 1)] if hi > lo else [])


RULES = FrameworkRules(
    name="megatron",
    schedules=("1f1b", "interleaved"),
    zero=(0, 1, 3),
    recompute=("none", "selective", "full"),
    recompute_decoder_only=False,
    cut_groups=cut_groups,
    memory=MappingProxyType({0: "megatron", 1: "megatron-distopt"}),
    fp8_recipes=("tensorwise", "delayed", "blockwise", "mxfp8"),
    fp8_note="megatron-core 0.16.1 TransformerConfig.fp8_recipe: tensorwise, delayed, mxfp8, blockwise (and custom "
             "quantizer factories)",
    modules=True,
)
