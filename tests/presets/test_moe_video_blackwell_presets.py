"""The 2025-26 presets of issue 25: MoE VLMs, a long-video workload, Blackwell clusters."""
from __future__ import annotations

import pytest

from partitioner.presets import is_moe_layer, list_clusters, list_models, load_cluster, load_model

NEW_MODELS = {
    # name: (published total, published active or None, LLM sequence)
    "qwen3-vl-30b-a3b": (31.1e9, 3e9, 4096),
    "qwen3-vl-235b-a22b": (236e9, 22e9, 4096),
    "glm-4.5v": (108e9, 12e9, 8192),
    "qwen2.5-vl-72b": (73.4e9, None, 4096),
    "qwen2.5-vl-7b-video-64f": (8.29e9, None, 8704),
}


def test_new_presets_are_listed():
    assert set(NEW_MODELS) <= set(list_models())
    assert "gb200-nvl72" in list_clusters()


@pytest.mark.parametrize("name", sorted(NEW_MODELS))
def test_counts_match_the_model_cards(name):
    total, active, seq = NEW_MODELS[name]
    spec = load_model(name)
    assert spec.params == pytest.approx(total, rel=0.005)  # within half a percent of the published count
    assert spec.published_params == pytest.approx(total, rel=1e-9)
    if active is not None:
        # the "A3B / A22B / 12B active" names round the active count (GLM-4.5-Air: 12B active without the ViT)
        assert spec.active_params == pytest.approx(active, rel=0.35)
        assert spec.active_params < spec.params / 5
    assert spec.llm_tokens == seq
    assert all(spec.references[m.source].strip() for m in spec.modules)


def test_moe_structure_follows_the_configs():
    q = load_model("qwen3-vl-30b-a3b").llm
    assert (q.experts, q.top_k, q.moe_ffn, q.shared_ffn) == (128, 8, 768, 0)
    assert all(is_moe_layer(q, i) for i in range(q.layers))
    # routed experts: 3 h f E per layer, 28.99 B for the 30B and 227.1 B for the 235B (research note 6.6)
    assert 3 * q.hidden * q.moe_ffn * q.experts * q.layers == pytest.approx(28.99e9, rel=1e-3)
    big = load_model("qwen3-vl-235b-a22b").llm
    assert 3 * big.hidden * big.moe_ffn * big.experts * big.layers == pytest.approx(227.1e9, rel=1e-3)
    glm = load_model("glm-4.5v").llm
    assert not is_moe_layer(glm, 0) and all(is_moe_layer(glm, i) for i in range(1, glm.layers))  # first_k_dense_replace 1
    assert glm.shared_ffn == glm.moe_ffn == 1408


def test_long_video_workload():
    spec = load_model("qwen2.5-vl-7b-video-64f")
    vit = spec.module("vision")
    assert vit.frames == 64 and vit.tokens_per_image == 32 * 1024  # 32 temporal groups of 32 x 32 patches
    assert spec.image_tokens == 8192


def test_gb200_nvl72_is_one_72_gpu_nvlink_domain():
    c = load_cluster("gb200-nvl72")
    assert c.gpus_per_node == 72
    assert c.intra_node_GBps == 900.0 and c.inter_node_GBps == 50.0
    assert c.peak_tflops == pytest.approx(360e3 / 2 / 72)  # 360 PFLOPS BF16 with sparsity per rack
    assert c.gpu_memory_bytes == pytest.approx(13.4e12 / 72, rel=0.01)
    assert c.references and all(v.strip() for v in c.references.values())


@pytest.mark.parametrize("name", list_clusters())
def test_every_cluster_preset_gives_hbm_bandwidth(name):
    """The default cost model charges memory-bound kernels at HBM bandwidth: a preset without it cannot plan."""
    c = load_cluster(name)
    assert c.hbm_GBps is not None and c.hbm_GBps > 0


def test_gb200_nvl72_hbm_is_the_racks_576_tbps_over_72_gpus():
    assert load_cluster("gb200-nvl72").hbm_GBps == pytest.approx(576e3 / 72)
