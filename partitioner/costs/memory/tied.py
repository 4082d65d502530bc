"""Tied embeddings as the frameworks hold them: one set of parameters, a copy per pipeline end.

Contract: pure arithmetic for an LM head whose weight is the input embedding's
(``tie_word_embeddings``). The parameters count once in the model
(:attr:`~partitioner.costs.layers.Piece.tied_params` keeps the head's copy out of
``params``). In memory, a stage holding both the embedding and the head holds the
matrix once; a pipeline that puts them on different stages keeps a copy on each
(Megatron-LM's ``shared_embedding_or_output_weight`` on the last stage) and all-reduces
the two copies' gradients over the embedding group, the first and last stage's ranks of
each tensor-parallel slice, once per iteration [28].

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.memory.tied``.
"""
from __future__ import annotations

from ..comm import allreduce_ms
from ..options import CostOptions

__all__ = ["tied_copy_bytes", "embedding_sync_ms"]


def tied_copy_bytes(tied_params: float, tp: int, per_param_bytes: float) -> float:
    """Bytes of the head's copy of a tied embedding on one of ``tp`` ranks (vocabulary-parallel)."""
    return tied_params / tp * per_param_bytes


def embedding_sync_ms(tied_params: float, tp: int, *, inside_node: bool, intra_GBps: float, inter_GBps: float,
                      opts: CostOptions) -> float:
    """One all-reduce of the tied embedding's gradient slice (``V h / tp``) between the two stages that hold it [28]_.

    Two ranks per group; over NVLink when both stages sit in one node,
    else the network. Frozen embeddings (``tied_params = 0``) cost nothing.

    References
    ----------
    .. [28] NVIDIA Megatron-Core, ``megatron/core/distributed/
       finalize_model_grads.py`` (``_allreduce_word_embedding_grads``:
       "All-reduce word-embedding gradients across the first and last PP
       stages") and ``models/common/language_module/language_module.py``
       (``setup_embeddings_and_output_layer``).
    """
    if tied_params <= 0:
        return 0.0
    GBps, eff = (intra_GBps, opts.nvlink_efficiency) if inside_node else (inter_GBps, 1.0)
    return allreduce_ms(tied_params / tp * opts.grad_bytes_per_param, 2, GBps, opts, link_efficiency=eff)
