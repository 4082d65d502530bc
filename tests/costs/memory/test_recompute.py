"""Module-level and per-op recompute (issue 32): what each setting frees and replays, its names, its variants."""
from __future__ import annotations

import dataclasses

import pytest

from partitioner.costs import CostOptions, block_activation_terms, build_problem, load_cluster, model_layers
from partitioner.costs.axes.wiring import moe_ep_cost
from partitioner.costs.build import recompute_settings
from partitioner.costs.entry import block_time_terms, layer_terms
from partitioner.costs.memory.recompute import (
    DENSE_MODULES,
    acting_modules,
    applicable_modules,
    canonical_setting,
    kept_terms,
    merge_settings,
    modules_of,
    op_kept_bytes,
    setting_of,
)
from partitioner.costs.variants import Knobs, applies, parse_variant, variant_knobs
from partitioner.presets import load_model
from partitioner.problem import Layout, ProblemError

H100 = load_cluster("dgx-h100")
OPTS = CostOptions()


def _block(model: str, moe: bool):
    """A decoder block of ``model`` (a MoE one, or a dense one: the first dense layer or a vision block)."""
    for layer in model_layers(load_model(model), OPTS):
        p = layer.pieces[0]
        if p.shape is not None and p.backward and (p.moe is not None) == moe and (moe or layer.role == "decoder"):
            return layer
    raise AssertionError(model)


def _moe_layer(model: str = "glm-4.5v"):
    return _block(model, True)


def test_setting_names_are_canonical():
    assert modules_of("selective") == {"core_attn"} and setting_of(["core_attn"]) == "selective"
    assert setting_of(["moe_act", "layernorm"]) == "layernorm+moe_act"
    assert setting_of(["moe", "moe_act", "shared_experts", "layernorm"]) == "layernorm+moe"  # moe contains both
    assert canonical_setting("op") == "op" and setting_of([]) == "none"
    with pytest.raises(ValueError, match="unknown recompute setting"):
        modules_of("layernorm+attention")
    assert parse_variant("zero1+recompute-layernorm+moe_act") == Knobs(1, "layernorm+moe_act")
    assert parse_variant("recompute-op") == Knobs(0, "op")
    for bad in ("recompute-moe_act+layernorm", "recompute-moe+moe_act", "recompute-core_attn", "recompute-none"):
        with pytest.raises(ValueError, match="unknown variant"):
            parse_variant(bad)
    knobs = variant_knobs(("all",), flash_attention=True, modules=("moe_act", "op"))
    names = [k.name for k in knobs]
    assert names[-5:] == ["recompute-moe_act", "zero1+recompute-moe_act", "recompute-op", "zero1+recompute-op",
                          "zero3+recompute-op"]
    # a module set without ZeRO only at one replica (its ZeRO-1 twin is as fast in less memory above)
    assert [applies(k, 1) for k in knobs[-5:]] == [True, False, True, False, False]
    assert [applies(k, 4) for k in knobs[-5:]] == [False, True, True, True, True]


def test_recompute_options_are_checked():
    assert CostOptions.from_mapping({"recompute": "layernorm+moe_act"}).recompute == "layernorm+moe_act"
    assert CostOptions.from_mapping({"recompute_modules": "moe,op"}).recompute_modules == ("moe", "op")
    for key, value in (("recompute", "moe_act+layernorm"), ("recompute", "attn"), ("recompute_modules", "full"),
                       ("recompute_modules", "auto,moe")):
        with pytest.raises(ProblemError, match=f"options.{key}"):
            CostOptions.from_mapping({key: value})


def test_module_frees_the_terms_megatron_discards():
    moe = _moe_layer().pieces[0]
    dense = _block("glm-4.5v", False).pieces[0]
    b, t = 2.0, 2
    for piece in (moe, dense):
        terms = block_activation_terms(piece.shape, b, t, flash_attention=True, sequence_parallel=True)
        assert kept_terms(terms, piece, "selective") == {k: v for k, v in terms.items() if k != "softmax_stats"}
        if piece is dense:  # the TE spec fuses a dense layer's norms: layernorm frees nothing, mlp its MLP
            assert kept_terms(terms, piece, "layernorm") == terms
            assert set(terms) - set(kept_terms(terms, piece, "mlp")) == {"mlp", "mlp_input"}
            continue
        assert set(terms) - set(kept_terms(terms, piece, "layernorm")) == {"mlp_input"}  # the standalone pre-MLP norm
        assert kept_terms(terms, piece, "mlp") == terms  # mlp acts on dense layers only
        routed = moe.moe.top_k * moe.moe.moe_ffn / (moe.moe.top_k * moe.moe.moe_ffn + moe.moe.shared_ffn)
        # gated SiLU: gate, up, act(gate), product; moe_act discards the activation's output, keeps its fc1 input
        assert kept_terms(terms, piece, "moe_act")["mlp"] == pytest.approx(terms["mlp"] * (1 - routed / 2))
        assert kept_terms(terms, piece, "shared_experts")["mlp"] == pytest.approx(terms["mlp"] * routed)
        assert "mlp" not in kept_terms(terms, piece, "moe") and "mlp_input" in kept_terms(terms, piece, "moe")


