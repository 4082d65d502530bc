"""Megatron-LM's uniform layer cuts: which layers each pipeline stage (or virtual chunk) holds.

The baselines of :mod:`partitioner.planning.baselines`, the interleaved
schedules of :mod:`partitioner.planning.schedules.search` and the starting
plans of :mod:`partitioner.solvers.interleaved.space` all cut the layers the
way Megatron-LM does by default: vision and projector with the first decoder
layers, the head with the last, the decoder layers split evenly (the last
stages take one more when P does not divide them).
"""
from __future__ import annotations

from typing import Sequence

from ..problem import Problem
from .records import Plan, Stage

__all__ = ["layer_roles", "uniform_cuts", "interleaved_uniform_plan"]


def layer_roles(problem: Problem) -> list[str]:
    """The role of each layer: the cost model's (:attr:`~partitioner.problem.Problem.workload`) when it built
    the problem, else guessed from the module label (vision / projector / action / decoder)."""
    hints = problem.workload.layers
    if hints and len(hints) == problem.num_layers:
        return [h.role for h in hints]
    roles = []
    for layer in problem.layers:
        label = f"{layer.module} {layer.name}".lower()
        if "vision" in label or "vit" in label:
            roles.append("vision")
        elif "projector" in label:
            roles.append("projector")
        elif "action" in label:
            roles.append("action")
        else:
            roles.append("decoder")
    return roles




def _even_counts(n: int, parts: int) -> list[int] | None:
    if parts > n:
        return None
    base, extra = divmod(n, parts)
    # Megatron needs num_layers % pp == 0; when it is not, the extra layers go to the last stages
    return [base + (1 if p >= parts - extra else 0) for p in range(parts)]


def uniform_cuts(roles: Sequence[str], parts: int) -> list[tuple[int, int]] | None:
    """Megatron-LM's even split into ``parts``: the decoders evenly (the extra ones to the last parts), the other
    layers with their neighbours; every layer evenly without decoders; None when there are too few."""
    decoders = [i for i, r in enumerate(roles) if r == "decoder"]
    L = len(roles)
    if not decoders:  # no language model: split every layer evenly
        counts = _even_counts(L, parts)
        if counts is None:
            return None
        cuts, start = [], 0
        for c in counts:
            cuts.append((start, start + c - 1))
            start += c
        return cuts
    counts = _even_counts(len(decoders), parts)
    if counts is None:
        return None
    cuts, k = [], 0
    for p, c in enumerate(counts):
        first = 0 if p == 0 else decoders[k]
        k += c
        last = L - 1 if p == parts - 1 else decoders[k - 1]
        cuts.append((first, last))
    return cuts


def interleaved_uniform_plan(
    problem: Problem, groups: int, virtual_stages: int, devices: int, dp: int, tp: int, cp: int = 1
) -> Plan | None:
    """Megatron-LM's uniform split with virtual stages: P·v chunks, chunk c on group c mod P.

    Groups take contiguous device ids in order (``devices`` each); every
    chunk runs ``dp x tp x cp``. None when there are fewer decoder layers than chunks.
    """

    cuts = uniform_cuts(layer_roles(problem), groups * virtual_stages)
    if cuts is None:
        return None
    ids = [tuple(range(g * devices, (g + 1) * devices)) for g in range(groups)]
    return Plan(tuple(Stage(a, b, devices, dp, tp, ids[c % groups], cp=cp) for c, (a, b) in enumerate(cuts)))
