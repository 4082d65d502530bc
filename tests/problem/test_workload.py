"""``Problem.workload``: the typed reading of what the cost model writes into a problem's ``meta``."""
from __future__ import annotations

import json

import pytest

from partitioner.costs import build_problem
from partitioner.problem import LayerHint, ModelWorkload, Problem, ProblemError


@pytest.fixture(scope="module")
def built() -> Problem:
    return build_problem("pi0", "dgx-h100", nodes=1, global_batch=64, microbatches=8)


def test_the_workload_is_the_meta_the_cost_model_wrote(built):
    meta, work = built.meta, built.workload
    assert (work.model, work.cluster, work.nodes, work.global_batch) == ("pi0", "dgx-h100", 1, 64)
    for key in ("llm_tokens_per_sample", "model_flops_per_iteration", "forward_flops_per_sample", "peak_flops_per_gpu",
                "params", "microbatch_size"):
        assert getattr(work, key) == meta[key], key
    assert work.cost_options == meta["options"] and work.microbatch_size == 64 / 8  # global batch / m
    assert len(work.layers) == built.num_layers
    assert [h.to_dict() for h in work.layers] == json.loads(json.dumps(built.to_dict()["meta"]["layers"]))
    assert work.tokens_per_iteration() == 64 * meta["llm_tokens_per_sample"]


def test_a_saved_problem_reads_back_the_same_workload(built, tmp_path):
    again = Problem.from_dict(json.loads(json.dumps(built.to_dict())))
    assert again.workload == built.workload


def test_a_hand_written_meta_keeps_the_defaults_where_it_holds_something_else():
    work = ModelWorkload.of({"model": 3, "global_batch": "64", "peak_flops_per_gpu": True, "nodes": 2,
                             "layers": [{"name": "a"}, "not a layer"], "microbatch_size": "8", "options": [1]})
    assert work == ModelWorkload(nodes=2)
    assert ModelWorkload.of(None) == ModelWorkload() and ModelWorkload().tokens_per_iteration() == 0.0
    assert ModelWorkload.of({"layers": [{"name": "a", "fqns": ["x.y"]}]}).layers == (LayerHint("a", fqns=("x.y",)),)


def test_a_layer_hint_names_its_bad_field():
    assert LayerHint.of({"name": "a"}, "h").names == ("a",)
    with pytest.raises(ProblemError, match=r"h\.fqns"):
        LayerHint.of({"name": "a", "fqns": "x"}, "h")
    with pytest.raises(ProblemError, match="must be an object"):
        LayerHint.of(["a"], "h")