def test_each_module_frees_memory_for_replayed_time():
    layer = _moe_layer()
    _, b0, _, a0 = layer_terms(layer.pieces, 2, 2.0, "none", H100, OPTS)
    _, bf, _, af = layer_terms(layer.pieces, 2, 2.0, "full", H100, OPTS)
    seen = {}
    for setting in ("layernorm", "moe_act", "shared_experts", "moe", "layernorm+moe_act", "layernorm+moe", "op"):
        _, b, _, a = layer_terms(layer.pieces, 2, 2.0, setting, H100, OPTS)
        assert af < a < a0 and b0 < b < bf, setting  # strictly between no recompute and full
        seen[setting] = (a0 - a, b - b0)
    # moe_act and layernorm replay memory-bound kernels only: far cheaper per byte than the MoE layer's GEMMs
    assert seen["moe_act"][0] / seen["moe_act"][1] > 3 * seen["moe"][0] / seen["moe"][1]
    assert seen["layernorm+moe_act"][0] == pytest.approx(seen["layernorm"][0] + seen["moe_act"][0])
    assert seen["moe"][0] > seen["moe_act"][0] + seen["shared_experts"][0]


def test_moe_recompute_replays_the_all_to_alls_at_ep():
    """Megatron's MoE checkpoint runs route, dispatch, experts and combine again (moe_layer.py): the all-to-alls too."""
    layer = _moe_layer()
    lay = Layout(4, 2, cp=1, ep=8)
    entry = {s: moe_ep_cost(layer, lay, 2.0, H100, OPTS, 8, Knobs(0, s), nodes=2)
             for s in ("none", "moe_act", "moe", "full")}
    assert entry["full"].act_bytes < entry["moe"].act_bytes < entry["moe_act"].act_bytes < entry["none"].act_bytes
    fast = dataclasses.replace(H100, intra_node_GBps=1e9, inter_node_GBps=1e9)  # free all-to-alls
    cheap = {s: moe_ep_cost(layer, lay, 2.0, fast, OPTS, 8, Knobs(0, s), nodes=2) for s in ("none", "moe")}
    replay = entry["moe"].bwd_input_ms - entry["none"].bwd_input_ms
    replay_free = cheap["moe"].bwd_input_ms - cheap["none"].bwd_input_ms
    assert replay > replay_free > 0  # the replay pays the forward all-to-alls again


def test_torchtitan_op_policy_keeps_saved_ops_by_hand():
    """SelectiveAC on a dense block: block input, wq, wv, w1, w2 (before its reduce-scatter), O, LSE, two reduce-scatters."""
    piece = _block("qwen2.5-vl-7b-video-64f", False).pieces[0]
    sh = piece.shape
    s, h, a, k, d, f = sh.tokens, sh.hidden, sh.heads, sh.kv_heads, sh.head_dim, sh.ffn
    b, t = 1.0, 2
    want = 2 * s * h / t + 2 * s * a * d / t + 2 * s * (k / t) * d + 2 * s * a * d / t + 4 * a * s / t
    want += 2 * s * f / t + 2 * s * h + 2 * 2 * s * h / t
    assert op_kept_bytes(piece, b, t, flash_attention=True, sequence_parallel=True) == pytest.approx(want)
    none = block_time_terms((piece,), t, b, "none", H100, OPTS)
    op = block_time_terms((piece,), t, b, "op", H100, OPTS)
    gemm = none["fwd.gemm"]
    # wk, wo and w3 of wq, wk, wv, wo, w1, w3, w2: a third of the weighted FLOPs and less than their half
    assert gemm / 4 < op["bwd.recompute"] - none["fwd.memory"] < gemm / 2 + none["fwd.tp_comm"]


