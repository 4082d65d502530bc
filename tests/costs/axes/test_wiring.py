"""The problem builder wires format v3's axes in: tied weights, context and expert parallelism.

docs/decisions.md, "Cost model v3 wiring": a tied LM head names the embedding
(``tied_to``) and carries its copy's bytes; cp keys only for long
sequences (``cp_min_tokens``); ep keys on the layers of a MoE module.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from partitioner.costs import build_problem
from partitioner.costs.axes.experts import rank_dedup
from partitioner.plan import Plan, Stage, evaluate
from partitioner.problem import Layout, Problem

HF = Path(__file__).resolve().parents[2] / "fixtures" / "hf"
PALIGEMMA = str(HF / "paligemma-3b-pt-224" / "config.json")


def _untied(problem: Problem) -> Problem:
    """The same problem without the tie (a pipeline that keeps both copies everywhere)."""
    doc = problem.to_dict()
    for layer in doc["layers"]:
        layer.pop("tied_to", None)
        for entry in layer["costs"].values():
            entry.pop("tied_weight_bytes", None)
    return Problem.from_dict(doc)


# --------------------------------------------------------------------------- tied weights


def test_a_tied_head_names_the_embedding_and_its_copy():
    problem = build_problem(PALIGEMMA, "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    assert problem.version == 3
    names = [layer.name for layer in problem.layers]
    head, embed = names.index("llm.head"), names.index("llm.embed")
    assert problem.layers[head].tied_to == embed
    assert problem.ties == ((embed, head),)
    vocab, hidden = 257216, 2048  # PaliGemma-3B's Gemma: the tied matrix
    for layout, cost in problem.layers[head].costs.items():
        assert 0 < cost.tied_weight_bytes <= cost.weight_bytes
        # the copy's bf16 weight, fp32 gradient and (sharded) optimizer states / tp, as the rest of the head
        copy = vocab * hidden * 18.0 / layout.tp
        assert cost.tied_weight_bytes == pytest.approx(copy, rel=1e-6)
    for k, layer in enumerate(problem.layers):
        if k != head:
            assert layer.tied_to is None
            assert all(c.tied_weight_bytes == 0 for c in layer.costs.values())


def test_a_one_stage_plan_holds_a_tied_head_once():
    problem = build_problem(PALIGEMMA, "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    untied = _untied(problem)
    head = [layer.name for layer in problem.layers].index("llm.head")
    plan = Plan((Stage(0, len(problem.layers) - 1, 8, 1, 8),))
    tied_memory = evaluate(problem, plan).stages[0].weight_bytes
    untied_memory = evaluate(untied, plan).stages[0].weight_bytes
    copy = problem.layers[head].costs[next(c for c in problem.layers[head].costs if c.tp == 8)].tied_weight_bytes
    assert untied_memory - tied_memory == copy > 0
    # split so that the head's stage lacks the embedding: that stage keeps the whole copy
    two = Plan((Stage(0, head - 1, 4, 1, 4), Stage(head, head, 4, 1, 4)))
    assert evaluate(problem, two).stages[1].weight_bytes == evaluate(untied, two).stages[1].weight_bytes


def test_untied_models_stay_in_their_format():
    problem = build_problem("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    assert problem.version == 1 and problem.ties == ()


# --------------------------------------------------------------------------- context parallelism

VIDEO = "qwen2.5-vl-7b-video-64f"  # 8704 LLM tokens per sample: over cp_min_tokens


@pytest.fixture(scope="module")
def video() -> Problem:
    return build_problem(VIDEO, "dgx-h100", nodes=4, global_batch=256, microbatches=256)


def _layer(problem: Problem, name: str):
    return next(layer for layer in problem.layers if layer.name == name)


def test_cp_keys_only_for_long_sequences_and_valid_chunks(video):
    assert video.version == 3
    seq = video.meta["llm_tokens_per_sample"]
    assert seq == 8704
    for layer in video.layers:
        for lay in layer.costs:
            assert lay.devices in video.cluster.allowed_sizes() and lay.tp <= 8
            if lay.cp > 1 and layer.name.startswith("llm"):
                assert seq % (2 * lay.cp) == 0
    cps = {lay.cp for lay in _layer(video, "llm.3").costs}
    assert cps == {1, 2, 4, 8}
    # every layer of a stage needs the key: the vision layers have the cp keys too (replicated over cp)
    assert {lay.cp for lay in _layer(video, "vision.0").costs} == {1, 2, 4, 8}
    short = build_problem("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    assert all(lay.cp == 1 for layer in short.layers for lay in layer.costs)
    # lowered threshold: cp keys appear, and only those whose 2 cp chunks divide the sequence
    lowered = build_problem("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=8,
                            options={"cp_min_tokens": 64})
    s = lowered.meta["llm_tokens_per_sample"]
    offered = {lay.cp for lay in _layer(lowered, "llm.0").costs}
    assert offered == {c for c in (1, 2, 4, 8) if s % (2 * c) == 0} and offered != {1}


def test_a_cp2_entry_halves_the_language_layer(video):
    costs = _layer(video, "llm.3").costs
    base = costs[Layout(1, 2)]
    cp2 = costs[Layout(1, 2, cp=2)]
    assert cp2.act_bytes == pytest.approx(base.act_bytes / 2, rel=1e-3)
    assert cp2.weight_bytes == base.weight_bytes  # weights are whole on every cp rank (no ZeRO on the plain key)
    assert 0.45 * base.fwd_ms < cp2.fwd_ms < 0.6 * base.fwd_ms  # half the work, the ring mostly hidden
    head = _layer(video, "llm.head").costs
    assert head[Layout(1, 2, cp=2)].act_bytes == pytest.approx(head[Layout(1, 2)].act_bytes / 2, rel=1e-3)


def test_vision_layers_are_replicated_over_cp(video):
    costs = _layer(video, "vision.5").costs
    base, cp2 = costs[Layout(1, 2)], costs[Layout(1, 2, cp=2)]
    assert cp2.fwd_ms == base.fwd_ms and cp2.act_bytes == base.act_bytes and cp2.weight_bytes == base.weight_bytes
    assert cp2.bwd_input_ms == pytest.approx(base.bwd_input_ms)
    assert cp2.bwd_weight_ms > base.bwd_weight_ms  # its gradients now sync over dp x cp = 2 ranks


def test_cp_algorithm_option_and_windowed_layers():
    from partitioner.costs.axes.wiring import piece_algorithms
    from partitioner.costs.layers import model_layers
    from partitioner.costs.options import CostOptions
    from partitioner.presets import load_model

    opts = CostOptions.from_mapping({"cp_algorithm": "a2a"})
    assert opts.axes.cp_algorithm == "a2a" and opts.to_dict()["cp_algorithm"] == "a2a"
    layers = model_layers(load_model(VIDEO))
    llm = next(layer for layer in layers if layer.name == "llm.3").pieces[0]
    window = next(layer for layer in layers if layer.name == "vision.0").pieces[0]
    assert llm.mask == "causal" and window.mask == "window"
    assert set(piece_algorithms(llm, 2, 1, opts)) == {"p2p", "a2a", "all_gather"}
    assert "a2a" not in piece_algorithms(llm, 8, 1, opts)  # 4 key/value heads do not split 8 ways
    assert "p2p" not in piece_algorithms(window, 2, 1, opts)  # no ring for sliding windows
    p2p = build_problem(VIDEO, "dgx-h100", nodes=4, global_batch=256, microbatches=256, options={"cp_degrees": [1, 2]})
    a2a = build_problem(VIDEO, "dgx-h100", nodes=4, global_batch=256, microbatches=256,
                        options={"cp_degrees": [1, 2], "cp_algorithm": "a2a"})
    key = Layout(1, 1, cp=2)
    ring, ulysses = _layer(p2p, "llm.3").costs[key], _layer(a2a, "llm.3").costs[key]
    assert ring.act_bytes == ulysses.act_bytes and ring.fwd_ms != ulysses.fwd_ms  # the algorithm's traffic differs


def test_bad_axis_options_name_the_field():
    from partitioner.costs.options import CostOptions
    from partitioner.problem import ProblemError

    for bad, field in (({"cp_degrees": "two"}, "options.cp_degrees"), ({"cp_min_tokens": 0}, "options.cp_min_tokens"),
                       ({"cp_degree": 2}, "options.cp_degree")):
        with pytest.raises(ProblemError) as err:
            CostOptions.from_mapping(bad)
        assert field in str(err.value)
    assert CostOptions.from_mapping({"cp_degrees": 1}).axes.cp_degrees == (1,)  # the CLI's -c cp_degrees=1


def test_short_sequence_presets_keep_their_problem():
    """No cp or ep keys, and every entry what the pre-v3 path (layer_cost) gives."""
    from partitioner.costs.build import ProblemBuilder
    from partitioner.costs.entry import layer_cost
    from partitioner.costs.variants import Knobs

    builder = ProblemBuilder("qwen2-vl-7b", "dgx-h100", nodes=2, options={"variants": "all"})
    problem = builder.build(256, 8)
    assert problem.version == 2
    layers, _, knob_list, _ = builder._layers()
    by_name = {kn.name: kn for kn in knob_list or []}
    for layer, doc in zip(layers, problem.layers):
        assert doc.tied_to is None
        for lay, cost in doc.costs.items():
            assert not lay.is_v3
            knobs = by_name.get(lay.variant, Knobs(0, "none"))
            want = layer_cost(layer, Layout(lay.dp, lay.tp), 32 / lay.dp, builder.cluster, builder.opts, 8, knobs, nodes=2)
            assert (cost.fwd_ms, cost.bwd_ms, cost.weight_bytes, cost.act_bytes) == pytest.approx(
                (want.fwd_ms, want.bwd_ms, want.weight_bytes, want.act_bytes))


# --------------------------------------------------------------------------- expert parallelism

MOE = "qwen3-vl-30b-a3b"  # 128 routed experts, 8 per token, every LLM layer MoE


@pytest.fixture(scope="module")
def moe() -> Problem:
    return build_problem(MOE, "dgx-h100", nodes=2, global_batch=256, microbatches=8,
                         options={"ep_degrees": [2, 4, 8, 16, 32], "etp_degrees": [1, 2], "variants": "all"})


def test_ep_keys_only_where_they_split_the_experts(moe):
    assert moe.version == 3
    for layer in moe.layers:
        eps = [lay for lay in layer.costs if lay.ep > 1]
        if layer.module != "llm":
            assert not eps and all(lay.etp == 1 for lay in layer.costs)  # vision, projector: no ep keys
            continue
        assert eps
        for lay in eps:
            assert 128 % lay.ep == 0 and lay.devices % (lay.ep * lay.etp) == 0
        # every base config offers every (ep, etp) that splits it
        for base in [lay for lay in layer.costs if lay.ep == 1 and not lay.variant]:
            want = {(e, f) for e in (2, 4, 8, 16, 32) for f in (1, 2) if base.devices % (e * f) == 0}
            got = {(lay.ep, lay.etp) for lay in eps if (lay.dp, lay.tp, lay.cp) == (base.dp, base.tp, base.cp)
                   and not lay.variant}
            assert got == want, base.key


def test_dense_layers_of_a_moe_module_ignore_ep(moe):
    for name in ("llm.embed", "llm.head"):
        costs = _layer(moe, name).costs
        split = [lay for lay in costs if lay.ep > 1]
        assert split
        for lay in split:
            assert costs[lay] == costs[Layout(lay.dp, lay.tp, lay.variant, lay.cp)]


def test_moe_layer_memory_falls_with_ep(moe):
    costs = _layer(moe, "llm.3").costs
    weights = [costs[Layout(16, 1, ep=e)].weight_bytes for e in (2, 4, 8, 16)]
    assert weights == sorted(weights, reverse=True) and weights[-1] < costs[Layout(16, 1)].weight_bytes
    # ZeRO-1 shards the expert optimizer states over edp: less than the plain key at every ep
    for e in (2, 4, 8, 16):
        assert costs[Layout(16, 1, "zero1", ep=e)].weight_bytes < costs[Layout(16, 1, ep=e)].weight_bytes
    # etp splits each expert further
    assert costs[Layout(16, 1, ep=8, etp=2)].weight_bytes < costs[Layout(16, 1, ep=8)].weight_bytes


def test_the_all_to_all_appears_and_grows_across_nodes():
    from dataclasses import replace

    from partitioner.costs import load_cluster

    h100 = load_cluster("dgx-h100")
    fast = replace(h100, intra_node_GBps=1e6, inter_node_GBps=1e6)

    def fwd(cluster, **more) -> dict[int, float]:
        p = build_problem(MOE, cluster, nodes=2, global_batch=256, microbatches=8,
                          options={"ep_degrees": [8, 16], "variants": "none", "collective_latency_us": 0.0, **more})
        costs = _layer(p, "llm.3").costs
        return {e: costs[Layout(16, 1, ep=e)].fwd_ms for e in (8, 16)}

    exposed, free = fwd(h100), fwd(fast)
    a2a = {e: exposed[e] - free[e] for e in (8, 16)}
    assert a2a[8] > 0  # dispatch and combine over NVLink (the group sits in one node)
    assert a2a[16] > 3 * a2a[8]  # the 16-rank group spans both nodes: half its peers behind the NICs
    # Megatron's EP overlap hides part of it behind the other microbatch's compute, never all of it
    overlapped = fwd(h100, ep_overlap=True)
    for e in (8, 16):
        assert free[e] < overlapped[e] < exposed[e]
    # DeepEP-style dispatch (flex) sends a token once per other node, and over NVLink once per destination rank
    # (16 experts per rank at ep 8: a token's 8 experts sit on 1 - C(112, 8) / C(128, 8) of the 8 ranks)
    flex = fwd(h100, ep_dispatcher="flex")
    assert flex[8] - free[8] == pytest.approx(rank_dedup(128, 8, 8) * a2a[8], rel=1e-3)
    assert flex[16] < exposed[16] - 0.5 * a2a[16]
