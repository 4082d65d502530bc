"""GPU-generation constants of the cost model: what differs between A100, H100/H200 and B200/GB200 besides the datasheet.

Contract: :data:`GENERATIONS` maps each name of
:data:`~partitioner.presets.GPU_GENERATIONS` to a :class:`GpuGeneration`;
:func:`generation` picks the one of a cluster
(:func:`~partitioner.presets.gpu_generation`: the preset's ``generation``,
else its ``gpu`` name); :func:`efficiency_max` resolves the cost option of
the same name (``None``: the cluster's generation). The datasheet numbers
(peak FLOP/s, HBM, NVLink and NIC bandwidth) stay in the cluster presets;
here are the constants a datasheet does not give, each with its source.

* ``efficiency_max`` -- the fraction of the dense BF16 peak a large GEMM
  reaches inside a training step (what the GEMM-efficiency curve of
  :func:`~.flops.efficiency` tends to). A100: 0.70, the value the SC'21 and
  MLSys'23 Megatron tables were reproduced with (DESIGN.md "Honest costs").
  Newer generations reach a smaller fraction of their datasheet peak: the
  peak is quoted at the boost clock, and a GPU running GEMMs back to back
  at its power limit sustains a lower one. The best matmul each GPU
  achieves over a short shape search (maximum achievable matmul FLOPS,
  BF16 [45]_) is 271.2 of 312 TFLOP/s on A100 (0.869), 794.5 of 989 on
  H100 and H200 (0.803), 1745 of 2250 on B200 (0.776) and 1822 of 2500 on
  GB200 (0.729); A100's 0.70 is 0.805 of its own. Each generation's value
  is that 0.805 times what the generation sustains on large GEMMs in a
  loop: the 700 W Hopper parts throttle to about 1.4 GHz against the 1.98
  GHz their peak assumes, and an H200 sustains 597-624 TFLOP/s (0.617 of
  its peak) on large bf16 grouped GEMMs with ``torch._grouped_mm`` [40]_:
  H100/H200 0.497. For Blackwell no sustained measurement is at hand and
  the short-search fraction stands in: B200 0.625, GB200 0.587. Derived,
  not fitted; the calibration tables of :mod:`benchmarks.calibration`
  check them (the H100 value that centres the 16 H100 calibration rows is
  0.50, :func:`benchmarks.calibration_runs.fit_efficiency`).
* ``sms`` -- streaming multiprocessors per GPU (A100 108, H100/H200 132,
  B200 148 [41]_): the share of them a collective kernel occupies while it
  overlaps compute (:data:`COMM_SMS`) slows that compute.
* ``gemm_tile_rows`` -- the M extent of a grouped GEMM's output tile (128
  on Ampere, Hopper and Blackwell CUTLASS grouped kernels [42]_): an
  expert's rows are padded to a multiple of it (tile quantization [6]_).

References
----------
.. [6] NVIDIA, "Matrix Multiplication Background User's Guide", Deep
   Learning Performance documentation (tile and wave quantization).
.. [40] tile-ai/TileOPs pull request 1567 (grouped-GEMM benchmark on an
   H200, bf16, https://github.com/tile-ai/TileOPs/pull/1567): "sustained
   ~1.4 GHz under its ~700 W power wall vs 1.98 GHz peak"; the GLM-up
   shapes (256 experts, 4096 x 6144, 262k-2.1M rows) at 603, 624, 617 and
   597 TFLOP/s with ``torch._grouped_mm`` (mean 610, 0.617 of 989).
.. [45] S. Bekman, "Machine Learning Engineering", ``compute/accelerator/
   README.md``, "Maximum Achievable Matmul FLOPS comparison table" (BF16,
   mamf-finder.py; commit 7bc7c30, 2026-08-10), as recorded in
   ``benchmarks/published.py`` (source ``ml-engineering-mamf``).
.. [41] NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs);
   NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5: 132
   SMs); DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437,
   Sec. 3.2.2 (H800: 132 SMs, 20 of them for communication); NVIDIA
   Blackwell architecture technical brief (B200: 148 SMs).
.. [42] NVIDIA CUTLASS, grouped GEMM examples (``examples/24_gemm_grouped``,
   Hopper ``57_hopper_grouped_gemm``: 128-row output tiles); Transformer
   Engine ``GroupedLinear`` (Megatron-Core's ``TEGroupedMLP``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..presets import GPU_GENERATIONS, ClusterSpec, gpu_generation
from .options import CostOptions

__all__ = ["COMM_SMS", "A100_EFFICIENCY_MAX", "MAMF_FRACTION", "SUSTAINED_FRACTION", "GpuGeneration", "GENERATIONS", "generation", "efficiency_max", "comm_sm_fraction"]

#: SMs a communication kernel (an all-to-all, an all-gather) occupies while it overlaps compute:
#: DeepSeek-V3 dedicates 20 of the H800's 132 SMs to its overlapped all-to-alls (Sec. 3.2.2 [41]_),
#: DeepEP's first normal kernels used 24 (its README, V2 notes: "SM usage reduced from 24").
COMM_SMS = 20


@dataclass(frozen=True)
class GpuGeneration:
    """The cost model's constants for one GPU generation (see the module docstring for each one's source)."""

    name: str
    efficiency_max: float
    sms: int
    gemm_tile_rows: int = 128


#: The A100 GEMM ceiling the SC'21 / MLSys'23 tables were reproduced with.
A100_EFFICIENCY_MAX = 0.70
#: Best achieved BF16 matmul over the datasheet peak, per generation (maximum achievable matmul FLOPS [45]_).
MAMF_FRACTION = {"a100": 271.2 / 312.0, "h100": 794.5 / 989.4, "h200": 794.5 / 989.4, "b200": 1745.0 / 2250.0,
                 "gb200": 1822.0 / 2500.0}
#: What a generation sustains on large GEMMs in a loop, over its peak: Hopper's power-limited 610 of 989 TFLOP/s
#: [40]_; A100 (400 W) and Blackwell: the short-search fraction (no sustained measurement at hand).
SUSTAINED_FRACTION = {**MAMF_FRACTION, "h100": 610.25 / 989.4, "h200": 610.25 / 989.4}


def _scaled(name: str) -> float:
    """A100's ceiling over its achievable fraction, times the generation's sustained fraction (3 decimals)."""
    return round(A100_EFFICIENCY_MAX / MAMF_FRACTION["a100"] * SUSTAINED_FRACTION[name], 3)


GENERATIONS: dict[str, GpuGeneration] = {
    "a100": GpuGeneration("a100", efficiency_max=A100_EFFICIENCY_MAX, sms=108),
    "h100": GpuGeneration("h100", efficiency_max=_scaled("h100"), sms=132),
    "h200": GpuGeneration("h200", efficiency_max=_scaled("h200"), sms=132),
    "b200": GpuGeneration("b200", efficiency_max=_scaled("b200"), sms=148),
    "gb200": GpuGeneration("gb200", efficiency_max=_scaled("gb200"), sms=148),
}
assert tuple(GENERATIONS) == GPU_GENERATIONS


def generation(cluster: ClusterSpec | None) -> GpuGeneration:
    """The constants of ``cluster``'s GPU generation (A100's without a cluster)."""
    return GENERATIONS["a100" if cluster is None else gpu_generation(cluster)]


def efficiency_max(opts: CostOptions, cluster: ClusterSpec | None) -> float:
    """The option ``efficiency_max`` when set, else the cluster's generation's."""
    return opts.efficiency_max if opts.efficiency_max is not None else generation(cluster).efficiency_max


def comm_sm_fraction(cluster: ClusterSpec | None) -> float:
    """The share of the GPU's SMs an overlapped collective takes from compute: ``COMM_SMS / sms``."""
    return COMM_SMS / generation(cluster).sms
