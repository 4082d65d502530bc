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
  peak is quoted at the boost clock, and an H100 SXM or H200 running dense
  BF16 GEMMs at its 700 W limit sustains a lower clock (measured about
  1.4 GHz against the 1.98 GHz the peak assumes on an H200 [40]_); the
  per-generation values are calibrated on published measured runs of that
  generation (:mod:`benchmarks.calibration`, one value per generation for
  all its rows, never per row) and documented in DESIGN.md's decision
  "2026-12-03: MoE physics".
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
   H200, bf16): "sustained ~1.4 GHz under its ~700 W power wall vs 1.98 GHz
   peak" while running large grouped GEMMs at 600-670 TFLOP/s.
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

__all__ = ["COMM_SMS", "GpuGeneration", "GENERATIONS", "generation", "efficiency_max", "comm_sm_fraction"]

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


GENERATIONS: dict[str, GpuGeneration] = {
    "a100": GpuGeneration("a100", efficiency_max=0.70, sms=108),
    "h100": GpuGeneration("h100", efficiency_max=0.70, sms=132),
    "h200": GpuGeneration("h200", efficiency_max=0.70, sms=132),
    "b200": GpuGeneration("b200", efficiency_max=0.70, sms=148),
    "gb200": GpuGeneration("gb200", efficiency_max=0.70, sms=148),
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
