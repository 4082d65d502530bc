"""GPU-generation constants of the cost model: what differs between A100, H100/H200 and B200/GB200 besides the datasheet.

Contract: :data:`GENERATIONS` maps each name of
:data:`~partitioner.presets.GPU_GENERATIONS` to a :class:`GpuGeneration`;
:func:`generation` picks the one of a cluster
(:func:`~partitioner.presets.gpu_generation`: the preset's ``generation``,
else its ``gpu`` name); :func:`efficiency_max` resolves the cost option of
the same name (``None``: the cluster's generation). The datasheet numbers
(peak FLOP/s, HBM, NVLink and NIC bandwidth) stay in the cluster presets;
here are the constants a datasheet does not give, each with its source.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.compute.hardware``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...presets import GPU_GENERATIONS, ClusterSpec, gpu_generation
from ..options import CostOptions

__all__ = ["COMM_SMS", "A100_EFFICIENCY_MAX", "A100_OPS_PER_BYTE", "balance_scale", "MAMF_FRACTION", "GROUPED_SUSTAINED_FRACTION", "GpuGeneration", "GENERATIONS", "generation", "efficiency_max", "comm_sm_fraction"]

# References of the comments below (the module docstring's detail is in docs/internals/costs.md):
# .. [40] tile-ai/TileOPs pull request 1567 (grouped-GEMM benchmark on an
#    H200, bf16, https://github.com/tile-ai/TileOPs/pull/1567): "sustained
#    ~1.4 GHz under its ~700 W power wall vs 1.98 GHz peak"; the GLM-up
#    shapes (256 experts, 4096 x 6144, 262k-2.1M rows) at 603, 624, 617 and
#    597 TFLOP/s with ``torch._grouped_mm`` (mean 610, 0.617 of 989).
# .. [41] NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs);
#    NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5: 132
#    SMs); DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437,
#    Sec. 3.2.2 (H800: 132 SMs, 20 of them for communication); NVIDIA
#    Blackwell architecture technical brief (B200: 148 SMs).
# .. [45] S. Bekman, "Machine Learning Engineering", ``compute/accelerator/
#    README.md``, "Maximum Achievable Matmul FLOPS comparison table" (BF16,
#    mamf-finder.py; commit 7bc7c30, 2026-08-10), as recorded in
#    ``benchmarks/calibration/published.py`` (source ``ml-engineering-mamf``).

#: SMs a communication kernel (an all-to-all, an all-gather) occupies while it overlaps compute:
#: DeepSeek-V3 dedicates 20 of the H800's 132 SMs to its overlapped all-to-alls (Sec. 3.2.2 [41]_),
#: DeepEP's first normal kernels used 24 (its README, V2 notes: "SM usage reduced from 24").
COMM_SMS = 20


@dataclass(frozen=True)
class GpuGeneration:
    """The cost model's constants for one GPU generation (see the module docstring for each one's source)."""

    name: str
    efficiency_max: float
    grouped_efficiency_max: float
    sms: int
    gemm_tile_rows: int = 128


#: The A100 GEMM ceiling the SC'21 / MLSys'23 tables were reproduced with.
A100_EFFICIENCY_MAX = 0.70
#: The A100 80GB's ops:byte ratio (312 TFLOP/s dense BF16 over 2,039 GB/s HBM2e, the ``dgx-a100-80g`` preset),
#: on which the GEMM curve's half-efficiency width and rows were set (the SC'21 and MLSys'23 tables).
A100_OPS_PER_BYTE = 312.0e12 / 2039.0e9
#: Best achieved BF16 matmul over the datasheet peak, per generation (maximum achievable matmul FLOPS [45]_).
MAMF_FRACTION = {"a100": 271.2 / 312.0, "h100": 794.5 / 989.4, "h200": 794.5 / 989.4, "b200": 1745.0 / 2250.0,
                 "gb200": 1822.0 / 2500.0}
#: What a generation sustains on large grouped (expert) GEMMs in a loop, over its peak: Hopper's power-limited 610
#: of 989 TFLOP/s [40]_; the generations without a grouped measurement at hand are absent (grouped = dense).
GROUPED_SUSTAINED_FRACTION = {"h100": 610.25 / 989.4, "h200": 610.25 / 989.4}


def _scaled(fraction: float) -> float:
    """A100's ceiling over its achievable fraction, times a generation's achieved ``fraction`` (3 decimals)."""
    return round(A100_EFFICIENCY_MAX / MAMF_FRACTION["a100"] * fraction, 3)


def _generation(name: str, sms: int) -> GpuGeneration:
    """``name``'s dense ceiling from its best matmul, its grouped one from its sustained grouped GEMMs if cited."""
    dense = A100_EFFICIENCY_MAX if name == "a100" else _scaled(MAMF_FRACTION[name])
    grouped = _scaled(GROUPED_SUSTAINED_FRACTION[name]) if name in GROUPED_SUSTAINED_FRACTION else dense
    return GpuGeneration(name, efficiency_max=dense, grouped_efficiency_max=grouped, sms=sms)


GENERATIONS: dict[str, GpuGeneration] = {
    "a100": _generation("a100", 108),
    "h100": _generation("h100", 132),
    "h200": _generation("h200", 132),
    "b200": _generation("b200", 148),
    "gb200": _generation("gb200", 148),
}
assert tuple(GENERATIONS) == GPU_GENERATIONS


def generation(cluster: ClusterSpec | None) -> GpuGeneration:
    """The constants of ``cluster``'s GPU generation (A100's without a cluster)."""
    return GENERATIONS["a100" if cluster is None else gpu_generation(cluster)]


def efficiency_max(opts: CostOptions, cluster: ClusterSpec | None, grouped: bool = False) -> float:
    """The option ``efficiency_max`` when set, else the cluster's generation's dense (``grouped``: grouped) ceiling."""
    if opts.efficiency_max is not None:
        return opts.efficiency_max
    gen = generation(cluster)
    return gen.grouped_efficiency_max if grouped else gen.efficiency_max


def balance_scale(cluster: ClusterSpec | None) -> float:
    """``cluster``'s ops:byte ratio (peak BF16 FLOP/s over HBM bytes/s) over the A100 80GB's (module doc).

    The factor on the GEMM curve's half-efficiency width and rows: 1 without
    a cluster or without an HBM bandwidth in its preset.
    """
    if cluster is None or not cluster.hbm_GBps:
        return 1.0
    return cluster.peak_tflops * 1e12 / (cluster.hbm_GBps * 1e9) / A100_OPS_PER_BYTE


def comm_sm_fraction(cluster: ClusterSpec | None) -> float:
    """The share of the GPU's SMs an overlapped collective takes from compute: ``COMM_SMS / sms``."""
    return COMM_SMS / generation(cluster).sms
