"""The space the exact methods search under ``training.schedule: interleaved``.

Contract (``docs/decisions.md``, "Interleaved plans the exact
methods search"). Megatron-LM's interleaved 1F1B gives every pipeline rank
the same number of devices and one (dp, tp); the exact methods (``brute``,
``cpsat``, ``milp``) search exactly that restriction of what
:func:`partitioner.plan.evaluate_interleaved` accepts:

* P device groups of equal size d, P·d = N (every device used, rule 2), d an
allowed size (rule 3); P within the problem's ``stages`` bounds (they count
device groups, as ``evaluate`` reads them), m a multiple of P (Megatron-LM's
requirement) and P·v <= L; * group g on the canonical device ids g·d ..

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.interleaved.space``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from ...cluster.topology import default_bandwidth, transfer_ms
from ...plan import Plan, PlanError, Stage, evaluate
from ...plan.cuts import interleaved_uniform_plan
from ...plan.evaluation import tied_bytes
from ...plan.schedules import held_counts
from ...problem import Layout, Problem

__all__ = [
    "ChunkOption",
    "group_counts",
    "group_meshes",
    "group_configs",
    "group_ids",
    "same_node",
    "send_ms",
    "held_states",
    "chunk_options",
    "interleaved_plan",
    "uniform_hints",
    "no_group_count_message",
]


@dataclass(frozen=True)
class ChunkOption:
    """One way to run a chunk: a config per segment, Σ (fwd + bwd), weight and activation bytes."""

    configs: tuple[Layout, ...]
    compute_ms: float
    weight_bytes: int
    act_bytes: int


def group_counts(problem: Problem) -> list[int]:
    """The group counts P of the space: stage bounds, P | N with N / P allowed, P | m, P·v <= L."""
    N, m, v, L = problem.num_devices, problem.microbatches, problem.training.virtual_stages, problem.num_layers
    cluster = problem.cluster
    return [
        P
        for P in range(problem.stages.min, problem.stages.max + 1)
        if N % P == 0 and cluster.allows_size(N // P) and m % P == 0 and P * v <= L
    ]


def no_group_count_message(problem: Problem) -> str:
    """Why :func:`group_counts` is empty, in the user's terms."""
    v = problem.training.virtual_stages
    return (
        f"no device-group count P in {problem.stages.min}..{problem.stages.max} gives equal groups of an "
        f"allowed size ({problem.cluster.describe_sizes()}) on the {problem.num_devices} devices, divides the "
        f"{problem.microbatches} microbatches and leaves every one of the P x {v} chunks a layer of the "
        f"{problem.num_layers} (the space of interleaved plans the exact methods search)"
    )


def group_configs(problem: Problem, size: int, layouts: Sequence[Layout] | None = None) -> list[Layout]:
    """Every config a layer may run in on a ``size``-device group (rule 5), in config order
    (``layouts``: ``problem.layouts()`` when the caller holds it already)."""
    G = problem.cluster.gpus_per_node
    return [lay for lay in (problem.layouts() if layouts is None else layouts) if lay.devices == size and lay.tp <= G]


def group_meshes(problem: Problem, size: int) -> list[tuple[int, ...]]:
    """The meshes (dp, tp[, cp]) of :func:`group_configs`, in config order, each once."""
    return list(dict.fromkeys(lay.mesh for lay in group_configs(problem, size)))


def group_ids(problem: Problem, groups: int) -> list[tuple[int, ...]]:
    """The canonical device ids of the groups: group g on g·d .. (g + 1)·d - 1."""
    d = problem.num_devices // groups
    return [tuple(range(g * d, (g + 1) * d)) for g in range(groups)]


def same_node(problem: Problem, groups: int, g: int) -> bool:
    """Do groups g and (g + 1) mod P lie in one same node (so their link is NVLink)?"""
    G = problem.cluster.gpus_per_node
    d = problem.num_devices // groups
    h = (g + 1) % groups
    return d <= G and (g * d) // G == (h * d) // G


