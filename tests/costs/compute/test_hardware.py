"""Per-generation constants: each cluster preset names its GPU generation, and the GEMM curve follows it."""
from __future__ import annotations

from dataclasses import replace

import pytest

from partitioner.costs import CostOptions, efficiency
from partitioner.costs.compute.hardware import GENERATIONS, comm_sm_fraction, generation
from partitioner.presets import GPU_GENERATIONS, cluster_from_dict, gpu_generation, list_clusters, load_cluster
from partitioner.problem import ProblemError

PRESETS = {"dgx-a100-80g": "a100", "dgx-h100": "h100", "dgx-h200": "h200", "dgx-b200": "b200", "gb200-nvl72": "gb200"}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_cluster_preset_names_its_generation(name):
    cluster = load_cluster(name)
    assert cluster.generation == PRESETS[name] == gpu_generation(cluster)
    # the gpu name alone implies the same generation (a user cluster without the field)
    assert gpu_generation(replace(cluster, generation="")) == PRESETS[name]
    assert cluster.summary()["generation"] == PRESETS[name]


def test_every_preset_is_covered_and_every_generation_has_constants():
    assert set(PRESETS) <= set(list_clusters())
    assert tuple(GENERATIONS) == GPU_GENERATIONS
    assert [GENERATIONS[g].sms for g in ("a100", "h100", "b200")] == [108, 132, 148]


def test_unknown_gpu_falls_back_to_a100_and_a_bad_generation_is_named():
    cluster = replace(load_cluster("dgx-h100"), generation="", gpu="MI300X")
    assert gpu_generation(cluster) == "a100"
    doc = {"name": "x", "gpus_per_node": 8, "gpu_memory_bytes": 8e10, "peak_tflops": 100, "intra_node_GBps": 100,
           "inter_node_GBps": 10, "generation": "h300"}
    with pytest.raises(ProblemError, match="generation"):
        cluster_from_dict(doc)


def test_the_gemm_curve_takes_the_generations_maximum_unless_the_option_sets_it():
    opts = CostOptions()
    for name, gen in PRESETS.items():
        cluster = load_cluster(name)
        big = efficiency(1e6, 1e9, opts, cluster)
        assert big == pytest.approx(GENERATIONS[gen].efficiency_max, rel=1e-6)
        assert efficiency(1e6, 1e9, CostOptions.from_mapping({"efficiency_max": 0.5}), cluster) == pytest.approx(0.5)
    assert efficiency(1e6, 1e9, opts) == pytest.approx(GENERATIONS["a100"].efficiency_max)  # no cluster: A100's
    assert CostOptions.from_mapping({"efficiency_max": None}).efficiency_max is None
    with pytest.raises(ProblemError, match="efficiency_max"):
        CostOptions.from_mapping({"efficiency_max": 1.5})


def test_an_overlapped_collective_takes_a_share_of_the_sms():
    assert comm_sm_fraction(load_cluster("dgx-h100")) == pytest.approx(20 / 132)
    assert comm_sm_fraction(None) == pytest.approx(20 / 108) == pytest.approx(20 / generation(None).sms)


