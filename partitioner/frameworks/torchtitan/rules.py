"""What torchtitan 0.3 runs: :data:`RULES`, read by ``plan --target torchtitan`` and by the exporter.

* Schedules (:data:`SCHEDULE_NAMES`): 1F1B, GPipe and interleaved 1F1B, by
the names ``torch.distributed.pipelining.schedules.get_schedule_class``
knows; ZB-H1 has no torch schedule class (:data:`SCHEDULE_REFUSALS`). * One
``pp x dp x tp`` device mesh for every stage and layer, with
``context_parallel_degree`` and ``expert_parallel_degree``; no expert
tensor parallelism of its own: experts sharded by tp without EP, whole on
each EP rank with it (:func:`torchtitan_expert_tp`).

More (the detail of this module): ``docs/internals/frameworks.md``, section ``partitioner.frameworks.torchtitan.rules``.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Sequence

from ...costs.memory.recompute import OP
from ...problem import ProblemError
from ..common import VISION_ROLES, FrameworkRules

__all__ = ["RULES", "SCHEDULE_NAMES", "SCHEDULE_REFUSALS", "cut_groups", "torchtitan_expert_tp"]

# our schedule -> torchtitan's ``pipeline_parallel_schedule`` (torch.distributed.pipelining's get_schedule_class names)
SCHEDULE_NAMES = MappingProxyType({"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"})
SCHEDULE_REFUSALS = MappingProxyType({
    "zb-h1": "schedule zb-h1 is not expressible: no torch.distributed.pipelining schedule torchtitan offers is ZB-H1 "
             "(one stage per rank, 1F1B's order with the weight gradients deferred into the bubble): "
             "InterleavedZeroBubble runs ZB-1P over several stages per rank (loop placement), ZBVZeroBubble and "
             "DualPipeV two stages per rank in a V. Plan with --schedule 1f1b, gpipe or interleaved",
})


def cut_groups(roles: Sequence[str]) -> list[tuple[int, int]]:
    """The runs of layers no torchtitan stage cut separates: the vision and projector layers with the token
    embedding, when they are consecutive; singletons elsewhere.

    Raises :class:`~partitioner.problem.ProblemError` (at ``target``) when
    the model has no embedding next to its vision layers.
    """
    L = len(roles)
    vis = [i for i, r in enumerate(roles) if r in VISION_ROLES]
    if not vis:
        return [(i, i) for i in range(L)]
    emb = [i for i, r in enumerate(roles) if r == "embedding"]
    first, last = min(vis), max(vis)
    if not emb or not (emb[0] == last + 1 or emb[0] == first - 1) or last - first + 1 != len(vis):
        raise ProblemError("torchtitan runs the vision encoder inside the token embedding's step, but this model's "
                           "vision layers are not next to its embedding", path="target")
    lo, hi = min(first, emb[0]), max(last, emb[0])
    return [(i, i) for i in range(lo)] + [(lo, hi)] + [(i, i) for i in range(hi + 1, L)]


RULES = FrameworkRules(
    name="torchtitan",
    schedules=tuple(SCHEDULE_NAMES),
    zero=(0, 1, 3),
    recompute=("none", "full", OP),
    recompute_decoder_only=True,
    cut_groups=cut_groups,
    memory=MappingProxyType({0: "torchtitan-ddp", 1: "fsdp2-keep-gathered", 3: "fsdp2"}),
    etp=False,
    fp8_recipes=("rowwise", "mxfp8"),
    # torchtitan 0.3 GroupedExperts: silu(x w1) * (x w3) as separate autograd ops (models/moe/moe.py)
    expert_fused_glu=False,
    mtp_stages=1,  # its MTP block raises NotImplementedError under pipeline parallelism (export._mtp_reasons)
    fp8_note="torchtitan 0.3's Float8LinearConverter takes recipe_name rowwise or rowwise_with_gw_hp (torchao), "
             "MXFP8LinearConverter mxfp8",
)


def torchtitan_expert_tp(tp: int, ep: int) -> int:
    """The ranks torchtitan 0.3 splits each routed expert over on a ``tp`` x ``ep`` mesh.

    Without expert parallelism the experts' weights are sharded on the TP
    axis like the dense MLP (``expert_param_placement_dense``); with it
    they are sharded on the EP axis only, each expert whole, and the TP
    axis shards the tokens (``expert_param_placement_sparse``) [2]_.

    References
    ----------
    .. [2] torchtitan 0.3.0, ``torchtitan/models/common/moe_sharding.py``
       (``expert_param_placement_dense``, ``expert_param_placement_sparse``)
       and ``torchtitan/config/configs.py`` (``ParallelismConfig.expert_parallel_degree``).
    """
    return tp if ep == 1 else 1
