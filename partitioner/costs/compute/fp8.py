"""FP8 recipes as the frameworks offer them, and which GPU runs which: data and checks, no costs.

Contract: :data:`PRECISIONS` and :data:`FP8_RECIPES` are the words the
cost option ``precision`` and ``fp8_recipe`` take; :class:`Fp8Recipe`
holds what the cost terms (:mod:`.precision`) read of a recipe -- how many
elements share a scale and how large a scale is, whether the cast needs an
amax pass of its own, whether sequence parallelism reduces that amax over
the tensor-parallel group -- and what the exports write (Megatron-LM's
``--fp8-recipe`` and ``--fp8-format``, torchtitan's converter).
:func:`gpu_capability` reads a cluster's CUDA compute capability from its
GPU name; :func:`fp8_problem` says why a recipe cannot run on a cluster
(None when it can). Nothing here computes a cost.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.compute.fp8``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...presets import ClusterSpec

__all__ = ["PRECISIONS", "FP8_RECIPES", "DEFAULT_FP8_RECIPE", "Fp8Recipe", "RECIPES", "GPU_CAPABILITY",
           "gpu_capability", "fp8_problem", "operand_copies", "FP8_GEMM_EFFICIENCY", "fp8_gemm_efficiency"]

PRECISIONS = ("bf16", "fp8")
FP8_RECIPES = ("tensorwise", "delayed", "blockwise", "mxfp8", "rowwise")
# NVIDIA's published FP8 runs on Hopper use per-tensor current scaling ("FP8-CS", Megatron-Bridge's
# bf16_with_fp8_current_scaling_mixed); the default when only ``precision=fp8`` is given
DEFAULT_FP8_RECIPE = "tensorwise"


@dataclass(frozen=True)
class Fp8Recipe:
    """What the cost model and the exports read of one FP8 recipe (see the module's table).

    Parameters
    ----------
    name : str
        The cost option's word (:data:`FP8_RECIPES`).
    block, weight_block : int
        Elements sharing one scale in an activation or gradient, and in a
        weight (0: one scale per tensor or per row, whose bytes are
        negligible next to the tensor's).
    scale_bytes : float
        Bytes of one scale (fp32 4, E8M0 1).
    amax_pass : bool
        The cast first reads the tensor once for its amax (current scaling:
        ``tensorwise``, torchao's ``rowwise``); delayed scaling records the
        amax inside the cast kernel, block scales are found in it.
    tp_amax_reduce : bool
        With sequence parallelism, the amax of a column-parallel layer's
        input (forward) and of a row-parallel layer's output gradient
        (backward) is max-reduced over the tensor-parallel group before the
        fp8 all-gather (Transformer Engine's current-scaling quantizer).
    min_capability, max_capability : tuple of int
        The compute capabilities that run it: ``min <= cc < max``.
    megatron : str or None
        Megatron-LM's ``--fp8-recipe`` (None: Megatron has no such recipe).
    megatron_format : str
        Megatron-LM's ``--fp8-format`` the published recipes pair it with
        (Megatron-Bridge: ``hybrid`` -- E4M3 forward, E5M2 gradients --
        except ``e4m3`` for MXFP8).
    torchtitan : str or None
        torchtitan 0.3's converter for it: ``float8`` (``Float8LinearConverter``
        with ``recipe_name`` = :attr:`name`) or ``mxfp8``
        (``MXFP8LinearConverter``); None: torchtitan has no such recipe.
    weight_cache : bool
        The fp8 weight (and its transpose) is cast once per iteration and
        kept across the microbatches: Transformer Engine under Megatron,
        which passes ``is_first_microbatch``. torchao's ``Float8Linear``
        casts the weight in every forward and backward and keeps nothing.
    fp8_all_gather : bool
        With sequence parallelism the input of a column-parallel layer is
        cast before its all-gather, so the gather moves fp8 (Transformer
        Engine, every recipe). torchtitan's float8 tensor parallelism gathers
        in fp8 for tensorwise scaling only: "For rowwise recipes, we use
        regular TP and all-gather happens in high precision" (torchtitan's
        ``models/llama3/infra/parallelize.py`` before 0.3, ``enable_float8_tensorwise_tp``).
    """

    name: str
    block: int
    weight_block: int
    scale_bytes: float
    amax_pass: bool
    tp_amax_reduce: bool
    min_capability: tuple[int, int]
    max_capability: tuple[int, int]
    megatron: str | None
    megatron_format: str
    torchtitan: str | None
    weight_cache: bool = True
    fp8_all_gather: bool = True

    def stored_bytes(self, weight: bool = False) -> float:
        """Bytes per element of one fp8 copy with its share of the scales."""
        block = self.weight_block if weight else self.block
        return 1.0 + (self.scale_bytes / block if block else 0.0)


_ANY = (99, 0)  # no upper bound
RECIPES: dict[str, Fp8Recipe] = {
    "delayed": Fp8Recipe("delayed", 0, 0, 4.0, False, False, (8, 9), _ANY, "delayed", "hybrid", None),
    "tensorwise": Fp8Recipe("tensorwise", 0, 0, 4.0, True, True, (8, 9), _ANY, "tensorwise", "hybrid", None),
    "blockwise": Fp8Recipe("blockwise", 128, 128 * 128, 4.0, False, False, (9, 0), _ANY, "blockwise", "hybrid", None),
    "mxfp8": Fp8Recipe("mxfp8", 32, 32, 1.0, False, False, (10, 0), (12, 0), "mxfp8", "e4m3", "mxfp8"),
    "rowwise": Fp8Recipe("rowwise", 0, 0, 4.0, True, False, (8, 9), _ANY, None, "hybrid", "float8", weight_cache=False,
                         fp8_all_gather=False),
}

# References of the comments below (the module docstring's detail is in docs/internals/costs.md):
# .. [4] NVIDIA, "CUDA GPUs - Compute Capability", developer.nvidia.com/cuda-gpus
#    (A100 8.0, L4/L40S 8.9, H100/H200 9.0, B200/GB200 10.0, B300/GB300 10.3).
# .. [5] S. Bekman, "Machine Learning Engineering", ``compute/accelerator/README.md``,
#    "Maximum Achievable Matmul FLOPS comparison table" (BF16 and FP8
#    float8_e4m3fn rows), https://github.com/stas00/ml-engineering, file at
#    commit 7bc7c3054eb9 (2026-08-10); collected in ``benchmarks/calibration/published.py``
#    (``GROUPED_GEMM``, source ``ml-engineering-mamf``).
# .. [6] DeepSeek-AI, DeepGEMM ``README.md`` (commit 2e7e58011b03, 2025-04-11):
#    FP8 GEMMs with 1x128 / 128x128 scaling on H800 SXM5.

# GPU name fragments (the cluster preset's ``gpu``, upper case) -> CUDA compute capability [4]_; the first
# fragment found in the name decides, so a longer name precedes its substrings
GPU_CAPABILITY: tuple[tuple[str, tuple[int, int]], ...] = (
    ("GB300", (10, 3)), ("B300", (10, 3)), ("GB200", (10, 0)), ("B200", (10, 0)), ("B100", (10, 0)),
    ("H200", (9, 0)), ("H100", (9, 0)), ("H800", (9, 0)), ("H20", (9, 0)), ("GH200", (9, 0)),
    ("L40S", (8, 9)), ("L40", (8, 9)), ("L4", (8, 9)), ("RTX 4090", (8, 9)),
    ("A100", (8, 0)), ("A800", (8, 0)), ("A10", (8, 6)), ("V100", (7, 0)),
)


def gpu_capability(cluster: ClusterSpec) -> tuple[int, int] | None:
    """The CUDA compute capability of the cluster's GPU, from its ``gpu`` name; None when the name is unknown."""
    name = cluster.gpu.upper()
    for fragment, cc in GPU_CAPABILITY:
        if fragment in name:
            return cc
    return None


def _any_layout_fp8_gemm(cc: tuple[int, int] | None) -> bool:
    """Whether the GPU's FP8 GEMMs take every operand layout: Transformer Engine's
    ``nvte_is_non_tn_fp8_gemm_supported`` (capability 10.x, 11.x, 13.0 and later; Hopper runs TN only)."""
    return cc is not None and ((10, 0) <= cc < (12, 0) or cc >= (13, 0))


def operand_copies(recipe: str, cluster: ClusterSpec) -> int:
    """fp8 copies of one operand when both the forward GEMM and the weight gradient read it.

    Two on Hopper (FP8 GEMMs are TN only: a rowwise copy and a transposed
    one) and for the block-scaled recipes everywhere (their rowwise and
    columnwise copies are quantized apart, the scales running along
    different dimensions); one for the per-tensor recipes of Transformer
    Engine (delayed, tensorwise) on a GPU whose FP8 GEMMs take any layout
    (Blackwell): TE's ``Float8Quantizer`` and ``Float8CurrentScalingQuantizer``
    then keep the data without a transpose [2]_. torchao's rowwise scales
    run along rows: two copies.

    References
    ----------
    .. [2] NVIDIA Transformer Engine, ``transformer_engine/pytorch/quantization.py``
       (``_compute_fp8_support``: compute capability 8.9 or higher;
       ``_compute_fp8_block_scaling_support``: 9.0 or higher;
       ``_compute_mxfp8_support``: 10.0 or higher and not 12.0+) and
       ``transformer_engine/common/recipe/__init__.py`` (MXFP8: E8M0 scale per
       32 values; Float8BlockScaling: fp32 scales, 1D blocks for inputs and
       gradients, 2D 128x128 for weights), ``transformer_engine/common/
       transformer_engine.cpp`` (``nvte_is_non_tn_fp8_gemm_supported``) and
       ``transformer_engine/pytorch/csrc/quantizer.cpp`` (the per-tensor
       quantizers make no transpose where it returns true).
    """
    rec = RECIPES[recipe]
    per_tensor_te = rec.block == 0 and rec.megatron is not None
    return 1 if per_tensor_te and _any_layout_fp8_gemm(gpu_capability(cluster)) else 2


def fp8_problem(recipe: str, cluster: ClusterSpec) -> str | None:
    """Why ``recipe`` cannot run on ``cluster``'s GPUs; None when it can.

    FP8 needs the cluster's dense FP8 peak (``peak_tflops_fp8``), and the
    recipe's compute capabilities [2]_ where the GPU is known; a GPU the
    table does not know runs the per-tensor and per-row recipes when the
    preset gives an FP8 peak, the block-scaled ones need a known GPU.

    References
    ----------
    .. [2] As cited in :func:`operand_copies`.
    """
    rec = RECIPES[recipe]
    if cluster.peak_tflops_fp8 is None:
        return (f"cluster {cluster.name} ({cluster.gpu or 'GPU not named'}) gives no peak_tflops_fp8: its GPU has no "
                f"FP8 tensor cores (FP8 needs compute capability 8.9 or higher), or the preset does not say")
    cc = gpu_capability(cluster)
    need = f"compute capability {rec.min_capability[0]}.{rec.min_capability[1]} or higher"
    if rec.max_capability != _ANY:
        need += f" and below {rec.max_capability[0]}.{rec.max_capability[1]}"
    if cc is None:
        if rec.block:
            known = ", ".join(f for f, _ in GPU_CAPABILITY)
            return (f"fp8_recipe {recipe} needs {need}; cluster {cluster.name}'s gpu {cluster.gpu!r} is not one whose "
                    f"capability is known ({known})")
        return None
    if not rec.min_capability <= cc < rec.max_capability:
        where = {"mxfp8": " (Blackwell)", "blockwise": " (Hopper or Blackwell)"}.get(recipe, "")
        return (f"fp8_recipe {recipe} needs {need}{where}; cluster {cluster.name}'s {cluster.gpu} has "
                f"{cc[0]}.{cc[1]}")
    return None


# The ratio of the fraction of the FP8 peak to the fraction of the BF16 peak that the fastest dense matmul reaches
# on one GPU (S. Bekman's "Maximum Achievable Matmul FLOPS" table [5]_, a brute-force shape search with
# torch.matmul and torch._scaled_mm, float8_e4m3fn, no sparsity), per compute capability from which it holds:
#   Hopper, H100 SXM: BF16 794.5 of 989 TFLOP/s (0.803), FP8 1402.6 of 1979 (0.709): 0.882
#     (H200: FP8 1453.4 of 1979, 0.734, against H100's BF16 0.803: 0.914; the table gives H200's BF16 as H100's)
#   Blackwell, B200: BF16 1745 of 2250 (0.776), FP8 3432.5 of 4500 (0.763): 0.984
#     (GB200: BF16 1822 of 2500, FP8 3615.6 of 5000: 0.992)
# Ada (8.9) has no row; it takes Hopper's. DeepGEMM's FP8 kernels reach 1520 TFLOP/s on H800 (4096 x 7168 x 16384,
# 0.768 of the FP8 peak) [6]_, above the cuBLAS ratio: the ratio is the framework's GEMM library, not the best kernel.
FP8_GEMM_EFFICIENCY: tuple[tuple[tuple[int, int], float], ...] = (((10, 0), 0.984), ((8, 9), 0.882))


def fp8_gemm_efficiency(cluster: ClusterSpec) -> float:
    """Fraction of the BF16 efficiency curve an FP8 GEMM of the same shape reaches at the FP8 peak (:data:`FP8_GEMM_EFFICIENCY`).

    A GPU whose capability is unknown takes Hopper's ratio.
    """
    cc = gpu_capability(cluster) or (9, 0)
    return next((ratio for since, ratio in FP8_GEMM_EFFICIENCY if cc >= since), FP8_GEMM_EFFICIENCY[-1][1])
