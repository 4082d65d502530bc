"""GPU-generation constants of the cost model: what differs between A100, H100/H200 and B200/GB200 besides the datasheet.

Contract: :data:`GENERATIONS` maps each name of
:data:`~partitioner.presets.GPU_GENERATIONS` to a :class:`GpuGeneration`;
:func:`generation` picks the one of a cluster
(:func:`~partitioner.presets.gpu_generation`: the preset's ``generation``,
else its ``gpu`` name); :func:`efficiency_max` resolves the cost option of
the same name (``None``: the cluster's generation). The datasheet numbers
(peak FLOP/s, HBM, NVLink and NIC bandwidth) stay in the cluster presets;
here are the constants a datasheet does not give, each with its source.

* ``efficiency_max`` -- the fraction of the dense BF16 peak a large dense
  GEMM reaches inside a training step (what the GEMM-efficiency curve of
  :func:`~.flops.efficiency` tends to). A100: 0.70, the value the SC'21 and
  MLSys'23 Megatron tables were reproduced with (DESIGN.md "Honest costs").
  Newer generations reach a smaller fraction of their datasheet peak. The
  best matmul each GPU achieves over a short shape search (maximum
  achievable matmul FLOPS, BF16 [45]_) is 271.2 of 312 TFLOP/s on A100
  (0.869), 794.5 of 989 on H100 and H200 (0.803), 1745 of 2250 on B200
  (0.776) and 1822 of 2500 on GB200 (0.729); A100's 0.70 is 0.805 of its
  own, and each generation's dense ceiling is that 0.805 times its own
  best-matmul fraction: H100/H200 0.646, B200 0.625, GB200 0.587.
* ``grouped_efficiency_max`` -- the same ceiling for the grouped GEMMs of
  the routed experts (:mod:`~partitioner.costs.axes.moe_kernels`), which run many expert
  matmuls back to back in one kernel. The 700 W Hopper parts throttle
  there to about 1.4 GHz against the 1.98 GHz their peak assumes: an H200
  sustains 597-624 TFLOP/s (0.617 of its peak) on large bf16 grouped GEMMs
  with ``torch._grouped_mm`` [40]_, and 0.805 of that is H100/H200 0.497.
  A100 and Blackwell have no grouped measurement at hand: their grouped
  ceiling is the dense one. Derived, not fitted; the calibration tables of
  :mod:`benchmarks.calibration` and :mod:`benchmarks.calibration.runs`
  check them (the H100 value that centres the 16 H100 calibration rows,
  all of them MoE runs, is 0.50,
  :func:`benchmarks.calibration.runs.fit_efficiency`).
* ``sms`` -- streaming multiprocessors per GPU (A100 108, H100/H200 132,
  B200 148 [41]_): the share of them a collective kernel occupies while it
  overlaps compute (:data:`COMM_SMS`) slows that compute.
* ``balance_scale`` (:func:`balance_scale`, from the cluster preset's
  datasheet numbers, not a table) -- how much longer the short sides of
  a routed expert's GEMM must be on this GPU than on the A100 80GB before
  it stops being memory-bound. An expert's GEMM is short in two of its
  three dimensions: ``m`` rows (the tokens routed to it) and ``n`` columns
  (``f / etp``, 768-2048 for fine-grained experts) against ``k = h``; it
  does ``m n k / (m k + k n + m n)`` FLOPs per bf16 byte moved (e.g. 350
  for 512 rows, 1536 columns, h 4096) and is math-bound only above the
  GPU's ops:byte ratio, peak FLOP/s over HBM bytes/s [6]_ [46]_: 153 on
  the A100 80GB (312 TFLOP/s, 2.04 TB/s), 295 on the H100 SXM (989,
  3.35), 206 on the H200, 281 on the B200 and 312 on the GB200 (8 TB/s).
  The half-efficiency width and rows of the GEMM curve
  (``gemm_half_width``, ``gemm_half_tokens``: set on the A100 tables)
  scale by that ratio over the A100's for grouped expert GEMMs: 1.93 on an
  H100, where a 768-wide expert then runs at 71 % of the grouped ceiling
  (90 % on the A100 curve). A dense layer's GEMMs keep the A100 curve:
  their rows (the microbatch's tokens, thousands) and inner dimension (the
  hidden size) hold their intensity above every generation's ratio
  however narrow tensor parallelism makes their columns (8192 x 4096 x
  512: 431 FLOPs per byte).
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
.. [46] S. Williams, A. Waterman, D. Patterson, "Roofline: An Insightful
   Visual Performance Model for Multicore Architectures", CACM 52(4), 2009
   (attainable FLOP/s = min(peak, intensity x bandwidth)); NVIDIA's
   "Matrix Multiplication Background User's Guide" [6]_, "Math and Memory
   Bounds" (a GEMM is math-limited when its arithmetic intensity exceeds
   the GPU's ops:byte ratio).
.. [45] S. Bekman, "Machine Learning Engineering", ``compute/accelerator/
   README.md``, "Maximum Achievable Matmul FLOPS comparison table" (BF16,
   mamf-finder.py; commit 7bc7c30, 2026-08-10), as recorded in
   ``benchmarks/calibration/published.py`` (source ``ml-engineering-mamf``).
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

from ...presets import GPU_GENERATIONS, ClusterSpec, gpu_generation
from ..options import CostOptions

__all__ = ["COMM_SMS", "A100_EFFICIENCY_MAX", "A100_OPS_PER_BYTE", "balance_scale", "MAMF_FRACTION", "GROUPED_SUSTAINED_FRACTION", "GpuGeneration", "GENERATIONS", "generation", "efficiency_max", "comm_sm_fraction"]

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
