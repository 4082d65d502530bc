"""A language model's latent attention, multi-token prediction and group routing, as framework settings need them.

Contract: :class:`MlaHints` is what an exporter needs to write these
features (``export_hints["mla"]`` of a plan result): :meth:`MlaHints.of_model`
reads it from a :class:`~.spec.ModelSpec`, :meth:`MlaHints.from_doc` from a
result document (a :class:`~partitioner.problem.ProblemError` naming
``export_hints.mla.<key>`` when malformed). Pure data, in Megatron-Core's
names; the Megatron-LM arguments they become are Megatron's home's
(:func:`partitioner.frameworks.megatron.mla_args`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from ..problem import ProblemError
from .spec import ModelSpec

__all__ = ["MlaHints"]

@dataclass(frozen=True)
class MlaHints:
    """The ``llm`` module's multi-head latent attention (``kv_lora_rank`` 0: none), its multi-token prediction
    modules and its group-limited routing, in Megatron-Core's names."""

    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_head_dim: int = 0
    qk_pos_emb_head_dim: int = 0
    v_head_dim: int = 0
    mtp_layers: int = 0
    expert_groups: int = 0
    group_top_k: int = 0
    router_score: str = ""

    @classmethod
    def of_model(cls, spec: ModelSpec) -> "MlaHints | None":
        """The hints of ``spec``'s language model; None when it has none of these features."""
        llm = spec.llm
        if llm is None or not (llm.mla or llm.mtp_layers or llm.expert_groups or llm.router_score != "softmax"):
            return None
        hints = cls(mtp_layers=llm.mtp_layers)
        if llm.mla:
            hints = replace(hints, kv_lora_rank=llm.kv_lora_rank, q_lora_rank=llm.q_lora_rank, qk_head_dim=llm.d_head,
                            qk_pos_emb_head_dim=llm.rope_head_dim, v_head_dim=llm.v_dim)
        if llm.experts:
            hints = replace(hints, expert_groups=llm.expert_groups, group_top_k=llm.group_top_k,
                            router_score=llm.router_score)
        return hints

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_doc(cls, doc: Any) -> "MlaHints | None":
        """The hints of an ``export_hints["mla"]`` object, None when absent; ProblemError when malformed."""
        if doc is None:
            return None
        if not isinstance(doc, Mapping):
            raise ProblemError("must be an object", path="export_hints.mla")
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = doc.get(f.name, f.default)
            if f.name == "router_score":
                if value not in ("", "softmax", "sigmoid"):
                    raise ProblemError(f"must be softmax or sigmoid, got {value!r}", path=f"export_hints.mla.{f.name}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ProblemError(f"must be a non-negative integer, got {value!r}", path=f"export_hints.mla.{f.name}")
            values[f.name] = value
        return cls(**values)
