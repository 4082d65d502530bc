"""The tied-embedding gradient all-reduce in the LM head's entries (Megatron-LM's embedding group).

Closed form: two ranks, one ring all-reduce of the head's ``V h / tp``
gradient slice at ``grad_bytes_per_param`` bytes, ``2 (2-1)/2 = 1`` times
its bytes on the wire, plus the collective latency; NVLink at
``nvlink_efficiency`` when the job is one node, else one NIC per GPU;
once per iteration, so ``/ m`` in each microbatch's weight-gradient time.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from partitioner.costs import build_problem, load_cluster, model_layers, tied_sync_ms
from partitioner.costs.entry import finish_cost, layer_terms
from partitioner.costs.options import CostOptions
from partitioner.costs.variants import Knobs
from partitioner.presets import ModelSpec, load_model
from partitioner.problem import Layout

V_TOKENS = 512


def tied_llama(tied: bool = True, frozen: bool = False) -> ModelSpec:
    llm = load_model("llava-1.5-7b").module("llm")
    return ModelSpec(name="tied-llama", modules=(replace(llm, text_tokens=V_TOKENS, tie_embeddings=tied, frozen=frozen,
                                                         layers=2),))


def closed_form(V: int, h: int, tp: int, nodes: int, opts: CostOptions, cluster) -> float:
    GBps, eff = (cluster.intra_node_GBps, opts.nvlink_efficiency) if nodes == 1 else (cluster.inter_node_GBps, 1.0)
    return opts.collective_latency_us * 1e-3 + V * h / tp * opts.grad_bytes_per_param / (eff * GBps * 1e6)


def head(model: ModelSpec, opts: CostOptions):
    return next(layer for layer in model_layers(model, opts) if layer.name.endswith(".head"))


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("nodes", [1, 4])
def test_head_entry_carries_the_sync_once_per_iteration(tp, nodes):
    cluster = load_cluster("dgx-h100")
    opts = CostOptions(memory_bound_ops=False)  # no optimizer step: the tied copy's only other time term
    m = 8
    tied = head(tied_llama(), opts)
    untied_copy = replace(tied, pieces=tuple(replace(p, tied_params=0) for p in tied.pieces))
    lay, knobs = Layout(1, tp), Knobs()  # dp 1: no data-parallel sync of the copy either
    terms = layer_terms(tied.pieces, tp, 2.0, "none", cluster, opts)
    with_sync = finish_cost(tied, lay, terms, cluster, opts, m, knobs, nodes=nodes)
    without = finish_cost(untied_copy, lay, terms, cluster, opts, m, knobs, nodes=nodes)
    llm = tied_llama().module("llm")
    want = closed_form(llm.vocab, llm.hidden, tp, nodes, opts, cluster)
    assert tied_sync_ms(tied, lay, cluster, opts, nodes=nodes) == pytest.approx(want, rel=1e-12)
    assert with_sync.bwd_weight_ms - without.bwd_weight_ms == pytest.approx(want / m, rel=1e-9)
    assert with_sync.fwd_ms == without.fwd_ms and with_sync.bwd_input_ms == without.bwd_input_ms


def test_untied_frozen_and_other_layers_pay_nothing():
    cluster, opts = load_cluster("dgx-h100"), CostOptions()
    lay = Layout(1, 1)
    assert tied_sync_ms(head(tied_llama(tied=False), opts), lay, cluster, opts, nodes=2) == 0.0
    assert tied_sync_ms(head(tied_llama(frozen=True), opts), lay, cluster, opts, nodes=2) == 0.0
    for layer in model_layers(tied_llama(), opts):
        if not layer.name.endswith(".head"):
            assert tied_sync_ms(layer, lay, cluster, opts, nodes=2) == 0.0


def test_builder_puts_the_sync_in_the_head_entries():
    """Across nodes the head's W grows by (NIC - NVLink) sync / m over the one-node problem; no other layer changes."""
    cluster, opts = load_cluster("dgx-h100"), CostOptions()
    m = 4
    one = build_problem(tied_llama(), cluster, nodes=1, global_batch=8, microbatches=m)
    two = build_problem(tied_llama(), cluster, nodes=2, global_batch=8, microbatches=m)
    llm = tied_llama().module("llm")
    for a, b in zip(one.layers, two.layers):
        for lay, cost in a.costs.items():
            if lay.dp != 1:
                continue  # dp rings differ between one and two nodes
            delta = b.costs[lay].bwd_weight_ms - cost.bwd_weight_ms
            if a.name.endswith(".head"):
                want = (closed_form(llm.vocab, llm.hidden, lay.tp, 2, opts, cluster)
                        - closed_form(llm.vocab, llm.hidden, lay.tp, 1, opts, cluster)) / m
                assert delta == pytest.approx(want, rel=1e-6)
                assert delta > 0
            else:
                assert delta == pytest.approx(0.0, abs=1e-12)
