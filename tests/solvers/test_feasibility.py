"""Infeasible problems come with a reason a person can act on, from every exact method."""
from __future__ import annotations

import pytest

from partitioner import Problem, solve


def make(layers, nodes=1, gpus=2, memory=1000, stages=None, microbatches=1):
    doc = {
        "version": 1,
        "cluster": {"nodes": nodes, "gpus_per_node": gpus, "gpu_memory_bytes": memory, "intra_node_GBps": 10.0, "inter_node_GBps": 1.0},
        "training": {"microbatches": microbatches},
        "layers": [
            {"name": f"l{i}", "costs": {k: {"fwd_ms": 1.0, "bwd_ms": 1.0, "weight_bytes": w, "act_bytes": a} for k, (w, a) in costs.items()}}
            for i, costs in enumerate(layers)
        ],
    }
    if stages is not None:
        doc["stages"] = stages
    return Problem.from_dict(doc)


CASES = [
    # G = 6 allows sizes 1, 2, 6: two stages can never use exactly 6 devices
    ("stage counts", make([{"dp1tp1": (1, 1), "dp2tp1": (1, 1)}] * 2, gpus=6, stages=2), "no stage count P in 2..2 has P allowed stage sizes (1, 2, 6) summing to the 6 devices"),
    # one layer is too big for a GPU in every layout
    ("layer memory", make([{"dp1tp1": (10, 1)}, {"dp1tp1": (2000, 1), "dp1tp2": (1500, 1)}], gpus=2), "layer 1 (l1) needs at least 1,501 B in any layout (smallest: dp1tp2, weights + 1 stashed microbatch) > 1,000 B per GPU"),
    # layer 0 holds min(m, P) = 4 microbatches in stage 0
    ("stash", make([{"dp1tp1": (100, 300)}] + [{"dp1tp1": (10, 1)}] * 3, gpus=4, microbatches=4, stages=4), "layer 0 (l0) needs at least 1,300 B in any layout (smallest: dp1tp1, weights + 4 stashed microbatches)"),
    # each layer fits, the single possible stage does not
    ("combined memory", make([{"dp1tp1": (600, 0)}, {"dp1tp1": (600, 0)}], gpus=1), "no valid plan fits in 1,000 B per GPU: with unlimited memory the fastest plan (1 stages) needs 1,200 B on stage 0"),
    # layouts that cannot share a stage and sizes that cannot split
    ("layouts", make([{"dp1tp1": (1, 1)}, {"dp2tp1": (1, 1)}], gpus=2), "no valid plan even with unlimited memory"),
]


@pytest.mark.parametrize("name,problem,words", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("method", ["dp", "brute"])
def test_infeasible_reason(name, problem, words, method):
    r = solve(problem, method)
    assert r.status == "infeasible" and r.plan is None
    assert words in r.message, r.message


def test_stage_count_closed_form_matches_the_subset_sum_dp():
    """count_spans (O(nodes), rule 3's sizes) lists exactly the counts a subset-sum DP over the sizes finds."""
    from partitioner.problem import Cluster
    from partitioner.solvers.feasibility import count_spans, counts_by_enumeration

    for gpus in range(1, 25):
        for nodes in range(1, 9):
            total = nodes * gpus
            spans = count_spans(nodes, gpus)
            closed = {p for lo, hi in spans for p in range(lo, hi + 1)}
            assert closed == counts_by_enumeration(Cluster(nodes, gpus, 1, 1.0, 1.0).allowed_sizes(), total, total), (gpus, nodes)
            assert all(a[1] + 1 < b[0] for a, b in zip(spans, spans[1:]))  # merged: disjoint, not adjacent
