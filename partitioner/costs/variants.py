"""Memory-knob variants: the (ZeRO stage, recompute) settings a stage segment may choose.

Contract: a :class:`Knobs` is one setting of the two knobs; its
:attr:`~Knobs.name` is the format-v2 variant of its cost keys
(``dp{dp}tp{tp}/{name}``), fixed as follows:

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.variants``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..problem import ProblemError
from .memory.recompute import describe_setting
from .memory.recompute_names import OP, canonical_setting

__all__ = ["Knobs", "RECOMPUTE", "ZERO", "ALL_VARIANTS", "parse_variant", "variant_knobs", "applies", "describe"]

RECOMPUTE = ("none", "selective", "full")
ZERO = (0, 1, 3)


@dataclass(frozen=True)
class Knobs:
    """One memory-knob setting: ZeRO stage ``zero`` (0, 1 or 3) and ``recompute`` (none, selective, full, a
    module set such as ``layernorm+moe_act``, or op: :mod:`.memory.recompute`)."""

    zero: int = 0
    recompute: str = "none"

    @property
    def name(self) -> str:
        """The variant name (``""`` for ZeRO-0 without recompute)."""
        parts = [f"zero{self.zero}"] if self.zero else []
        if self.recompute != "none":
            parts.append(f"recompute-{self.recompute}")
        return "+".join(parts)


ALL_VARIANTS = tuple(Knobs(z, r).name for z, r in itertools.product(ZERO, RECOMPUTE) if (z, r) != (0, "none"))

_ZERO_TEXT = {
    1: "ZeRO-1: optimizer states sharded over dp",
    3: "ZeRO-3 (FSDP full shard): weights, gradients and optimizer states sharded over dp; "
    "parameter all-gathers in forward and backward and a gradient reduce-scatter per microbatch",
}
_RECOMPUTE_TEXT = {
    "selective": "selective recompute: the attention core is recomputed in backward (no score matrix kept)",
    "full": "full recompute: each block keeps only its input and replays its forward in backward",
}


def describe(knobs: Knobs) -> str:
    """The one-line description written to the problem's ``variants`` map."""
    parts = []
    if knobs.zero:
        parts.append(_ZERO_TEXT[knobs.zero])
    if knobs.recompute != "none":
        parts.append(_RECOMPUTE_TEXT.get(knobs.recompute) or describe_setting(knobs.recompute))
    return "; ".join(parts) or "ZeRO-0, no recompute"


def parse_variant(name: str) -> Knobs:
    """The :class:`Knobs` of a variant name (``""`` is the plain setting); ValueError if unknown."""
    if name == "":
        return Knobs()
    zero, recompute = 0, "none"
    parts = name.split("+")
    if parts and parts[0] in ("zero1", "zero3"):
        zero = int(parts.pop(0)[4:])
    if parts and parts[0].startswith("recompute-"):
        setting = "+".join([parts[0][10:], *parts[1:]])
        try:
            recompute = canonical_setting(setting)
        except ValueError:
            recompute = ""
        parts = [] if recompute and recompute != "none" else parts
    knobs = Knobs(zero, recompute or "none")
    if parts or knobs.name != name:
        raise ValueError(f"unknown variant {name!r} (variants: {', '.join(ALL_VARIANTS)}, or "
                         f"[zero1+|zero3+]recompute-<modules> with modules of core_attn, layernorm, mlp, moe_act, "
                         f"shared_experts, moe in that order joined by '+', or recompute-op)")
    return knobs


def variant_knobs(requested: tuple[str, ...], *, flash_attention: bool, modules: tuple[str, ...] = ()) -> list[Knobs] | None:
    """The settings to emit for the ``variants`` option, the plain one first; None for ``none`` (format v1).

    ``requested``: ``("all",)``, ``("none",)`` or variant names (the plain
    setting is always emitted). ``modules``: the recompute settings beyond
    none/selective/full that ``all`` adds, each under every ZeRO stage
    (:func:`~.memory.recompute.module_chain`), after the full-recompute ones.
    """
    if tuple(requested) == ("none",):
        return None
    # module sets with ZeRO 0 and 1 (ZeRO-0 only where ZeRO-1 cannot shard, applies); op with every ZeRO stage
    extra = [Knobs(z, r).name for r in modules for z in (ZERO if r == OP else (0, 1))]
    names = [*ALL_VARIANTS, *extra] if tuple(requested) == ("all",) else list(requested)
    out = [Knobs()]
    for name in names:
        if name in ("all", "none"):
            raise ProblemError("'all' and 'none' stand alone", path="options.variants")
        try:
            knobs = parse_variant(name)
        except ValueError as err:
            raise ProblemError(str(err), path="options.variants") from None
        if flash_attention and knobs.recompute == "selective" and tuple(requested) == ("all",):
            continue  # with flash attention it frees only the log-sum-exp for a whole attention forward
        if knobs not in out:
            out.append(knobs)
    return out


def applies(knobs: Knobs, dp: int) -> bool:
    """Whether ``knobs`` are offered at ``dp`` replicas: ZeRO needs dp > 1 (it equals its ZeRO-0 twin at 1), and a
    module set without ZeRO only at dp = 1 (above, its ZeRO-1 twin runs as fast in less memory)."""
    if knobs.zero == 0 and knobs.recompute not in RECOMPUTE and knobs.recompute != OP:
        return dp == 1
    return knobs.zero == 0 or dp > 1