def test_newer_generations_scale_a100s_ceiling_by_their_achievable_matmul_fraction():
    """Derived, not fitted: the published maximum achievable matmul FLOPS of each GPU over its peak."""
    from benchmarks.calibration.published import GROUPED_GEMM

    best = {g.gpu: g.value for g in GROUPED_GEMM if g.source == "ml-engineering-mamf" and g.dtype == "bf16"}
    peaks = {"A100-80G": ("dgx-a100-80g", "a100"), "H100-SXM": ("dgx-h100", "h100"), "B200": ("dgx-b200", "b200"),
             "GB200": ("gb200-nvl72", "gb200")}
    a100 = best["A100-80G"] / load_cluster("dgx-a100-80g").peak_tflops
    for gpu, (preset, gen) in peaks.items():
        fraction = best[gpu] / load_cluster(preset).peak_tflops
        assert GENERATIONS[gen].efficiency_max == pytest.approx(0.70 * fraction / a100, abs=6e-4)
        grouped = fraction
        if gen == "h100":  # power-limited Hopper: what it sustains on large grouped GEMMs in a loop (TileOPs, H200)
            grouped = sum((603, 624, 617, 597)) / 4 / 989.4
        assert GENERATIONS[gen].grouped_efficiency_max == pytest.approx(0.70 * grouped / a100, abs=6e-4)
    assert GENERATIONS["h200"] == replace(GENERATIONS["h100"], name="h200")  # same silicon, same ceiling
    # every newer generation reaches a smaller share of its (boost-clock) peak than A100
    assert all(GENERATIONS[g].efficiency_max < GENERATIONS["a100"].efficiency_max for g in ("h100", "b200", "gb200"))
    assert GENERATIONS["h100"].grouped_efficiency_max < GENERATIONS["h100"].efficiency_max


def test_the_routed_experts_take_the_grouped_ceiling():
    cluster = load_cluster("dgx-h100")
    opts = CostOptions()
    assert efficiency(1e6, 1e9, opts, cluster, grouped=True) == pytest.approx(GENERATIONS["h100"].grouped_efficiency_max)
    assert efficiency(1e6, 1e9, opts, load_cluster("dgx-a100-80g"), grouped=True) == pytest.approx(0.70)
    # the option sets both ceilings
    assert efficiency(1e6, 1e9, CostOptions.from_mapping({"efficiency_max": 0.5}), cluster, grouped=True) == \
        pytest.approx(0.5)


def test_the_ops_per_byte_ratio_of_each_preset_over_the_a100s():
    """Peak BF16 FLOP/s over HBM bytes/s, from the presets' datasheet numbers, relative to the A100 80GB's 153."""
    from partitioner.costs.compute.hardware import A100_OPS_PER_BYTE, balance_scale

    assert A100_OPS_PER_BYTE == pytest.approx(153.0, abs=0.1)
    assert balance_scale(load_cluster("dgx-a100-80g")) == pytest.approx(1.0)
    for name in PRESETS:
        c = load_cluster(name)
        assert balance_scale(c) == pytest.approx(c.peak_tflops * 1e3 / c.hbm_GBps / A100_OPS_PER_BYTE)
    assert balance_scale(load_cluster("dgx-h100")) == pytest.approx(1.93, abs=0.005)  # 989.4 TFLOP/s over 3.35 TB/s
    assert balance_scale(None) == 1.0 and balance_scale(replace(load_cluster("dgx-h100"), hbm_GBps=None)) == 1.0


def test_only_grouped_expert_gemms_shift_their_half_points_by_that_ratio():
    """An expert's GEMM (short rows and columns) leaves the memory-bound regime later on a GPU with more FLOP/s per
    byte; a dense GEMM keeps the A100 curve (its rows and inner dimension hold it far above the ratio)."""
    h100, a100 = load_cluster("dgx-h100"), load_cluster("dgx-a100-80g")
    opts = CostOptions()
    top = GENERATIONS["h100"].grouped_efficiency_max
    scaled = efficiency(768, 1e9, opts, h100, grouped=True) / top
    assert scaled == pytest.approx(768**2 / (768**2 + (1.93 * 256) ** 2), rel=5e-3)  # ~0.71 of the ceiling
    assert efficiency(768, 1e9, opts, a100, grouped=True) / 0.70 == pytest.approx(768**2 / (768**2 + 256**2))  # 0.90
    dense = efficiency(768, 1e9, opts, h100) / GENERATIONS["h100"].efficiency_max
    assert dense == pytest.approx(768**2 / (768**2 + 256**2))
    # rows too: 256 rows of a grouped GEMM fall further below the ceiling on the H100 than on the A100
    assert efficiency(1e6, 256, opts, h100, grouped=True) / top < efficiency(1e6, 256, opts, a100, grouped=True) / 0.70