def send_ms(problem: Problem, layer: int, groups: int, g: int) -> float:
    """x: layer ``layer``'s output sent from group g to group (g + 1) mod P, as ``evaluate`` times it.

    0 with one group (the next chunk runs on the same devices) or when nothing is sent.
    """
    nbytes = problem.layers[layer].out_bytes
    if groups == 1 or not nbytes:
        return 0.0
    d = problem.num_devices // groups
    return transfer_ms(nbytes, default_bandwidth(problem.cluster, d, d, same_node(problem, groups, g)))


@lru_cache(maxsize=256)
def held_states(groups: int, microbatches: int, virtual_stages: int, g: int) -> tuple[tuple[int, ...], ...]:
    """Group g's held counts (one entry per local chunk, local order) at every point of its op order.

    Only the states no other state dominates componentwise are kept: the
    memory peak max_s sum_k held[s][k] act_k is reached at one of them for
    any non-negative activation bytes.
    """
    states = {
        tuple(held[c] for c in range(g, groups * virtual_stages, groups))
        for held in held_counts("interleaved", g, groups, microbatches, virtual_stages)
    }
    keep: list[tuple[int, ...]] = []
    for s in sorted(states, key=lambda s: (-sum(s), s)):  # a dominating state has the larger sum: it comes first
        if not any(all(a <= b for a, b in zip(s, o)) for o in keep):
            keep.append(s)
    return tuple(sorted(keep))


def chunk_options(problem: Problem, first: int, last: int, mesh: tuple[int, ...]) -> list[ChunkOption]:
    """The config tuples of chunk ``first..last`` on ``mesh`` that no other beats in time, weight and act.

    Every tuple of ``itertools.product`` over the segments' configs of that
    mesh (present on every layer of the segment) is costed; a tuple that
    another one matches or beats in all three is dropped (the objectives
    are non-decreasing in time and memory in weight and activations, so
    some optimum uses only the kept ones). Config order breaks ties.
    """
    segments = problem.segments(first, last)
    candidates = [
        [lay for lay in problem.layouts() if lay.mesh == mesh and all(lay in problem.layers[i].costs for i in range(a, b + 1))]
        for a, b in segments
    ]
    options = []
    for combo in itertools.product(*candidates):
        entries = [problem.layers[i].costs[lay] for (a, b), lay in zip(segments, combo) for i in range(a, b + 1)]
        compute = sum((c.fwd_ms + c.bwd_ms for c in entries), 0.0)
        weight, act = sum(c.weight_bytes for c in entries), sum(c.act_bytes for c in entries)
        weight -= tied_bytes(problem, first, last, list(zip(segments, combo)))  # format v3: ties inside the chunk
        options.append(ChunkOption(tuple(combo), compute, weight, act))
    key = [(o.compute_ms, o.weight_bytes, o.act_bytes) for o in options]
    return [
        o
        for i, o in enumerate(options)
        if not any(all(x <= y for x, y in zip(key[j], key[i])) and (key[j] != key[i] or j < i) for j in range(len(options)))
    ]


def interleaved_plan(problem: Problem, groups: int, bounds, configs) -> Plan:
    """The plan of the space with chunk c = layers ``bounds[c] .. bounds[c + 1] - 1`` running ``configs[c]``
    (one config per segment), on the canonical group ids."""
    ids = group_ids(problem, groups)
    d = problem.num_devices // groups
    return Plan(
        tuple(
            Stage.from_configs(bounds[c], bounds[c + 1] - 1, d, configs[c], ids[c % groups])
            for c in range(len(bounds) - 1)
        )
    )


def uniform_hints(problem: Problem, objective: str, groups: int) -> list[tuple[float, Plan]]:
    """Megatron-LM's uniform interleaved splits on ``groups`` groups, one per mesh, that are valid;
    as (value, plan), best first (:func:`partitioner.plan.cuts.interleaved_uniform_plan`)."""
    d = problem.num_devices // groups
    v = problem.training.virtual_stages
    found = []
    for mesh in group_meshes(problem, d):
        plan = interleaved_uniform_plan(problem, groups, v, d, *mesh)
        if plan is None:
            continue
        try:
            found.append((evaluate(problem, plan, objective).value, plan))
        except PlanError:
            continue
    found.sort(key=lambda pair: pair[0])
    return found