def test_merge_settings_where_modules_act():
    moe, dense = frozenset({"core_attn", "layernorm", "moe_act", "moe"}), DENSE_MODULES
    assert merge_settings([("layernorm+moe_act", moe), ("none", dense)]) == "layernorm+moe_act"  # no-ops on vision
    assert merge_settings([("layernorm+moe_act", moe), ("mlp", dense)]) == "layernorm+mlp+moe_act"
    assert merge_settings([("layernorm+moe_act", moe), ("none", moe)]) is None
    assert merge_settings([("layernorm+moe_act", moe | dense), ("mlp", dense)]) is None  # a dense decoder layer too
    assert merge_settings([("mlp", dense), ("none", dense)]) is None
    assert merge_settings([("full", moe), ("none", dense)]) is None and merge_settings([("op", moe)]) == "op"
    assert acting_modules("decoder") >= moe and acting_modules("vision") == dense == {"core_attn", "mlp"}
    assert acting_modules("decoder", ["core_attn", "mlp"]) == dense


@pytest.mark.parametrize("model, chain", [
    ("qwen3-vl-30b-a3b", ("moe_act", "layernorm+moe_act", "layernorm+mlp+moe_act")),
    ("llava-1.5-7b", ("mlp",)),
])
def test_the_chain_is_nested_and_cheaper_per_byte_than_full(model, chain):
    opts = CostOptions.from_mapping({"variants": "all"})
    layers = model_layers(load_model(model), opts)
    got = recompute_settings(layers, H100, opts)
    assert got == chain
    for a, b in zip(got, got[1:]):
        assert modules_of(a) < modules_of(b)
    assert "selective" not in got  # with flash attention core_attn frees only the log-sum-exp


def test_module_variants_reach_the_problem_and_ep_entries():
    p = build_problem("qwen3-vl-30b-a3b", "dgx-h100", nodes=2, global_batch=64, microbatches=8,
                      options={"variants": "all", "ep_degrees": [8]})
    assert "zero1+recompute-layernorm+moe_act" in p.variants
    llm = next(layer for layer in p.layers if layer.name == "llm.5")
    plain, mod = Layout(8, 2, "zero1", ep=8), Layout(8, 2, "zero1+recompute-layernorm+moe_act", ep=8)
    assert llm.costs[mod].act_bytes < llm.costs[plain].act_bytes and llm.costs[mod].bwd_ms > llm.costs[plain].bwd_ms
    vision = p.layers[1]  # a dense vision block: the MoE modules change nothing there
    assert vision.costs[Layout(8, 2, "zero1+recompute-layernorm+moe_act")] == vision.costs[Layout(8, 2, "zero1")]


def test_mla_modules_free_what_megatron_discards():
    """MLA (TE spec): the input norm is standalone (layernorm frees its output), mla_up_proj discards Q, K, V."""
    layer = _block("deepseek-v3", True)
    piece = layer.pieces[0]
    assert {"mla_up_proj", "layernorm"} <= applicable_modules(piece)
    terms = block_activation_terms(piece.shape, 1.0, 8, flash_attention=True, sequence_parallel=True)
    assert set(terms) - set(kept_terms(terms, piece, "mla_up_proj")) == {"q", "k", "v"}
    assert set(terms) - set(kept_terms(terms, piece, "layernorm")) == {"qkv_input", "mlp_input"}
    _, b0, _, a0 = layer_terms(layer.pieces, 8, 1.0, "none", H100, OPTS)
    _, b1, _, a1 = layer_terms(layer.pieces, 8, 1.0, "mla_up_proj", H100, OPTS)
    assert a1 < a0 and b1 > b0
    opts = CostOptions.from_mapping({"variants": "all"})
    chain = recompute_settings(model_layers(load_model("deepseek-v3"), opts), H100, opts)
    assert chain == ("moe_act", "layernorm+moe_act", "layernorm+mla_up_proj+moe_act")  # the published recipes' sets


def test_under_fp8_a_freed_tensor_takes_its_fp8_copy_with_it():
    """FP8 keeps the MLP input and fc2's input as fp8 copies: what mlp recompute frees is then those copies."""
    from partitioner.costs.compute.precision import recipe_of

    fp8 = CostOptions.from_mapping({"precision": "fp8"})
    layer = _block("qwen2.5-vl-7b-video-64f", False)
    piece = layer.pieces[0]
    b, t = 1.0, 2
    freed = {}
    for name, opts in (("bf16", OPTS), ("fp8", fp8)):
        none = layer_terms(layer.pieces, t, b, "none", H100, opts)[3]
        mlp = layer_terms(layer.pieces, t, b, "mlp", H100, opts)[3]
        freed[name] = none - mlp
    saved = 2.0 - recipe_of(fp8).stored_bytes()
    s, h, f = piece.shape.tokens, piece.shape.hidden, piece.shape.ffn
    assert freed["fp8"] == pytest.approx(freed["bf16"] - saved * (s * h / t + s * f / t))
