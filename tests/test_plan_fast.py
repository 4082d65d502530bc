"""``plan``'s shortcuts give what the long way gives: projections, bounds, skipped solves."""
from __future__ import annotations

import pytest

from partitioner.costs import build_problem
from partitioner.planning import uniform_projection, variant_at
from partitioner.problem import _cost_doc as _cost_doc_for_test
from partitioner.problem import Problem


def _round_trip_projection(problem: Problem, variant: str) -> Problem | None:
    """The projection written as a v1 document and read back (what uniform_projection did before)."""
    doc = problem.to_dict()
    for layer, entry in zip(problem.layers, doc["layers"]):
        costs = {}
        for mesh in {(c.dp, c.tp) for c in layer.costs}:
            cost = next((v for k, v in layer.costs.items() if (k.dp, k.tp) == mesh
                         and k.variant == variant_at(problem, mesh[0], variant)), None)
            if cost is not None:
                costs[f"dp{mesh[0]}tp{mesh[1]}"] = _cost_doc_for_test(cost)
        if not costs:
            return None
        entry["costs"] = dict(sorted(costs.items()))
    doc["version"] = 1
    doc.pop("variants", None)
    return Problem.from_dict(doc)


@pytest.mark.parametrize("model, cluster, nodes, batch, m", [
    ("pi0", "dgx-h100", 1, 256, 8),
    ("openvla-7b", "dgx-a100-80g", 2, 512, 16),
    ("llava-1.5-7b", "dgx-h100", 1, 64, 1),
])
def test_projection_equals_the_v1_document_read_back(model, cluster, nodes, batch, m):
    problem = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options={"variants": ["all"]})
    assert problem.version == 2 and problem.variants
    for variant in ["", *problem.variants, "no-such-variant"]:
        fast, slow = uniform_projection(problem, variant), _round_trip_projection(problem, variant)
        if slow is None:
            assert fast is None, variant
            continue
        assert fast == slow, variant
        assert fast.version == 1 and not fast.variants
        for a, b in zip(fast.layers, slow.layers):
            assert list(a.costs) == list(b.costs)  # the same entries in the same order
            assert list(a.costs.values()) == list(b.costs.values())
