"""Why a problem has no valid plan, in words a person can act on.

The exact solvers prove infeasibility; this module finds the simplest
reason that holds, checked in order:

1. no stage count P in the bounds has P allowed sizes summing to N;
2. some layer cannot fit in memory in any layout even with one stashed
   microbatch (and layer 0, which always has min(m, P_min) stashed);
3. otherwise the exact search's own conclusion (memory along every split):
   :func:`partitioner.solvers.dp.method.explain_infeasible` re-solves with dp.
"""
from __future__ import annotations

from functools import lru_cache

from ..core.units import format_bytes
from ..problem import Problem

__all__ = ["feasible_stage_counts", "count_spans", "counts_by_enumeration", "quick_infeasibility"]


def feasible_stage_counts(problem: Problem) -> list[int]:
    """Stage counts P within the bounds (and <= layers) for which P allowed sizes sum to N."""
    hi = min(problem.stages.max, problem.num_layers)
    cluster = problem.cluster
    if cluster.partial:  # stated in-node sizes or idle GPUs: no closed form; a subset-sum over the sizes
        counts = counts_by_enumeration(cluster.allowed_sizes(), cluster.num_devices, hi)
        return sorted(p for p in counts if p >= problem.stages.min)
    spans = count_spans(cluster.nodes, cluster.gpus_per_node)
    return [p for lo, top in spans for p in range(max(lo, problem.stages.min), min(top, hi) + 1)]


@lru_cache(maxsize=256)
def count_spans(nodes: int, gpus_per_node: int) -> tuple[tuple[int, int], ...]:
    """The numbers of allowed stage sizes that sum to ``nodes * gpus_per_node``, as merged ranges.

    Closed form, O(nodes), for rule 3's sizes: powers of two up to 2^a (the
    largest dividing G = ``gpus_per_node``), G, and k·G. The multi-node and
    G-sized parts sum to a multiple of G, so the small ones do too, say j·G
    for some j in 0..nodes. The (nodes - j)·G left take any q in
    1..nodes - j parts of k·G (none when j = nodes); j·G in powers of two at
    most 2^a takes any r in j·G/2^a .. j·G parts (halving one part adds one).
    So P = q + r ranges over a union of intervals, one per j.
    """
    G = gpus_per_node
    top_power = G & -G  # 2^a: the largest power of two dividing G
    spans = []
    for j in range(nodes + 1):
        r_lo, r_hi = j * G // top_power, j * G
        if j == nodes:
            spans.append((r_lo, r_hi))
        else:
            spans.append((r_lo + 1, r_hi + nodes - j))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return tuple(merged)


def counts_by_enumeration(sizes: tuple[int, ...], total: int, max_parts: int) -> frozenset[int]:
    """The part counts (<= ``max_parts``) of sums of ``sizes`` to ``total``, by a subset-sum DP (tests)."""
    # reach[s]: set of part counts that sum to s (bitmask over counts)
    reach = [0] * (total + 1)
    reach[0] = 1
    mask = (1 << (max_parts + 1)) - 1
    for s in range(1, total + 1):
        bits = 0
        for d in sizes:
            if d > s:
                break
            bits |= reach[s - d] << 1
        reach[s] = bits & mask
    return frozenset(p for p in range(max_parts + 1) if reach[total] >> p & 1)




def quick_infeasibility(problem: Problem) -> str | None:
    """A reason the problem is certainly infeasible, found without searching, or None."""
    counts = feasible_stage_counts(problem)
    if not counts:
        sizes = ", ".join(map(str, problem.cluster.allowed_sizes()))
        return (
            f"no stage count P in {problem.stages.min}..{min(problem.stages.max, problem.num_layers)} "
            f"has P allowed stage sizes ({sizes}) summing to the {problem.num_devices} devices"
        )
    capacity = problem.cluster.gpu_memory_bytes
    m = problem.microbatches
    for i, layer in enumerate(problem.layers):
        stash = min(m, min(counts)) if i == 0 else 1
        tied = layer.tied_to is not None  # format v3: with its tied_to layer it holds less (a lower bound)
        if min(c.weight_bytes - tied * c.tied_weight_bytes + stash * c.act_bytes for c in layer.costs.values()) <= capacity:
            continue  # fits somewhere: the layout that needs least (named below) is only looked for when none fits
        need, where = min(
            (c.weight_bytes - tied * c.tied_weight_bytes + stash * c.act_bytes, lay.key) for lay, c in layer.costs.items()
        )
        if need > capacity:
            held = f"{stash} stashed microbatch" + ("es" if stash > 1 else "")
            return (
                f"layer {i} ({layer.name}) needs at least {format_bytes(need)} in any layout "
                f"(smallest: {where}, weights + {held}) > {format_bytes(capacity)} per GPU"
            )
    return None
