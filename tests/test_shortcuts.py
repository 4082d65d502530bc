"""The cost model's shared tables and the parser's shared reads equal the long way."""
from __future__ import annotations

import copy

import pytest

from partitioner.costs import CostOptions, build_problem, cluster_layouts, layer_cost, layouts_for, model_layers
from partitioner.costs.variants import applies, variant_knobs
from partitioner.presets import load_cluster, load_model
from partitioner.problem import Layout, Problem, ProblemError


PRESETS = [
    ("pi0", "dgx-h100", 1, 256, 8, {"variants": ["all"]}),
    ("openvla-7b", "dgx-a100-80g", 2, 512, 16, {"variants": ["all"]}),
    ("qwen2-vl-7b-video", "dgx-h100", 2, 256, 4, {"variants": ["none"], "flash_attention": False}),
    ("internvl-1.5-26b", "dgx-h200", 1, 64, 64, {"recompute": "full", "zero1": True, "max_tp": 4}),
]


@pytest.mark.parametrize("model, cluster, nodes, batch, m, options", PRESETS)
def test_every_entry_is_its_own_layers_cost(model, cluster, nodes, batch, m, options):
    """Layers of one cost signature share a table; each entry is still layer_cost of that very layer."""
    problem = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options=options)
    spec, cl, opts = load_model(model), load_cluster(cluster), CostOptions.from_mapping(options)
    mb = batch // m
    knobs = variant_knobs(opts.variants, flash_attention=opts.flash_attention)
    layers = model_layers(spec, opts)
    assert len(layers) == problem.num_layers
    shared = 0
    for i, (layer, built) in enumerate(zip(layers, problem.layers)):
        expected = {}
        for lay in layouts_for(layer, cluster_layouts(cl.gpus_per_node, nodes), mb, opts):
            for kn in knobs or [None]:
                if kn is None or applies(kn, lay.dp):
                    key = Layout(lay.dp, lay.tp, kn.name if kn is not None else "")
                    expected[key] = layer_cost(layer, lay, mb / lay.dp, cl, opts, m, kn).to_dict()
        assert list(built.costs) == list(expected)  # the same entries, in the same order
        for key, cost in built.costs.items():
            assert {k: getattr(cost, k) for k in expected[key]} == expected[key]
        shared += any(built.costs is other.costs for other in problem.layers[:i])
    assert shared > 0  # equal blocks do share their table


@pytest.mark.parametrize("model, cluster, nodes, batch, m, options", PRESETS[:3])
def test_shared_tables_read_as_separate_ones(model, cluster, nodes, batch, m, options):
    problem = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options=options)
    doc = problem.to_dict()
    first = doc["layers"][1]["costs"]
    for entry in doc["layers"][2:]:  # every layer with first's keys reads the very same dict
        if list(entry["costs"]) == list(first):
            entry["costs"] = first
    again = Problem.from_dict(doc)
    apart = Problem.from_dict(copy.deepcopy(doc))
    assert again == apart
    assert again.to_dict() == apart.to_dict()


def _overflowing(shared: bool) -> dict:
    table = {"dp1tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 2**49, "act_bytes": 1},
             "dp2tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 1, "act_bytes": 2**50}}
    layers = [{"name": f"l{i}", "costs": table if shared else copy.deepcopy(table)} for i in range(12)]
    return {"version": 1, "cluster": {"nodes": 1, "gpus_per_node": 2, "gpu_memory_bytes": 2**40, "intra_node_GBps": 100,
                                      "inter_node_GBps": 10}, "training": {"microbatches": 2}, "layers": layers}


def test_a_shared_table_is_summed_per_layer():
    """The per-config byte totals still count every layer of a shared table (and name the same entry)."""
    with pytest.raises(ProblemError) as apart:
        Problem.from_dict(_overflowing(False))
    with pytest.raises(ProblemError) as shared:
        Problem.from_dict(_overflowing(True))
    assert str(shared.value) == str(apart.value)
    assert "layers[8].costs.dp2tp1.act_bytes" in str(shared.value)
