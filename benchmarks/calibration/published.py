"""Published, measured training runs and kernel measurements, as data.

Cited rows a cost model can be calibrated and checked against: whole
training runs of dense, MoE, long-context and FP8 models on A100/H100/H800/
B200/GB200 systems (:data:`RUNS`), the architectures they train
(:data:`MODELS`), and the kernel-level measurements that bound the physics
-- grouped/dense GEMM throughput and flash-attention throughput
(:data:`GROUPED_GEMM`, :data:`ATTENTION`). No cost-model code lives here.

Every row keeps the number its source prints, in the source's unit
(:class:`Measured`), together with the published layout *forced as
published* (TP, PP, virtual stages, CP, EP, expert TP, DP, micro and global
batch, sequence length), the memory knobs the run used (recompute
granularity and modules, optimizer/parameter sharding, offload), the MoE
settings (dispatcher, routing, drop policy) and the framework. Degrees the
source does not print but that follow from what it prints (usually
``dp = gpus / (tp * pp * cp)``) are filled in and named in
:attr:`PublishedRun.derived`; anything ambiguous is stated in the row's
``notes`` rather than guessed silently. A ``None`` means "not published".

Rows that share a :attr:`PublishedRun.families` tag differ in one stated
knob; the tag's prefix says which:

``layout:``
    same model, hardware, precision and workload; different parallel
    layouts (the rows a planner must rank as measured).
``precision:``
    same layout, different precision / FP8 recipe.
``dispatcher:`` / ``overlap:`` / ``routing:`` / ``schedule:`` / ``recompute:``
    same layout, one MoE, overlap, schedule or recompute knob changed.
``scale:``
    same per-replica layout at a different GPU count.

About a third of the rows (whole sources) carry ``holdout=True``: set
constants on the others, check on these (:data:`HOLDOUT_SOURCES`).

References
----------
.. [1] A. Grattafiori et al. (Meta), "The Llama 3 Herd of Models",
   arXiv:2407.21783 (v3, Nov 2024), Sec. 3.3.2 and Table 4.
.. [2] NVIDIA Megatron-Bridge, ``docs/performance-summary-archive.md``,
   sections "26.04.01 NeMo Container", "25.11 NeMo Container" and
   "25.09 NeMo Container", https://github.com/NVIDIA-NeMo/Megatron-Bridge,
   commit 4ab94dfad366 (2026-08-11); recipes of the time in
   ``scripts/performance/configs/*/*_workload_base_configs.py`` at commit
   21d102f5ecba (2026-05-27).
.. [3] Z. Yan et al. (NVIDIA), Megatron-MoE-ModelZoo,
   ``best_practice/qwen3/readme.md``,
   https://github.com/yanring/Megatron-MoE-ModelZoo, commit 798dfb503c68
   (2026-05-13).
.. [4] NVIDIA Megatron-LM (dev branch),
   ``docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md``
   and ``deepseek-v3-gb200-reproduce-guide.md``, commit eb0783b6d356
   (2025-11-03), https://github.com/NVIDIA/Megatron-LM.
.. [5] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437,
   Sec. 3.2-3.3, 4.2 and Table 1.
.. [6] PyTorch torchtitan, ``benchmarks/llama3_h100_202412_torchtitan.md``
   (commit 820504e20d11) and ``benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md``
   (commit 2887250bbd91), https://github.com/pytorch/torchtitan.
.. [7] NVIDIA NeMo, ``docs/source/performance/performance_long_sequence.md``,
   commit 19fadb67b09b (2025-05-09), and ``docs/source/performance/performance_summary.md``
   at commit 0b8a80ee0664 (NeMo 24.07 table), https://github.com/NVIDIA/NeMo.
.. [8] NVIDIA NeMo AutoModel, ``docs/performance-summary.mdx``, commit
   cb9765441e51 (2026-06-12), https://github.com/NVIDIA-NeMo/Automodel.
.. [9] PyTorch torchao, ``torchao/prototype/moe_training/README.md``, commit
   5e79e5ed3434 (2026-03-13), https://github.com/pytorch/ao.
.. [10] DeepSeek-AI, DeepGEMM ``README.md`` at commit 2e7e58011b03
   (2025-04-11), https://github.com/deepseek-ai/DeepGEMM.
.. [11] T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism
   and Work Partitioning", arXiv:2307.08691, Sec. 4.1 and Fig. 4; the same
   figures as ``assets/flash2_a100_fwd_bwd_benchmark.png`` and
   ``assets/flash2_h100_fwd_bwd_benchmark.png`` in
   https://github.com/Dao-AILab/flash-attention (commit 7ef24848cf2f).
.. [12] J. Shah et al., "FlashAttention-3: Fast and Accurate Attention with
   Asynchrony and Low-precision", arXiv:2407.08608, Sec. 4.1 and Fig. 5;
   the same figure as ``assets/flash3_fp16_fwd.png`` (commit 7ef24848cf2f).
.. [14] Alibaba Pai-Megatron-Patch GitHub issues #658 ("Qwen3 MoE 235B
   速度测试交流", 2025-09-02) and #643 ("训练Qwen3-30B-A3B MoE模型速度偏慢",
   2025-08-08), https://github.com/alibaba/Pai-Megatron-Patch/issues/658
   and /643: a user's measured step times of the repository's Qwen3
   examples on H800 (commit 2b201af, image pai-megatron-patch:25.04).
.. [13] Model configurations: the Hugging Face ``config.json`` of each model
   (URLs in :data:`MODELS`), cross-checked against the defaults of the
   installed ``transformers`` configuration classes where those encode the
   released model (DeepseekV3Config, GptOssConfig, Llama4TextConfig).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "GPUS",
    "PRECISIONS",
    "REGIMES",
    "FAMILY_KINDS",
    "Source",
    "ModelArch",
    "Measured",
    "MoESettings",
    "PublishedRun",
    "GemmMeasurement",
    "AttentionMeasurement",
    "LayoutSpeedup",
    "SOURCES",
    "MODELS",
    "RUNS",
    "GROUPED_GEMM",
    "ATTENTION",
    "LAYOUT_SPEEDUPS",
    "HOLDOUT_SOURCES",
    "runs_in",
    "families",
    "to_markdown",
    "main",
]

READ_ON = "2026-12-03"
"""The date the sources below were read for this module."""

GPUS: tuple[str, ...] = (
    "A100-80G",
    "H100-SXM",
    "H100-96G-500W",
    "H800",
    "H200",
    "B200",
    "GB200",
)
"""GPU names a row may carry.

``H100-SXM``: DGX/HGX H100 80 GB HBM3, 700 W. ``H100-96G-500W``: Meta Grand
Teton H100 with 96 GB HBM2e at 2.4 TB/s, power-capped at 500 W (torchtitan's
benchmarks; its peak is between the SXM and NVL parts, per [6]). ``H800``:
the export variant of H100 SXM (same tensor-core peak, NVLink 400 GB/s).
``GB200``: one Blackwell GPU of a GB200 NVL72 rack (4 GPUs per tray, NVLink
domain of 72)."""

PRECISIONS: tuple[str, ...] = (
    "bf16",
    "fp8-delayed",
    "fp8-tensorwise",
    "fp8-rowwise",
    "fp8-blockwise",
    "mxfp8",
)
"""Precision recipes. ``fp8-delayed``: per-tensor scales from an amax
history (Transformer Engine ``DelayedScaling``). ``fp8-tensorwise``:
per-tensor scales computed in the current step ("current scaling", NVIDIA's
"FP8-CS"; torchao/torchtitan "tensorwise"). ``fp8-rowwise``: one scale per
row (torchao). ``fp8-blockwise``: 1x128 activation tiles and 128x128 weight
blocks (DeepSeek-V3's recipe; TE ``Float8BlockScaling``). ``mxfp8``: OCP
microscaling, one E8M0 scale per 32 elements (Blackwell tensor cores)."""

REGIMES: tuple[str, ...] = ("dense", "moe", "long-context", "fp8")
"""A row's regimes: ``moe`` if the model has routed experts, else ``dense``;
``long-context`` if it uses context parallelism or a sequence of 32k tokens
or more; ``fp8`` if any GEMM runs in an 8-bit format."""

FAMILY_KINDS: tuple[str, ...] = ("layout", "precision", "dispatcher", "overlap", "routing", "schedule", "recompute", "scale")
"""Prefixes of :attr:`PublishedRun.families` tags (see the module docstring)."""


@dataclass(frozen=True)
class Source:
    """A published source: where the numbers were read.

    Attributes
    ----------
    title : str
        The document's title.
    url : str
        Where it is published.
    where : str
        The table, figure or section the rows come from.
    version : str
        Version of what was read: repository commit and date, or paper
        version, or container release.
    read_on : str
        The date it was read for this module.
    framework : str
        The training framework the measurements ran on.
    flop_counting : str
        How the source counts FLOPs for its TFLOP/s or MFU figures, when it
        says (or what its code does); empty when it reports none.
    """

    title: str
    url: str
    where: str
    version: str
    read_on: str
    framework: str
    flop_counting: str = ""


@dataclass(frozen=True)
class ModelArch:
    """The architecture fields a cost model needs, from the model's config.

    Widths are per layer; ``ffn`` is the dense MLP width (of the dense
    layers of a MoE model); ``moe_ffn`` the width of one routed expert;
    ``shared_ffn`` the total width of the shared experts. ``dense_layers``
    lists the 0-based indices of layers with a dense MLP in a MoE model
    (empty: every layer is MoE). MLA fields are zero for standard attention;
    for MLA ``head_dim`` is the query/key head width (nope + rope).
    """

    title: str
    source: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    gated_mlp: bool = True
    experts: int = 0
    top_k: int = 0
    moe_ffn: int = 0
    shared_experts: int = 0
    shared_ffn: int = 0
    dense_layers: tuple[int, ...] = ()
    moe_layer_rule: str = ""
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    mtp_layers: int = 0
    attention: str = "full causal"
    preset: str = ""
    notes: str = ""

    @property
    def is_moe(self) -> bool:
        """Whether the model has routed experts."""
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        """Number of decoder layers with routed experts (MTP layers excluded)."""
        return self.layers - len(self.dense_layers) if self.is_moe else 0


@dataclass(frozen=True)
class Measured:
    """One number as the source prints it.

    Attributes
    ----------
    value : float
        The number (thousands separators removed).
    unit : str
        ``"TFLOP/s/GPU"``, ``"tokens/s/GPU"``, ``"MFU"`` (a fraction),
        ``"s/step"``, or ``"GPU-hours/1e12 tokens"``.
    printed : str
        The text as printed (kept for auditing).
    derived : bool
        True when the value is computed by us from printed numbers (the
        computation is stated in the row's notes), not printed.
    """

    value: float
    unit: str
    printed: str
    derived: bool = False


@dataclass(frozen=True)
class MoESettings:
    """How a MoE run moved and routed tokens ("unknown" when not published).

    Attributes
    ----------
    dispatcher : str
        ``"alltoall"``, ``"allgather"``, ``"flex-deepep"`` (Megatron flex
        dispatcher, DeepEP backend), ``"flex-hybridep"`` (HybridEP backend),
        ``"deepep"`` (DeepEP in another framework), ``"custom"`` or
        ``"unknown"``.
    routing : str
        ``"force-balanced"`` (benchmark mode: tokens spread evenly), or the
        model's router as trained (``"aux-loss"``, ``"aux-loss-free"``,
        ``"learned"``), or ``"unknown"``.
    dropless : bool or None
        True: no token dropped; False: token dropping with a capacity
        factor.
    capacity_factor : float or None
        The capacity factor when tokens are dropped.
    grouped_gemm : bool or None
        Whether the local experts run as one grouped GEMM.
    permute_fusion : bool or None
        Whether token permutation is a fused kernel.
    a2a_overlap : bool or None
        Whether the EP all-to-all is overlapped with the other microbatch's
        compute (Megatron ``--overlap-moe-expert-parallel-comm``).
    """

    dispatcher: str = "unknown"
    routing: str = "unknown"
    dropless: bool | None = None
    capacity_factor: float | None = None
    grouped_gemm: bool | None = None
    permute_fusion: bool | None = None
    a2a_overlap: bool | None = None


@dataclass(frozen=True)
class PublishedRun:
    """One published, measured training run with its layout as published.

    Attributes
    ----------
    key : str
        Unique name of the row.
    source : str
        Key into :data:`SOURCES`.
    model : str
        Key into :data:`MODELS`.
    gpu : str
        One of :data:`GPUS`.
    gpus : int
        GPUs in the job.
    precision : str
        One of :data:`PRECISIONS`.
    tp, pp, cp, dp : int
        Tensor, pipeline, context and data parallel degrees;
        ``tp * pp * cp * dp == gpus``.
    vpp : int or None
        Model chunks per pipeline rank (1: no interleaving; None: not
        published).
    ep, etp : int or None
        Expert parallel and expert tensor parallel degrees (1 for dense
        models; ``etp`` None: not published -- Megatron's default is
        ``etp = tp``, most MoE recipes set 1).
    mbs, gbs : int or None
        Micro- and global batch in sequences.
    seq_len : int
        Tokens per sequence.
    ga : int or None
        Microbatches per step per pipeline as printed (gradient
        accumulation); ``gbs == mbs * dp * ga`` when all are set.
    measured : tuple of Measured
        What the source prints for this run.
    regime : tuple of str
        Members of :data:`REGIMES`.
    framework : str
        Framework and version.
    recompute : str
        ``"none"``, ``"selective"``, ``"full"`` or ``"unknown"``.
    recompute_modules : tuple of str
        Megatron ``--recompute-modules`` (or the framework's equivalent).
    dp_sharding : str
        How DP shards the training state: ``"distributed-optimizer"``
        (ZeRO-1-like), ``"megatron-fsdp"``, ``"fsdp2"``, ``"zero1"``,
        ``"none"`` or ``"unknown"``.
    offload : str
        Activation or optimizer offload, ``"none"`` or ``"unknown"``.
    moe : MoESettings or None
        MoE settings (None for dense models).
    families : tuple of str
        Tags shared with rows that differ in one knob (see module docs).
    peak_memory : Measured or None
        Peak memory per GPU when the source prints it (unit ``"GiB"`` or
        ``"GB"`` as printed; allocated unless the notes say reserved).
    derived : tuple of str
        Fields filled in by us rather than printed.
    notes : str
        Anything ambiguous, in our words.
    holdout : bool
        True for rows kept out of fitting (whole sources).
    """

    key: str
    source: str
    model: str
    gpu: str
    gpus: int
    precision: str
    tp: int
    pp: int
    cp: int
    dp: int
    vpp: int | None
    ep: int
    etp: int | None
    mbs: int | None
    gbs: int | None
    seq_len: int
    measured: tuple[Measured, ...]
    regime: tuple[str, ...]
    framework: str
    ga: int | None = None
    recompute: str = "unknown"
    recompute_modules: tuple[str, ...] = ()
    dp_sharding: str = "unknown"
    offload: str = "unknown"
    moe: MoESettings | None = None
    families: tuple[str, ...] = ()
    peak_memory: Measured | None = None
    derived: tuple[str, ...] = ()
    notes: str = ""
    holdout: bool = False

    def value(self, unit: str) -> float | None:
        """The measured value in ``unit`` (printed before derived), or None."""
        hits = [m for m in self.measured if m.unit == unit]
        hits.sort(key=lambda m: m.derived)
        return hits[0].value if hits else None

    @property
    def fp8_recipe(self) -> str | None:
        """The FP8 recipe as megatron-core / torchao name it (``tensorwise``, ``delayed``, ``blockwise``,
        ``rowwise``, ``mxfp8``), or None for a BF16 run."""
        if self.precision == "bf16":
            return None
        return self.precision.removeprefix("fp8-")

    @property
    def layout(self) -> tuple[int, int, int, int, int | None, int, int | None]:
        """``(tp, pp, cp, dp, vpp, ep, etp)`` as published."""
        return (self.tp, self.pp, self.cp, self.dp, self.vpp, self.ep, self.etp)


@dataclass(frozen=True)
class GemmMeasurement:
    """A published dense or grouped GEMM measurement.

    ``m_total`` counts the rows over all groups (tokens routed to the local
    experts); ``groups`` is the number of local experts (1: a dense GEMM).
    ``passes`` is ``"fwd"`` for one GEMM, ``"fwd+bwd"`` for the forward and
    both backward GEMMs (3 x 2 m n k FLOPs), ``"moe-layer fwd+bwd"`` for a
    whole MoE layer (quantisation and permutation included).
    """

    source: str
    gpu: str
    dtype: str
    kind: str
    groups: int
    m_total: int
    n: int
    k: int
    value: float
    unit: str
    printed: str
    passes: str = "fwd"
    notes: str = ""
    holdout: bool = False

    def tflops(self) -> float | None:
        """Achieved TFLOP/s: printed, or 2 m n k per GEMM over the printed time.

        Only for ``fwd`` and ``fwd+bwd`` rows timed in microseconds; a MoE
        layer's time includes work other than its GEMMs (None).
        """
        if self.unit == "TFLOP/s":
            return self.value
        if self.unit == "us" and self.passes in ("fwd", "fwd+bwd"):
            gemms = 1 if self.passes == "fwd" else 3
            return gemms * 2.0 * self.m_total * self.n * self.k / (self.value * 1e-6) / 1e12
        return None


@dataclass(frozen=True)
class AttentionMeasurement:
    """Published flash-attention throughput at one shape.

    The papers' setting: batch x sequence = 16k tokens, hidden 2048 (so 32
    heads of 64, 16 of 128 or 8 of 256); FLOPs counted as 4 s^2 d h for the
    forward (halved with a causal mask) and 2.5x that for the backward.
    """

    source: str
    gpu: str
    kernel: str
    passes: str
    causal: bool
    head_dim: int
    seq_len: int
    tflops: float
    dtype: str = "fp16"
    total_tokens: int = 16384
    hidden: int = 2048
    notes: str = ""
    holdout: bool = False


@dataclass(frozen=True)
class LayoutSpeedup:
    """A layout's published speedup over a baseline layout of the same run (no absolute throughput printed).

    ``speedup`` is the baseline's step time over this layout's; ``readout``
    says how it was read (e.g. bar heights against gridlines, +-0.02).
    """

    source: str
    model: str
    precision: str
    seq_len: int
    tp: int
    cp: int
    recompute: str
    speedup: float
    baseline: str
    family: str
    readout: str
    notes: str = ""
    holdout: bool = False


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------

_MB_FLOPS = (
    "Megatron-Bridge 'Model TFLOP/sec/GPU': model FLOPs of forward + backward (3x the forward, recompute not "
    "counted) per GPU per second, from training/utils/flop_utils.py (at commit 4ab94dfa: causal attention counted "
    "as half the square, sliding windows as their window, logits and MTP layers included); containers older than "
    "the code read may have counted attention differently"
)

SOURCES: dict[str, Source] = {
    "llama3-paper": Source(
        title="The Llama 3 Herd of Models (Grattafiori et al., Meta)",
        url="https://arxiv.org/abs/2407.21783",
        where="Sec. 3.3.2, Table 4 (scaling configurations and MFU of Llama 3 405B pre-training)",
        version="arXiv v3 (2024-11-23)",
        read_on=READ_ON,
        framework="in-house (Meta, PyTorch-based 4D parallelism)",
        flop_counting="BF16 model FLOPs utilisation on H100 (989 TFLOP/s dense BF16 peak); TFLOPs/GPU printed beside MFU",
    ),
    "mbridge-26.04.01": Source(
        title="Megatron-Bridge performance summary archive, 26.04.01 NeMo container",
        url="https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary-archive.md",
        where="'26.04.01 NeMo Container' > Pre-Training Performance (per-model tables)",
        version="commit 4ab94dfad36641cabdeb96452b21bf676aac4772 (2026-08-11); section added in 21d102f5 (2026-05-27)",
        read_on=READ_ON,
        framework="Megatron-Bridge / megatron-core (NeMo 26.04.01 container)",
        flop_counting=_MB_FLOPS,
    ),
    "mbridge-25.11": Source(
        title="Megatron-Bridge performance summary archive, 25.11 NeMo container",
        url="https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary-archive.md",
        where="'25.11 NeMo Container' > Pre-Training Performance (per-system tables DGX-GB200, DGX-B200, DGX-H100)",
        version="commit 4ab94dfad36641cabdeb96452b21bf676aac4772 (2026-08-11); section added 97ad8cc6 (2025-12-04), fixed 5776a6d9 (2025-12-10)",
        read_on=READ_ON,
        framework="Megatron-Bridge / megatron-core (NeMo 25.11 container)",
        flop_counting=_MB_FLOPS,
    ),
    "mbridge-25.09": Source(
        title="Megatron-Bridge performance summary archive, 25.09 NeMo container",
        url="https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/main/docs/performance-summary-archive.md",
        where="'25.09 NeMo Container' > Pre-Training Performance > System: DGX-H100",
        version="commit 4ab94dfad36641cabdeb96452b21bf676aac4772 (2026-08-11); section from fa0315ae (2025-10-10)",
        read_on=READ_ON,
        framework="Megatron-Bridge / megatron-core (NeMo 25.09 container)",
        flop_counting=_MB_FLOPS,
    ),
    "mbridge-skills": Source(
        title="Megatron-Bridge perf skills: EP overlap, MoE hardware configs and activation recompute measurements",
        url="https://github.com/NVIDIA-NeMo/Megatron-Bridge/tree/main/skills",
        where=("nemo-mbridge-perf-expert-parallel-overlap/SKILL.md 'HybridEP Production-Shape Benchmark'; "
               "nemo-mbridge-perf-moe-hardware-configs/SKILL.md 'Qwen3 30B-A3B on 16 H100'; "
               "nemo-mbridge-perf-activation-recompute/SKILL.md 'Matched H100 Evidence: Moonlight 16B' and "
               "'Historical Measurement' (Llama 3 70B SFT)"),
        version="files at commits 415e90afd (2026-08-10) and 5789a7a34 (2026-08-16); repository HEAD 067f987dfa (2026-08-22)",
        read_on=READ_ON,
        framework="Megatron-Bridge / megatron-core (Bridge 600d069b, MCore 24bad8e6 for the Moonlight study)",
        flop_counting=_MB_FLOPS,
    ),
    "modelzoo-qwen3": Source(
        title="Megatron-MoE-ModelZoo best practice: Qwen3 performance results",
        url="https://github.com/yanring/Megatron-MoE-ModelZoo/blob/main/best_practice/qwen3/readme.md",
        where="'H100' table (cross-node / intra-node EP strategies), 'Long Context' table, 'GB200' table",
        version="commit 798dfb503c6884a130fca8638e13da3bd0dd7ce0 (2026-05-13)",
        read_on=READ_ON,
        framework="megatron-core (Megatron-LM main/dev branches named per row)",
        flop_counting="Megatron-LM's model TFLOP/s per GPU (num_floating_point_operations, no recompute counted); MFU column left empty by the source",
    ),
    "mlm-dsv3-gb200": Source(
        title="Optimizing DeepSeek-V3 Training Performance on NVIDIA GB200 NVL72 (Megatron-LM discussion)",
        url="https://github.com/NVIDIA/Megatron-LM/blob/dev/docs/discussions/deepseek-v3-gb200-optimization/deepseek-v3-gb200-optimization.md",
        where="optimisation history table ('Feature Roadmap' vs TFLOPS/GPU), Sec. 1 (baseline layout); flags from the reproduce guide",
        version="dev-branch commit eb0783b6d35607ef1953eaca60b37b886b1a25d0 (2025-11-03); file removed on dev 2025-11-06 (3c1b98ef)",
        read_on=READ_ON,
        framework="megatron-core dev (v0.15 era) + Transformer Engine 2.9 + DeepEP/HybridEP",
        flop_counting="Megatron-LM's model TFLOP/s per GPU (no recompute counted)",
    ),
    "dsv3-report": Source(
        title="DeepSeek-V3 Technical Report (DeepSeek-AI)",
        url="https://arxiv.org/abs/2412.19437",
        where="Sec. 3.1-3.3 (cluster, DualPipe, EP/PP/ZeRO-1, FP8 recipe, recomputation), Sec. 4.2 (batch, sequence), Table 1 and Sec. 1 (GPU hours)",
        version="arXiv v1/v2 (Dec 2024 / Feb 2025)",
        read_on=READ_ON,
        framework="in-house HAI-LLM",
        flop_counting="none printed; throughput from '180K H800 GPU hours per trillion tokens'",
    ),
    "torchtitan-202412": Source(
        title="torchtitan performance benchmarks, Llama 3.1 on H100 (end of 2024)",
        url="https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md",
        where="Tables 1-6",
        version="file at commit 820504e20d1149fbf0b98c567af24c4b0433b22d (2025-06-13); runs on torch 1963fc8, torchao eab345c, torchtitan 9dec370 (2024-12-26)",
        read_on=READ_ON,
        framework="torchtitan 9dec370 (FSDP2, TP, PP, CP, torch.compile, torchao float8)",
        flop_counting="tokens/s per GPU only (TPS/GPU read at step 90); no MFU because Float8 mixes peaks",
    ),
    "torchtitan-asynctp-202506": Source(
        title="torchtitan async TP benchmarks, Llama 3 on H100 (June 2025)",
        url="https://github.com/pytorch/torchtitan/blob/main/benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md",
        where="the two result tables (Llama3 70B on 256 H100; Llama3 8B on 64 H100)",
        version="commit 2887250bbd9103d0bc997ea2efb3a525b5e5dbc0 (2025-06-16); torch 38410cf9, torchtitan 820504e",
        read_on=READ_ON,
        framework="torchtitan 820504e (FSDP2 + TP, torch.compile, torchao float8)",
        flop_counting="tokens/s only",
    ),
    "nemo-24.07": Source(
        title="NeMo performance benchmarks, pre-training at FP8 (NeMo 24.07, DGX-H100)",
        url="https://github.com/NVIDIA/NeMo/blob/0b8a80ee066472c96fcb1e317b8aa071277b9aa7/docs/source/performance/performance_summary.md",
        where="'Pretraining' table",
        version="commit 0b8a80ee066472c96fcb1e317b8aa071277b9aa7 (file deleted in d31653f7, 2024-12-11)",
        read_on=READ_ON,
        framework="NeMo 24.07 (megatron-core, Transformer Engine)",
        flop_counting="NeMo 'Model TFLOP/sec/GPU' (model FLOPs, fwd+bwd, recompute not counted)",
    ),
    "nemo-longseq-h100": Source(
        title="NeMo long sequence performance: LLAMA2-7B (FP8) on H100",
        url="https://github.com/NVIDIA/NeMo/blob/main/docs/source/performance/performance_long_sequence.md",
        where="'LLAMA2-7B (FP8) - H100' table (container NeMo 24.03.01)",
        version="commit 19fadb67b09ba94c55094d34df119d6f9c565068 (2025-05-09)",
        read_on=READ_ON,
        framework="NeMo 24.03.01 (megatron-core context parallelism, Transformer Engine)",
        flop_counting="NeMo 'TFLOPS / GPU' (model FLOPs, recompute not counted)",
    ),
    "nemo-longseq-b200": Source(
        title="NeMo long sequence performance: LLAMA3-8B (FP8) on B200",
        url="https://github.com/NVIDIA/NeMo/blob/main/docs/source/performance/performance_long_sequence.md",
        where="'LLAMA3-8B (FP8) - B200' table (container NeMo 25.04.rc2)",
        version="commit 19fadb67b09ba94c55094d34df119d6f9c565068 (2025-05-09)",
        read_on=READ_ON,
        framework="NeMo 25.04.rc2 (megatron-core context parallelism, Transformer Engine)",
        flop_counting="NeMo 'TFLOPS / GPU' (model FLOPs, recompute not counted)",
    ),
    "automodel-perf": Source(
        title="NeMo AutoModel performance summary (PyTorch backend), DGX-H100 BF16 pre-training",
        url="https://github.com/NVIDIA-NeMo/Automodel/blob/main/docs/performance-summary.mdx",
        where="'Pre-Training Performance' > 'System: DGX-H100, Precision: BF16'",
        version="commit cb9765441e5127b8100879ca1f7ff5920f825887 (2026-06-12)",
        read_on=READ_ON,
        framework="NeMo AutoModel (PyTorch FSDP2 + PP + EP, Transformer Engine kernels, DeepEP)",
        flop_counting="'Model TFLOPs/sec/GPU'; MFU against 989 TFLOP/s BF16 H100 peak; mock data, fake balanced gate",
    ),
    "torchao-moe-training": Source(
        title="torchao MXFP8 MoE training README (Llama 4 Scout on GB200 with torchtitan)",
        url="https://github.com/pytorch/ao/blob/main/torchao/prototype/moe_training/README.md",
        where="'Case study training at scale' table and configuration; 'Benchmarks' tables (grouped GEMM, MoE layer)",
        version="commit 5e79e5ed3434aa04281931039da1bab338c415b3 (2026-03-13)",
        read_on=READ_ON,
        framework="torchtitan 0.2.1 + torchao 0.17 (FSDP2 + EP, torch.compile)",
        flop_counting="tokens/s only",
    ),
    "deepgemm-readme": Source(
        title="DeepGEMM README performance tables (H800 SXM5, FP8 with 1x128/128x128 scaling)",
        url="https://github.com/deepseek-ai/DeepGEMM/blob/2e7e58011b03d394743fb91a8aa97e4ae5250aea/README.md",
        where="'Normal GEMMs for dense models', 'Grouped GEMMs for MoE models (contiguous layout)', '(masked layout)'",
        version="commit 2e7e58011b03d394743fb91a8aa97e4ae5250aea (2025-04-11), NVCC 12.8",
        read_on=READ_ON,
        framework="DeepGEMM",
        flop_counting="2 m n k per GEMM over kernel time",
    ),
    "ml-engineering-mamf": Source(
        title="Machine Learning Engineering (S. Bekman): Maximum Achievable Matmul FLOPS comparison table",
        url="https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/README.md",
        where="'Maximum Achievable Matmul FLOPS comparison table' (BF16 and FP8 float8_e4m3fn, no sparsity)",
        version="file at commit 7bc7c3054eb93c277a4755c597ae0864d77a63f1 (2026-08-10)",
        read_on=READ_ON,
        framework="torch.matmul / torch._scaled_mm via mamf-finder.py (versions per row)",
        flop_counting="2 m n k per matmul; best mean over 100 iterations (50 warm-up) of a brute-force shape search",
    ),
    "megatron-cp-docs": Source(
        title="Megatron Core user guide: Context Parallel overview, Figure 2",
        url="https://github.com/NVIDIA/Megatron-LM/blob/main/docs/user-guide/features/context_parallel.md",
        where="Figure 2 (docs/images/context_parallel/CP_results.png): speedup of GPT 175B TP+CP combinations over TP8CP1 with full recompute",
        version="image at commit 4f700f71cb13f68ba5921dc2d6e6e93202e87287 (2025-12-12); doc at d98e8a64ddf3 (2026-08-22)",
        read_on=READ_ON,
        framework="megatron-core >= 0.5 with Transformer Engine >= 1.1",
        flop_counting="relative step throughput only (no labels on the bars)",
    ),
    "flashattention2-paper": Source(
        title="FlashAttention-2 (Dao), benchmark figures",
        url="https://arxiv.org/abs/2307.08691",
        where="Fig. 4 (A100 80GB SXM4 forward+backward); H100 80GB SXM5 forward+backward figure in the repository README",
        version="arXiv v1 (2023-07-17); repository assets at commit 7ef24848cf2f855077cef88fe122775b727dcd74",
        read_on=READ_ON,
        framework="flash-attn 2.x (CUDA, fp16/bf16)",
        flop_counting="forward 4 s^2 d h (halved when causal), backward 2.5x forward; batch x seqlen = 16k, hidden 2048",
    ),
    "flashattention3-paper": Source(
        title="FlashAttention-3 (Shah et al.), FP16 forward benchmark figure",
        url="https://arxiv.org/abs/2407.08608",
        where="Fig. 5 (H100 80GB SXM5 forward speed, head dim 64/128/256, with and without causal mask)",
        version="arXiv v1 (2024-07-11); the same figure as assets/flash3_fp16_fwd.png at commit 7ef24848cf2f",
        read_on=READ_ON,
        framework="flash-attn 3 beta (CUDA, Hopper)",
        flop_counting="forward 4 s^2 d h (halved when causal); batch x seqlen = 16k, hidden 2048",
    ),
    "pai-megatron-patch-issues": Source(
        title="Pai-Megatron-Patch issues: Qwen3-235B-A22B and Qwen3-30B-A3B step times on H800",
        url="https://github.com/alibaba/Pai-Megatron-Patch/issues/658",
        where=("issue #658 (Qwen3-235B-A22B, 256 H800, four layouts; table '测速结果') and issue #643 "
               "(Qwen3-30B-A3B, 16 H800, two layouts)"),
        version="issue texts of 2025-09-02 (#658) and 2025-08-08 (#643); runs on Pai-Megatron-Patch 2b201af",
        read_on=READ_ON,
        framework="Pai-Megatron-Patch (megatron-core, the repository's Qwen3 example scripts)",
        flop_counting="none printed; step time and tokens/s/GPU",
    ),
}

HOLDOUT_SOURCES: frozenset[str] = frozenset(
    {"mbridge-25.11", "torchtitan-202412", "automodel-perf", "pai-megatron-patch-issues"}
)
"""Sources whose rows are held out of fitting (set constants on the rest)."""


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------

MODELS: dict[str, ModelArch] = {
    "llama2-7b": ModelArch(
        title="Llama 2 7B",
        source="https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json",
        layers=32, hidden=4096, ffn=11008, heads=32, kv_heads=32, head_dim=128, vocab=32000, tied_embeddings=False,
        preset="(llm module of llava-1.5-7b / openvla-7b has these dims)",
    ),
    "llama2-70b": ModelArch(
        title="Llama 2 70B",
        source="https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json",
        layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, head_dim=128, vocab=32000, tied_embeddings=False,
    ),
    "llama3-8b": ModelArch(
        title="Llama 3 / 3.1 8B",
        source="https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
        layers=32, hidden=4096, ffn=14336, heads=32, kv_heads=8, head_dim=128, vocab=128256, tied_embeddings=False,
    ),
    "llama3-70b": ModelArch(
        title="Llama 3 / 3.1 70B",
        source="https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
        layers=80, hidden=8192, ffn=28672, heads=64, kv_heads=8, head_dim=128, vocab=128256, tied_embeddings=False,
    ),
    "llama3.1-405b": ModelArch(
        title="Llama 3.1 405B",
        source="https://huggingface.co/meta-llama/Llama-3.1-405B/blob/main/config.json (also Llama 3 paper Table 3)",
        layers=126, hidden=16384, ffn=53248, heads=128, kv_heads=8, head_dim=128, vocab=128256, tied_embeddings=False,
    ),
    "qwen3-30b-a3b": ModelArch(
        title="Qwen3-30B-A3B",
        source="https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json (fixture tests/fixtures/hf/Qwen3-30B-A3B)",
        layers=48, hidden=2048, ffn=6144, heads=32, kv_heads=4, head_dim=128, vocab=151936, tied_embeddings=False,
        experts=128, top_k=8, moe_ffn=768, moe_layer_rule="every layer MoE (decoder_sparse_step 1, mlp_only_layers [])",
        preset="qwen3-vl-30b-a3b (its llm module has the same text dimensions)",
        notes="q/k RMSNorm per head; router softmax top-8 with renormalised weights (norm_topk_prob); ffn unused (no dense layer)",
    ),
    "qwen3-235b-a22b": ModelArch(
        title="Qwen3-235B-A22B",
        source="https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json",
        layers=94, hidden=4096, ffn=12288, heads=64, kv_heads=4, head_dim=128, vocab=151936, tied_embeddings=False,
        experts=128, top_k=8, moe_ffn=1536, moe_layer_rule="every layer MoE",
        preset="qwen3-vl-235b-a22b (its llm module has the same text dimensions)",
        notes="64 query heads of 128 = 8192 wide projections on a 4096 residual; ffn unused (no dense layer)",
    ),
    "deepseek-v3": ModelArch(
        title="DeepSeek-V3 (671B total, 37B active)",
        source="https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (= transformers DeepseekV3Config defaults)",
        layers=61, hidden=7168, ffn=18432, heads=128, kv_heads=128, head_dim=192, vocab=129280, tied_embeddings=False,
        experts=256, top_k=8, moe_ffn=2048, shared_experts=1, shared_ffn=2048, dense_layers=(0, 1, 2),
        moe_layer_rule="first_k_dense_replace=3; sigmoid scores, node-limited routing (n_group 8, topk_group 4), routed_scaling_factor 2.5",
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, mtp_layers=1,
        attention="MLA (latent KV 512 + decoupled RoPE key 64), full causal",
        notes="issue 34 asks for this model; no preset yet",
    ),
    "kimi-k2": ModelArch(
        title="Kimi K2 (1.04T total, 32B active)",
        source="https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json",
        layers=61, hidden=7168, ffn=18432, heads=64, kv_heads=64, head_dim=192, vocab=163840, tied_embeddings=False,
        experts=384, top_k=8, moe_ffn=2048, shared_experts=1, shared_ffn=2048, dense_layers=(0,),
        moe_layer_rule="first_k_dense_replace=1; n_group 1 (no node-limited grouping)",
        q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, mtp_layers=0,
        attention="MLA as DeepSeek-V3 with 64 heads",
    ),
    "moonlight-16b-a3b": ModelArch(
        title="Moonlight-16B-A3B (Moonshot; DeepSeek-V3 architecture)",
        source=("https://huggingface.co/moonshotai/Moonlight-16B-A3B/blob/main/config.json (vocab, experts, top-k, no "
                "q-LoRA also in Megatron-Bridge tests/unit_tests/recipes/test_moonlight_recipes.py)"),
        layers=27, hidden=2048, ffn=11264, heads=16, kv_heads=16, head_dim=192, vocab=163840, tied_embeddings=False,
        experts=64, top_k=6, moe_ffn=1408, shared_experts=2, shared_ffn=2816, dense_layers=(0,),
        moe_layer_rule="first_k_dense_replace=1; sigmoid scores with expert bias, routed_scaling_factor 2.446",
        q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
        attention="MLA without query compression (q_lora_rank null)",
    ),
    "gpt-oss-120b": ModelArch(
        title="gpt-oss-120b",
        source="https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json (= transformers GptOssConfig defaults)",
        layers=36, hidden=2880, ffn=2880, heads=64, kv_heads=8, head_dim=64, vocab=201088, tied_embeddings=False,
        experts=128, top_k=4, moe_ffn=2880, moe_layer_rule="every layer MoE",
        attention="alternating sliding-window (128 tokens) and full causal layers; learned per-head attention sinks",
        notes="biases on attention projections and experts; clamped SwiGLU; 64 x 64 query width (4096) differs from hidden 2880",
    ),
    "gpt3-175b": ModelArch(
        title="GPT-3 175B as configured in Megatron-LM",
        source="Brown et al. 2020 (arXiv:2005.14165) Table 2.1; Megatron-LM's GPT-3 175B settings (vocabulary padded to 51200)",
        layers=96, hidden=12288, ffn=49152, heads=96, kv_heads=96, head_dim=128, vocab=51200, tied_embeddings=True,
        gated_mlp=False, preset="(benchmarks/calibration/dense.py gpt3_model builds the same shape)",
        notes="GeLU MLP (not gated), learned position embeddings, multi-head attention",
    ),
    "llama4-scout": ModelArch(
        title="Llama 4 Scout 17B-16E (109B total)",
        source="https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E/blob/main/config.json (text_config; = transformers Llama4TextConfig defaults)",
        layers=48, hidden=5120, ffn=16384, heads=40, kv_heads=8, head_dim=128, vocab=202048, tied_embeddings=False,
        experts=16, top_k=1, moe_ffn=8192, shared_experts=1, shared_ffn=8192, moe_layer_rule="interleave_moe_layer_step=1 (every layer MoE)",
        attention="chunked local attention (8192-token chunks) on 3 of 4 layers; every 4th layer global without RoPE",
        notes="ffn (intermediate_size_mlp) unused in Scout; sigmoid top-1 router",
    ),
}


# --------------------------------------------------------------------------------------------
# Row helpers (pure: they only fill defaults)
# --------------------------------------------------------------------------------------------

def _tf(v: float, printed: str | None = None) -> Measured:
    return Measured(v, "TFLOP/s/GPU", printed if printed is not None else f"{v:g}")


def _tok(v: float, printed: str | None = None) -> Measured:
    return Measured(v, "tokens/s/GPU", printed if printed is not None else f"{v:g}")


def _gib(v: float) -> Measured:
    return Measured(v, "GiB", f"{v:g}")


def _gb(v: float) -> Measured:
    return Measured(v, "GB", f"{v:g}")


def _regime(model: str, precision: str, cp: int, seq_len: int) -> tuple[str, ...]:
    out = ["moe" if MODELS[model].is_moe else "dense"]
    if cp > 1 or seq_len >= 32768:
        out.append("long-context")
    if precision != "bf16":
        out.append("fp8")
    return tuple(out)


def _run(key: str, source: str, model: str, gpu: str, gpus: int, precision: str, *, tp: int = 1, pp: int = 1,
         cp: int = 1, dp: int | None = None, vpp: int | None = 1, ep: int = 1, etp: int | None = None,
         mbs: int | None, gbs: int | None, seq_len: int, measured: tuple[Measured, ...], framework: str | None = None,
         derived: tuple[str, ...] = (), **kw: Any) -> PublishedRun:
    """A row; ``dp`` defaults to ``gpus / (tp pp cp)`` and is then named derived."""
    if dp is None:
        dp = gpus // (tp * pp * cp)
        derived = tuple(derived) + ("dp",)
    return PublishedRun(
        key=key, source=source, model=model, gpu=gpu, gpus=gpus, precision=precision,
        tp=tp, pp=pp, cp=cp, dp=dp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, gbs=gbs, seq_len=seq_len,
        measured=measured, regime=_regime(model, precision, cp, seq_len),
        framework=framework if framework is not None else SOURCES[source].framework,
        derived=derived, holdout=source in HOLDOUT_SOURCES, **kw,
    )


# --------------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------------

_BAL = MoESettings(routing="force-balanced", dropless=True, grouped_gemm=True)
"""Megatron-Bridge MoE benchmarks: token distribution force-balanced, no token dropped (footnote of [2])."""

_MB_NOTE = "layout, batch and throughput as printed; knobs not printed are left unknown unless the recipe file of the time states them"

_LLAMA3 = [
    _run("llama3-405b-h100-8192gpu", "llama3-paper", "llama3.1-405b", "H100-SXM", 8192, "bf16",
         tp=8, pp=16, cp=1, dp=64, vpp=None, mbs=None, gbs=2048, seq_len=8192,
         measured=(_tf(430, "430"), Measured(0.43, "MFU", "43%")), derived=("gbs",),
         dp_sharding="fsdp (parameters kept gathered between forward and backward; our reading of Sec. 3.3.2)",
         families=("scale:llama3-405b-h100-s8k",),
         notes="batch size per DP group 32 and 16M tokens per batch as printed; gbs = 16M / 8192. Interleaved pipeline "
               "schedule with the paper's modifications; the number of virtual stages is not in Table 4."),
    _run("llama3-405b-h100-16384gpu", "llama3-paper", "llama3.1-405b", "H100-SXM", 16384, "bf16",
         tp=8, pp=16, cp=1, dp=128, vpp=None, mbs=None, gbs=2048, seq_len=8192,
         measured=(_tf(400, "400"), Measured(0.41, "MFU", "41%")), derived=("gbs",),
         dp_sharding="fsdp (parameters kept gathered between forward and backward; our reading of Sec. 3.3.2)",
         families=("scale:llama3-405b-h100-s8k",),
         notes="batch size per DP group 16, 16M tokens per batch"),
    _run("llama3-405b-h100-16384gpu-cp16", "llama3-paper", "llama3.1-405b", "H100-SXM", 16384, "bf16",
         tp=8, pp=16, cp=16, dp=8, vpp=None, mbs=None, gbs=128, seq_len=131072,
         measured=(_tf(380, "380"), Measured(0.38, "MFU", "38%")), derived=("gbs",),
         dp_sharding="fsdp (our reading of Sec. 3.3.2)",
         notes="long-context pre-training stage; CP implemented as all-gather of K/V (not a ring) per Sec. 3.3.2; "
               "batch size per DP group 16, 16M tokens per batch"),
]

_MB2604 = "mbridge-26.04.01"
_MB2604_ROWS = [
    # Llama 3 70B (FP8 = per-tensor current scaling in the 26.x tables)
    _run("mb2604-llama3-70b-gb200-fp8-fsdp64", _MB2604, "llama3-70b", "GB200", 64, "fp8-tensorwise",
         tp=1, pp=1, cp=1, dp=64, vpp=1, mbs=2, gbs=256, seq_len=8192, measured=(_tok(4224), _tf(1892)),
         dp_sharding="megatron-fsdp", derived=("precision recipe",),
         notes="'FP8' in the 26.x tables taken as current scaling (the 25.11 table calls the same runs FP8-CS). " + _MB_NOTE),
    _run("mb2604-llama3-70b-gb200-mxfp8", _MB2604, "llama3-70b", "GB200", 64, "mxfp8",
         tp=2, pp=4, cp=1, vpp=5, mbs=1, gbs=256, seq_len=8192, measured=(_tok(3712), _tf(1664)),
         dp_sharding="distributed-optimizer", notes=_MB_NOTE),
    _run("mb2604-llama3-70b-h100-fp8", _MB2604, "llama3-70b", "H100-SXM", 64, "fp8-tensorwise",
         tp=4, pp=8, cp=1, vpp=5, mbs=1, gbs=256, seq_len=8192, measured=(_tok(1664), _tf(731)),
         dp_sharding="distributed-optimizer", derived=("precision recipe",), notes=_MB_NOTE),
    # Llama 3.1 405B
    _run("mb2604-llama31-405b-gb200-fp8", _MB2604, "llama3.1-405b", "GB200", 256, "fp8-tensorwise",
         tp=4, pp=16, cp=1, vpp=4, mbs=1, gbs=1536, seq_len=8192, measured=(_tok(864), _tf(2144)),
         dp_sharding="distributed-optimizer", derived=("precision recipe",), notes=_MB_NOTE),
    _run("mb2604-llama31-405b-gb200-mxfp8", _MB2604, "llama3.1-405b", "GB200", 256, "mxfp8",
         tp=4, pp=16, cp=1, vpp=8, mbs=1, gbs=1536, seq_len=8192, measured=(_tok(800), _tf(1994)),
         dp_sharding="distributed-optimizer", notes=_MB_NOTE),
    _run("mb2604-llama31-405b-h100-fp8", _MB2604, "llama3.1-405b", "H100-SXM", 1024, "fp8-tensorwise",
         tp=8, pp=8, cp=2, vpp=8, mbs=1, gbs=1536, seq_len=8192, measured=(_tok(328), _tf(827)),
         dp_sharding="distributed-optimizer", derived=("precision recipe",), notes=_MB_NOTE),
    # DeepSeek-V3
    _run("mb2604-dsv3-gb200-mxfp8", _MB2604, "deepseek-v3", "GB200", 256, "mxfp8",
         tp=1, pp=4, cp=1, vpp=4, ep=64, etp=1, mbs=1, gbs=4096, seq_len=4096, measured=(_tok(4256), _tf(1106)),
         dp_sharding="distributed-optimizer", recompute="selective", recompute_modules=("mla_up_proj",),
         moe=_BAL, derived=("etp", "recompute_modules"),
         notes="recompute modules and etp from the GB200 recipe (mla_up_proj; etp 1 as in every DSv3 recipe); MTP layer "
               "presence not printed for 26.x. " + _MB_NOTE),
    _run("mb2604-dsv3-b200-mxfp8", _MB2604, "deepseek-v3", "B200", 256, "mxfp8",
         tp=1, pp=8, cp=1, vpp=2, ep=32, etp=1, mbs=1, gbs=4096, seq_len=4096, measured=(_tok(3328), _tf(864)),
         dp_sharding="distributed-optimizer", recompute="selective", recompute_modules=("mla_up_proj", "mlp"),
         moe=MoESettings(dispatcher="flex-deepep", routing="force-balanced", dropless=True, grouped_gemm=True, a2a_overlap=True),
         derived=("etp", "recompute_modules", "dispatcher"),
         notes="B200 FP8_MX_V2 recipe at 21d102f5: DeepEP, EP A2A overlap, PP layout 'Et*4|(t*4|)*14tmL' (uneven, with an MTP "
               "layer), recompute mla_up_proj + mlp. " + _MB_NOTE),
    # GPT-OSS 120B (BF16)
    _run("mb2604-gptoss-gb200-bf16", _MB2604, "gpt-oss-120b", "GB200", 64, "bf16",
         tp=1, pp=1, cp=1, vpp=1, ep=64, etp=1, mbs=4, gbs=1280, seq_len=4096, measured=(_tok(16640), _tf(452)),
         dp_sharding="distributed-optimizer", recompute="selective", recompute_modules=("layernorm", "moe_act"),
         moe=MoESettings(routing="force-balanced", dropless=True, grouped_gemm=True, a2a_overlap=True),
         derived=("etp", "recompute_modules"),
         notes="recipe GB200_BF16_V2: recompute layernorm + moe_act, EP A2A overlap. How the sliding-window layers were "
               "counted in model FLOPs for this container is not stated. " + _MB_NOTE),
    _run("mb2604-gptoss-b200-bf16", _MB2604, "gpt-oss-120b", "B200", 64, "bf16",
         tp=1, pp=1, cp=1, vpp=1, ep=8, etp=1, mbs=4, gbs=1280, seq_len=4096, measured=(_tok(13568), _tf(369)),
         dp_sharding="distributed-optimizer", recompute="selective", recompute_modules=("layernorm", "moe_act"),
         moe=_BAL, derived=("etp", "recompute_modules"), notes="recipe B200_BF16_V2. " + _MB_NOTE),
    _run("mb2604-gptoss-h100-bf16", _MB2604, "gpt-oss-120b", "H100-SXM", 64, "bf16",
         tp=1, pp=4, cp=1, vpp=1, ep=8, etp=1, mbs=1, gbs=1280, seq_len=4096, measured=(_tok(5824), _tf(158)),
         dp_sharding="distributed-optimizer", recompute="selective", recompute_modules=("layernorm", "moe_act"),
         moe=_BAL, derived=("etp", "recompute_modules"), notes="recipe H100_BF16_V2. " + _MB_NOTE),
    # Qwen3-30B-A3B
    _run("mb2604-qwen3-30b-gb200-mxfp8", _MB2604, "qwen3-30b-a3b", "GB200", 8, "mxfp8",
         tp=1, pp=1, cp=1, vpp=1, ep=8, etp=1, mbs=4, gbs=512, seq_len=4096, measured=(_tok(26112), _tf(599)),
         dp_sharding="distributed-optimizer", recompute="none",
         moe=MoESettings(dispatcher="flex-hybridep", routing="force-balanced", dropless=True, grouped_gemm=True),
         derived=("etp", "dispatcher", "recompute"),
         notes="recipe GB200_FP8_MX_V1: HybridEP, TE CUDA graphs on router/preprocess, no recompute. " + _MB_NOTE),
    _run("mb2604-qwen3-30b-b200-mxfp8", _MB2604, "qwen3-30b-a3b", "B200", 8, "mxfp8",
         tp=1, pp=1, cp=1, vpp=1, ep=8, etp=1, mbs=4, gbs=512, seq_len=4096, measured=(_tok(27136), _tf(619)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",), notes=_MB_NOTE),
    _run("mb2604-qwen3-30b-h100-fp8", _MB2604, "qwen3-30b-a3b", "H100-SXM", 16, "fp8-tensorwise",
         tp=1, pp=1, cp=1, vpp=1, ep=16, etp=1, mbs=1, gbs=1024, seq_len=4096, measured=(_tok(8960), _tf(206)),
         dp_sharding="distributed-optimizer", recompute="none",
         moe=MoESettings(dispatcher="flex-hybridep", routing="force-balanced", dropless=True, grouped_gemm=True, a2a_overlap=False),
         derived=("etp", "dispatcher", "precision recipe"),
         notes="recipe H100_FP8_CS_V1: HybridEP over 2 nodes, no A2A overlap. " + _MB_NOTE),
    # Qwen3-235B-A22B
    _run("mb2604-qwen3-235b-gb200-mxfp8", _MB2604, "qwen3-235b-a22b", "GB200", 256, "mxfp8",
         tp=1, pp=8, cp=1, vpp=3, ep=32, etp=1, mbs=1, gbs=8192, seq_len=4096, measured=(_tok(5680), _tf(840)),
         dp_sharding="distributed-optimizer", recompute="none",
         moe=MoESettings(dispatcher="flex-hybridep", routing="force-balanced", dropless=True, grouped_gemm=True),
         derived=("etp", "dispatcher", "recompute"),
         notes="recipe GB200_FP8_MX_V2: HybridEP within the NVL72 domain, TE CUDA graphs. " + _MB_NOTE),
    _run("mb2604-qwen3-235b-b200-mxfp8", _MB2604, "qwen3-235b-a22b", "B200", 256, "mxfp8",
         tp=1, pp=8, cp=1, vpp=1, ep=8, etp=1, mbs=1, gbs=8192, seq_len=4096, measured=(_tok(3776), _tf(560)),
         dp_sharding="distributed-optimizer",
         moe=MoESettings(routing="force-balanced", dropless=True, grouped_gemm=True, a2a_overlap=False),
         derived=("etp",), notes=_MB_NOTE),
    _run("mb2604-qwen3-235b-h100-fp8", _MB2604, "qwen3-235b-a22b", "H100-SXM", 256, "fp8-tensorwise",
         tp=2, pp=8, cp=1, vpp=4, ep=32, etp=1, mbs=1, gbs=8192, seq_len=4096, measured=(_tok(1712), _tf(253)),
         dp_sharding="distributed-optimizer",
         moe=MoESettings(dispatcher="alltoall", routing="force-balanced", dropless=True, grouped_gemm=True, a2a_overlap=True),
         derived=("etp", "dispatcher", "precision recipe"),
         notes="recipe H100_FP8_CS_V2: all-to-all dispatcher (no flex backend set), EP A2A overlap. " + _MB_NOTE),
]

_MB2511 = "mbridge-25.11"
_MB2511_NOTE = ("25.11 table (per system); 'FP8-CS' = per-tensor current scaling, 'FP8-MX' = MXFP8; the parenthesised "
                "second number is the same run with the other recipe named in the footnote")
_MB2511_ROWS = [
    # GB200
    _run("mb2511-llama3-8b-gb200-fp8cs", _MB2511, "llama3-8b", "GB200", 8, "fp8-tensorwise",
         mbs=2, gbs=128, seq_len=8192, vpp=1, ga=8, measured=(_tok(31508), _tf(1622)), dp_sharding="distributed-optimizer",
         families=("precision:mb2511-llama3-8b-gb200",), notes=_MB2511_NOTE),
    _run("mb2511-llama3-8b-gb200-mxfp8", _MB2511, "llama3-8b", "GB200", 8, "mxfp8",
         mbs=2, gbs=128, seq_len=8192, vpp=1, ga=8, measured=(_tok(29789, "(29789)"), _tf(1533, "(1533)")),
         dp_sharding="distributed-optimizer", families=("precision:mb2511-llama3-8b-gb200",), notes=_MB2511_NOTE),
    _run("mb2511-llama3-70b-gb200-fp8cs", _MB2511, "llama3-70b", "GB200", 64, "fp8-tensorwise",
         dp=64, mbs=2, gbs=256, seq_len=8192, vpp=1, ga=2, measured=(_tok(4312), _tf(1937)), dp_sharding="megatron-fsdp",
         notes=_MB2511_NOTE),
    _run("mb2511-llama31-405b-gb200-fp8cs", _MB2511, "llama3.1-405b", "GB200", 256, "fp8-tensorwise",
         tp=4, pp=16, vpp=4, mbs=1, gbs=1536, seq_len=8192, ga=384, measured=(_tok(813), _tf(2053)),
         dp_sharding="distributed-optimizer", notes=_MB2511_NOTE),
    _run("mb2511-dsv3-gb200-bf16", _MB2511, "deepseek-v3", "GB200", 256, "bf16",
         pp=4, vpp=4, ep=64, etp=1, mbs=1, gbs=4096, seq_len=4096, ga=64, measured=(_tok(3139), _tf(782)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",),
         notes="'DeepSeekV3 (w/o MTP)': the MTP layer removed. " + _MB2511_NOTE),
    _run("mb2511-dsv3-gb200-mxfp8", _MB2511, "deepseek-v3", "GB200", 256, "mxfp8",
         pp=8, vpp=4, ep=32, etp=1, mbs=1, gbs=4096, seq_len=4096, ga=128, measured=(_tok(4018), _tf(1003)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",),
         notes="'DeepSeekV3 (w/o MTP)'. " + _MB2511_NOTE),
    _run("mb2511-gptoss-gb200-bf16", _MB2511, "gpt-oss-120b", "GB200", 64, "bf16",
         ep=64, etp=1, vpp=1, mbs=1, gbs=1280, seq_len=8192, ga=20, measured=(_tok(15876), _tf(488)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",), notes=_MB2511_NOTE),
    _run("mb2511-qwen3-30b-gb200-mxfp8", _MB2511, "qwen3-30b-a3b", "GB200", 8, "mxfp8",
         ep=8, etp=1, vpp=1, mbs=4, gbs=512, seq_len=4096, ga=16, measured=(_tok(23766), _tf(547)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",), notes=_MB2511_NOTE),
    _run("mb2511-qwen3-235b-gb200-bf16", _MB2511, "qwen3-235b-a22b", "GB200", 256, "bf16",
         pp=8, vpp=3, ep=32, etp=1, mbs=1, gbs=8192, seq_len=4096, ga=256, measured=(_tok(4916), _tf(728)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",), notes=_MB2511_NOTE),
    # B200
    _run("mb2511-llama3-8b-b200-fp8cs", _MB2511, "llama3-8b", "B200", 8, "fp8-tensorwise",
         mbs=2, gbs=128, seq_len=8192, vpp=1, ga=8, measured=(_tok(30624), _tf(1576)), dp_sharding="distributed-optimizer",
         families=("precision:mb2511-llama3-8b-b200",), notes=_MB2511_NOTE),
    _run("mb2511-llama3-8b-b200-mxfp8", _MB2511, "llama3-8b", "B200", 8, "mxfp8",
         mbs=2, gbs=128, seq_len=8192, vpp=1, ga=8, measured=(_tok(29521, "(29521)"), _tf(1519, "(1519)")),
         dp_sharding="distributed-optimizer", families=("precision:mb2511-llama3-8b-b200",), notes=_MB2511_NOTE),
    _run("mb2511-llama31-405b-b200-fp8cs", _MB2511, "llama3.1-405b", "B200", 128, "fp8-tensorwise",
         tp=4, pp=8, cp=2, vpp=8, mbs=1, gbs=64, seq_len=8192, ga=32, measured=(_tok(661), _tf(1667)),
         dp_sharding="distributed-optimizer", families=("precision:mb2511-llama31-405b-b200",), notes=_MB2511_NOTE),
    _run("mb2511-llama31-405b-b200-mxfp8", _MB2511, "llama3.1-405b", "B200", 128, "mxfp8",
         tp=4, pp=8, cp=2, vpp=8, mbs=1, gbs=64, seq_len=8192, ga=32, measured=(_tok(624, "(624)"), _tf(1576, "(1576)")),
         dp_sharding="distributed-optimizer", families=("precision:mb2511-llama31-405b-b200",), notes=_MB2511_NOTE),
    _run("mb2511-dsv3-b200-mxfp8-mtp", _MB2511, "deepseek-v3", "B200", 256, "mxfp8",
         pp=16, vpp=1, ep=8, etp=1, mbs=1, gbs=2048, seq_len=4096, ga=128, measured=(_tok(2139), _tf(557)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",),
         notes="'DeepSeekV3 (w/ MTP)': one MTP layer. " + _MB2511_NOTE),
    _run("mb2511-gptoss-b200-bf16", _MB2511, "gpt-oss-120b", "B200", 64, "bf16",
         ep=8, etp=1, vpp=1, mbs=4, gbs=512, seq_len=4096, ga=2, measured=(_tok(8213), _tf(223)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",), notes=_MB2511_NOTE),
    _run("mb2511-qwen3-30b-b200-mxfp8", _MB2511, "qwen3-30b-a3b", "B200", 8, "mxfp8",
         ep=8, etp=1, vpp=1, mbs=1, gbs=512, seq_len=4096, ga=64, measured=(_tok(9299), _tf(214)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",), notes=_MB2511_NOTE),
    _run("mb2511-qwen3-235b-b200-mxfp8", _MB2511, "qwen3-235b-a22b", "B200", 64, "mxfp8",
         pp=8, vpp=2, ep=8, etp=1, mbs=1, gbs=1024, seq_len=4096, ga=128, measured=(_tok(3269), _tf(484)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",), notes=_MB2511_NOTE),
    # H100
    _run("mb2511-llama3-8b-h100-fp8cs", _MB2511, "llama3-8b", "H100-SXM", 8, "fp8-tensorwise",
         dp=8, mbs=1, gbs=128, seq_len=8192, vpp=1, ga=16, measured=(_tok(14451), _tf(744)), dp_sharding="megatron-fsdp",
         notes=_MB2511_NOTE),
    _run("mb2511-llama3-70b-h100-fp8cs", _MB2511, "llama3-70b", "H100-SXM", 64, "fp8-tensorwise",
         tp=4, pp=8, vpp=5, mbs=1, gbs=128, seq_len=8192, ga=64, measured=(_tok(1602), _tf(719)),
         dp_sharding="distributed-optimizer", notes=_MB2511_NOTE),
    _run("mb2511-llama31-405b-h100-fp8cs", _MB2511, "llama3.1-405b", "H100-SXM", 1024, "fp8-tensorwise",
         tp=8, pp=8, cp=2, vpp=8, mbs=1, gbs=512, seq_len=8192, ga=64, measured=(_tok(292), _tf(737)),
         dp_sharding="distributed-optimizer", notes=_MB2511_NOTE),
    _run("mb2511-gptoss-h100-bf16", _MB2511, "gpt-oss-120b", "H100-SXM", 64, "bf16",
         pp=4, vpp=1, ep=8, etp=1, mbs=4, gbs=512, seq_len=4096, ga=None, measured=(_tok(5630), _tf(153)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",),
         notes="printed GA 2 does not match PP 4 (dp 16 x mbs 4 x GA 2 = 128, not 512); GA left unset, layout kept as "
               "printed. " + _MB2511_NOTE),
    _run("mb2511-qwen3-30b-h100-fp8cs", _MB2511, "qwen3-30b-a3b", "H100-SXM", 16, "fp8-tensorwise",
         pp=2, vpp=24, ep=8, etp=1, mbs=2, gbs=512, seq_len=4096, ga=32, measured=(_tok(5275), _tf(121)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",),
         notes="the 25.09 table prints the same layout with token dropping at 241 TFLOP/s. " + _MB2511_NOTE),
    _run("mb2511-qwen3-235b-h100-fp8cs", _MB2511, "qwen3-235b-a22b", "H100-SXM", 256, "fp8-tensorwise",
         tp=2, pp=8, vpp=4, ep=32, etp=1, mbs=1, gbs=2048, seq_len=4096, ga=128, measured=(_tok(1575), _tf(233)),
         dp_sharding="distributed-optimizer", moe=_BAL, derived=("etp",), notes=_MB2511_NOTE),
]

_MB2509 = "mbridge-25.09"
_MB2509_NOTE = ("25.09 H100 table; precision not printed, FP8 current scaling implied by the footnote (parenthesised "
                "numbers: 128x128 weight / 1x128 activation blockwise scaling)")
_MB2509_ROWS = [
    _run("mb2509-llama3-8b-h100", _MB2509, "llama3-8b", "H100-SXM", 8, "fp8-tensorwise",
         dp=8, mbs=1, gbs=128, seq_len=8192, vpp=1, ga=16, measured=(_tok(14079), _tf(725)), dp_sharding="megatron-fsdp",
         derived=("precision recipe",), notes=_MB2509_NOTE),
    _run("mb2509-llama3-70b-h100", _MB2509, "llama3-70b", "H100-SXM", 64, "fp8-tensorwise",
         tp=4, pp=8, vpp=5, mbs=1, gbs=128, seq_len=8192, ga=64, measured=(_tok(1619), _tf(727)),
         dp_sharding="distributed-optimizer", derived=("precision recipe",), notes=_MB2509_NOTE),
    _run("mb2509-llama31-405b-h100", _MB2509, "llama3.1-405b", "H100-SXM", 1024, "fp8-tensorwise",
         tp=8, pp=8, cp=2, vpp=8, mbs=1, gbs=512, seq_len=8192, ga=64, measured=(_tok(302), _tf(763)),
         dp_sharding="distributed-optimizer", derived=("precision recipe",), notes=_MB2509_NOTE),
    _run("mb2509-dsv3-h100-fp8cs", _MB2509, "deepseek-v3", "H100-SXM", 1024, "fp8-tensorwise",
         tp=2, pp=8, vpp=4, ep=64, etp=1, mbs=1, gbs=8192, seq_len=4096, ga=128, measured=(_tok(1297), _tf(338, "338 (330)")),
         dp_sharding="distributed-optimizer", moe=MoESettings(routing="force-balanced", dropless=True, grouped_gemm=True),
         families=("precision:mb2509-dsv3-h100",), derived=("etp", "precision recipe"),
         notes="'DeepSeekV3 (dropless)'. " + _MB2509_NOTE),
    _run("mb2509-dsv3-h100-fp8blockwise", _MB2509, "deepseek-v3", "H100-SXM", 1024, "fp8-blockwise",
         tp=2, pp=8, vpp=4, ep=64, etp=1, mbs=1, gbs=8192, seq_len=4096, ga=128, measured=(_tf(330, "(330)"),),
         dp_sharding="distributed-optimizer", moe=MoESettings(routing="force-balanced", dropless=True, grouped_gemm=True),
         families=("precision:mb2509-dsv3-h100",), derived=("etp",),
         notes="parenthesised TFLOP/s of the blockwise run; its tokens/s is not printed. " + _MB2509_NOTE),
    _run("mb2509-qwen3-30b-h100-tokendrop", _MB2509, "qwen3-30b-a3b", "H100-SXM", 16, "fp8-tensorwise",
         pp=2, vpp=24, ep=8, etp=1, mbs=2, gbs=512, seq_len=4096, ga=32, measured=(_tok(10494), _tf(241)),
         dp_sharding="distributed-optimizer", moe=MoESettings(routing="unknown", dropless=False, grouped_gemm=True),
         derived=("etp", "precision recipe"),
         notes="'(tokendrop)': capacity factor not printed. The same layout dropless in 25.11 printed 121 TFLOP/s. " + _MB2509_NOTE),
    _run("mb2509-qwen3-235b-h100-tokendrop", _MB2509, "qwen3-235b-a22b", "H100-SXM", 256, "fp8-tensorwise",
         tp=2, pp=8, vpp=4, ep=32, etp=1, mbs=1, gbs=2048, seq_len=4096, ga=128, measured=(_tok(1204), _tf(178)),
         dp_sharding="distributed-optimizer", moe=MoESettings(routing="unknown", dropless=False, grouped_gemm=True),
         derived=("etp", "precision recipe"),
         notes="'(tokendrop)': capacity factor not printed. " + _MB2509_NOTE),
]


def _mz_h100(key: str, *, disp: str, tp: int, ep: int, pp: int, vpp: int, dp: int, mbs: int, ga: int, recompute: str,
             modules: tuple[str, ...], step: float, tf: float, overlap: bool, fsdp: bool, code: str,
             families: tuple[str, ...], note: str = "") -> PublishedRun:
    tokens = 2048 * 4096 / step / 256
    return _run(key, "modelzoo-qwen3", "qwen3-235b-a22b", "H100-SXM", 256, "bf16",
                tp=tp, pp=pp, cp=1, dp=dp, vpp=vpp, ep=ep, etp=1, mbs=mbs, gbs=2048, seq_len=4096, ga=ga,
                measured=(Measured(step, "s/step", f"{step:g}"), _tf(tf),
                          Measured(round(tokens, 1), "tokens/s/GPU", "", derived=True)),
                recompute=recompute, recompute_modules=modules,
                dp_sharding="megatron-fsdp" if fsdp else "distributed-optimizer",
                moe=MoESettings(dispatcher=disp, routing="unknown", dropless=True, grouped_gemm=True, a2a_overlap=overlap),
                families=families, framework=f"megatron-core ({code})",
                notes=("tokens/s/GPU derived = 2048 x 4096 / step / 256. 'norm, act' recompute read as --recompute-modules "
                       "layernorm moe_act. Routing (forced balance or not) not printed for this table; dropless assumed "
                       "(the long-context table states both). dp_sharding 'distributed-optimizer' assumed where FSDP is '/'. "
                       + note))


_MZ_FAM = "layout:qwen3-235b-h100-bf16-s4k-gbs2048"
_MODELZOO_ROWS = [
    _mz_h100("mz-qwen3-235b-h100-tp2pp8ep32", disp="flex-deepep", tp=2, ep=32, pp=8, vpp=4, dp=16, mbs=1, ga=128,
             recompute="selective", modules=("layernorm", "moe_act"), step=19.7, tf=245, overlap=False, fsdp=False,
             code="moe_dev f3e6c5", families=(_MZ_FAM, "overlap:qwen3-235b-h100-tp2pp8ep32"), note="cross-node EP 32."),
    _mz_h100("mz-qwen3-235b-h100-tp2pp8ep32-a2aoverlap", disp="flex-deepep", tp=2, ep=32, pp=8, vpp=4, dp=16, mbs=1, ga=128,
             recompute="selective", modules=("layernorm", "moe_act"), step=17.6, tf=276, overlap=True, fsdp=False,
             code="moe_dev f3e6c5", families=("overlap:qwen3-235b-h100-tp2pp8ep32",),
             note="same layout with '+1f1b overlap' (EP all-to-all hidden behind the other microbatch in 1F1B)."),
    _mz_h100("mz-qwen3-235b-h100-tp2ep8-fsdp", disp="flex-deepep", tp=2, ep=8, pp=1, vpp=1, dp=128, mbs=4, ga=4,
             recompute="full", modules=(), step=17.6, tf=276, overlap=False, fsdp=True,
             code="main 1e057005", families=(_MZ_FAM,),
             note="intra-node EP 8 with Megatron-FSDP (EDP 32), full recompute; 'disable log para norm' as printed."),
    _mz_h100("mz-qwen3-235b-h100-tp2pp32ep8-a2a", disp="alltoall", tp=2, ep=8, pp=32, vpp=3, dp=4, mbs=1, ga=512,
             recompute="selective", modules=("layernorm", "moe_act"), step=24.2, tf=200, overlap=False, fsdp=False,
             code="main 1e057005", families=(_MZ_FAM,),
             note="PP 32 x VPP 3 = 96 chunks for 94 layers: the split is uneven (not printed)."),
    _mz_h100("mz-qwen3-235b-h100-tp4pp8ep8", disp="flex-deepep", tp=4, ep=8, pp=8, vpp=4, dp=8, mbs=1, ga=256,
             recompute="none", modules=(), step=29.0, tf=167, overlap=False, fsdp=False,
             code="main 1e057005", families=(_MZ_FAM,), note="EDP 4; no recompute printed."),
]
for _seq, _cp, _bal, _drop in ((16384, 1, 295, 237), (32768, 2, 335, 277), (65536, 4, 368, 320), (131072, 8, 389, 357)):
    for _routing, _v in (("force-balanced", _bal), ("aux-loss", _drop)):
        _MODELZOO_ROWS.append(_run(
            f"mz-qwen3-235b-h100-s{_seq // 1024}k-cp{_cp}-{'balanced' if _routing == 'force-balanced' else 'dropless'}",
            "modelzoo-qwen3", "qwen3-235b-a22b", "H100-SXM", 256, "bf16",
            tp=4, pp=8, cp=_cp, vpp=4, ep=8, etp=None, mbs=None, gbs=256, seq_len=_seq,
            measured=(_tf(_v, f"{_v}" + (" (forced balance)" if _routing == "force-balanced" else " (dropless)")),),
            recompute="selective", recompute_modules=("layernorm", "moe"), dp_sharding="distributed-optimizer", offload="none",
            moe=MoESettings(dispatcher="flex-deepep", routing=_routing, dropless=True, grouped_gemm=True, a2a_overlap=False),
            families=(f"routing:qwen3-235b-h100-s{_seq // 1024}k",),
            notes=("long-context table: 32 nodes, TP 4, CP as printed; PP 8, VPP 4, EP 8 from the printed command "
                   "(A2A_OVERLAP=0, OPTIMIZER_OFFLOAD=0, --recompute-modules layernorm moe). MBS and ETP not printed. "
                   "'dropless' rows route with the model's router (aux loss) instead of forced balance."),
        ))
_MODELZOO_ROWS += [
    _run("mz-qwen3-235b-gb200-bf16", "modelzoo-qwen3", "qwen3-235b-a22b", "GB200", 256, "bf16",
         tp=1, pp=8, cp=1, vpp=1, ep=8, etp=None, mbs=1, gbs=8192, seq_len=4096, measured=(_tf(750),),
         recompute="none", dp_sharding="distributed-optimizer", offload="none",
         moe=MoESettings(dispatcher="flex-hybridep", routing="force-balanced", dropless=True, grouped_gemm=True, a2a_overlap=False),
         notes="64 GB200 nodes of 4 GPUs; command: HybridEP, TE CUDA graphs on attn/router/preprocess, no recompute flag."),
    _run("mz-qwen3-235b-gb200-mxfp8", "modelzoo-qwen3", "qwen3-235b-a22b", "GB200", 256, "mxfp8",
         tp=1, pp=4, cp=1, vpp=6, ep=64, etp=None, mbs=3, gbs=3072, seq_len=4096, measured=(_tf(919),),
         recompute="selective", recompute_modules=("moe_act", "layernorm"), dp_sharding="distributed-optimizer",
         offload="fine-grained activation offloading of expert_fc1 and moe_act",
         moe=MoESettings(dispatcher="flex-hybridep", routing="force-balanced", dropless=True, grouped_gemm=True, a2a_overlap=True),
         notes="'activation offloading required' as printed; HybridEP, A2A overlap, TE CUDA graphs."),
    _run("mz-qwen3-235b-gb200-mxfp8-s128k-cp4", "modelzoo-qwen3", "qwen3-235b-a22b", "GB200", 128, "mxfp8",
         tp=4, pp=4, cp=4, vpp=12, ep=32, etp=None, mbs=1, gbs=1024, seq_len=131072, measured=(_tf(1150),),
         recompute="selective", recompute_modules=("moe_act", "layernorm"), dp_sharding="distributed-optimizer", offload="none",
         moe=MoESettings(dispatcher="flex-hybridep", routing="force-balanced", dropless=True, grouped_gemm=True, a2a_overlap=False),
         notes="32 GB200 nodes of 4 GPUs; 128k context."),
]

_SK = "mbridge-skills"
_SK_Q30_NOTE = ("16 x H100, BF16, sequence 4096, TP1 PP1 CP1 EP16, MBS1 GBS1024, forced-balanced routing, flex + "
                "HybridEP, TE CUDA graphs on moe_router and moe_preprocess, delayed wgrad off; tokens/s/GPU derived = "
                "1024 x 4096 / step / 16")


def _sk_q30(key: str, step: str, tf: float, overlap: bool, families: tuple[str, ...], note: str,
            mem: Measured | None = None) -> PublishedRun:
    return _run(key, _SK, "qwen3-30b-a3b", "H100-SXM", 16, "bf16", tp=1, pp=1, cp=1, vpp=1, ep=16, etp=1, mbs=1, gbs=1024,
                seq_len=4096, ga=64, measured=(Measured(float(step), "s/step", step), _tf(tf, f"{tf}"),
                                               Measured(round(1024 * 4096 / float(step) / 16, 1), "tokens/s/GPU", "", derived=True)),
                dp_sharding="distributed-optimizer", offload="none", peak_memory=mem, derived=("etp",),
                moe=MoESettings(dispatcher="flex-hybridep", routing="force-balanced", dropless=True, grouped_gemm=True,
                                a2a_overlap=overlap),
                families=families, notes=note + ". " + _SK_Q30_NOTE)


_SK_ROWS = [
    _sk_q30("mbskill-qwen3-30b-h100-hybridep-no-overlap", "24.7138", 244.039, False, ("overlap:mbskill-qwen3-30b-h100",),
            "EP overlap off (steady iterations 5-20), the controlled A/B of 2026-07-25"),
    _sk_q30("mbskill-qwen3-30b-h100-hybridep-overlap", "20.9920", 287.305, True, ("overlap:mbskill-qwen3-30b-h100",),
            "plain EP overlap on, independent validation (iterations 41-50); the search run printed 21.0725 s / 286.208",
            _gib(62.166)),
    _sk_q30("mbskill-qwen3-30b-h100-hybridep-canonical", "20.14729", 299.352, True, (),
            "final canonical recipe: EP overlap plus HybridEP tuning (permute fusion, 32 SMs, 64-token combine chunks); "
            "more than one knob differs from the A/B rows", _gib(62.166)),
]
_MOON_NOTE = ("8 x H100 80GB, BF16, sequence 4096, MBS1 GBS4, TP2 PP1 CP1 EP8, mock data, 20 steps; only the selective "
              "recompute modules change between rows; time and TFLOP/s are means over iterations 11-20; peak is "
              "max allocated after iteration 2 as printed (GB). Bridge 600d069b, MCore 24bad8e6")
for _mods, _ms, _sk_tf, _mem in (((), 457.18, 77.50, 36.618), (("core_attn",), 474.80, 74.44, 36.614),
                               (("mla_up_proj",), 480.89, 73.72, 35.902), (("mla_up_proj", "mlp"), 496.73, 71.50, 35.917),
                               (("moe_act",), 466.26, 75.50, 35.941), (("layernorm", "moe_act"), 506.53, 70.27, 35.949)):
    _SK_ROWS.append(_run(
        f"mbskill-moonlight-16b-h100-recompute-{'-'.join(_mods) or 'none'}", _SK, "moonlight-16b-a3b", "H100-SXM", 8, "bf16",
        tp=2, pp=1, cp=1, vpp=1, ep=8, etp=None, mbs=1, gbs=4, seq_len=4096, ga=1,
        measured=(Measured(_ms / 1000.0, "s/step", f"{_ms} ms"), _tf(_sk_tf, f"{_sk_tf}")),
        recompute="selective" if _mods else "none", recompute_modules=_mods, dp_sharding="unknown", offload="none",
        peak_memory=_gb(_mem), moe=MoESettings(routing="unknown", dropless=True, grouped_gemm=True),
        families=("recompute:mbskill-moonlight-16b-h100",), notes=_MOON_NOTE))
for _mods, _sk_tf, _mem in ((("mlp",), 593.6, 55.6), (("mlp", "core_attn"), 586.8, 55.6)):
    _SK_ROWS.append(_run(
        f"mbskill-llama3-70b-h100-sft-recompute-{'-'.join(_mods)}", _SK, "llama3-70b", "H100-SXM", 32, "fp8-tensorwise",
        tp=4, pp=4, cp=1, dp=2, vpp=5, mbs=1, gbs=32, seq_len=4096, ga=16, measured=(_tf(_sk_tf, f"{_sk_tf}"),),
        recompute="selective", recompute_modules=_mods, dp_sharding="unknown", offload="none", peak_memory=_gb(_mem),
        families=("recompute:mbskill-llama3-70b-h100-sft",),
        notes=("historical measurement from Bridge PR #3107: Llama 3 70B SFT (fine-tuning data) on 32 H100 80GB, FP8 "
               "current scaling; the same table's core_attn rows (~704 TFLOP/s) ran out of memory on rank 0 and are "
               "not rows here; the source warns it has no matched no-recompute row")))

_DSV3_GB200 = "mlm-dsv3-gb200"
_DSV3_GB200_NOTE = ("256 GB200, TP1 PP8 VPP4 EP32, MBS1 GBS2048, sequence 4096, PP layout 'Et|(tt|)*30L' (no MTP layer), "
                    "forced load balance, MXFP8 with FP8 parameter gather, BF16 optimizer states; each row is one step "
                    "of the published optimisation history (same layout, software changed)")


def _dsv3_gb200(key: str, tf: str, disp: str, modules: tuple[str, ...], families: tuple[str, ...], note: str) -> PublishedRun:
    return _run(key, _DSV3_GB200, "deepseek-v3", "GB200", 256, "mxfp8",
                tp=1, pp=8, cp=1, vpp=4, ep=32, etp=1, mbs=1, gbs=2048, seq_len=4096, measured=(_tf(float(tf), tf),),
                recompute="selective", recompute_modules=modules, dp_sharding="distributed-optimizer", offload="none",
                moe=MoESettings(dispatcher=disp, routing="force-balanced", dropless=True, grouped_gemm=True, permute_fusion=True),
                families=families, notes=note + ". " + _DSV3_GB200_NOTE)


_DSV3_GB200_ROWS = [
    _dsv3_gb200("dsv3-gb200-baseline-alltoall", "494.46", "alltoall", ("mlp", "mla_up_proj"), (),
                "baseline: all-to-all (NCCL) dispatcher, recompute of dense-layer MLP and MLA up-projection"),
    _dsv3_gb200("dsv3-gb200-alltoall-routerfusion", "540.00", "alltoall", ("mlp", "mla_up_proj"),
                ("dispatcher:dsv3-gb200-step3",), "after permute and router fusion, still all-to-all"),
    _dsv3_gb200("dsv3-gb200-deepep", "566.07", "flex-deepep", ("mlp", "mla_up_proj"),
                ("dispatcher:dsv3-gb200-step3",), "next step: only the dispatcher changed to DeepEP"),
    _dsv3_gb200("dsv3-gb200-deepep-tuned", "829.93", "flex-deepep", ("mlp", "moe_act"),
                ("dispatcher:dsv3-gb200-step10",),
                "DeepEP after recompute change (mlp, moe_act), CUDA graphs, CPU-side work, PDL and shared-expert graphs"),
    _dsv3_gb200("dsv3-gb200-hybridep", "943.56", "flex-hybridep", ("mlp", "moe_act"),
                ("dispatcher:dsv3-gb200-step10",), "next step: only the dispatcher changed to HybridEP (NVL72 MNNVL)"),
    _dsv3_gb200("dsv3-gb200-final", "970.01", "flex-hybridep", ("mlp", "moe_act"), (),
                "final: plus CPU-side work and quantisation fused into normalisation (cuDNN 9.14)"),
]

_DSV3_REPORT = [
    _run("dsv3-report-h800-pretrain", "dsv3-report", "deepseek-v3", "H800", 2048, "fp8-blockwise",
         tp=1, pp=16, cp=1, vpp=None, ep=64, etp=1, mbs=None, gbs=15360, seq_len=4096,
         measured=(Measured(180_000, "GPU-hours/1e12 tokens", "180K H800 GPU hours per trillion tokens"),
                   Measured(1543.2, "tokens/s/GPU", "", derived=True)),
         recompute="selective", recompute_modules=("rmsnorm", "mla_up_proj"), dp_sharding="zero1", offload="none",
         moe=MoESettings(dispatcher="custom", routing="aux-loss-free", dropless=True, grouped_gemm=None),
         derived=("dp", "tokens/s/GPU"),
         notes="2048 H800 (8 per node, NVLink + 8 x 400G IB). DualPipe bidirectional pipeline schedule (not 1F1B), "
               "16-way PP, 64-way EP over 8 nodes, ZeRO-1 DP, no TP. Custom all-to-all kernels with 20 SMs; routing "
               "limited to 4 nodes per token. Batch ramps 3072 -> 15360 over the first 469B tokens, then 15360 "
               "(gbs is the plateau). One MTP module trained alongside. Recomputes RMSNorm and MLA up-projections; "
               "EMA in CPU memory. tokens/s/GPU derived = 1e12 / (180000 x 3600). Includes every inefficiency of a "
               "production run (failures, evaluation), so it bounds the steady state from below."),
]

_TT = "torchtitan-202412"
_TT_NOTE = ("Grand Teton H100 96GB HBM2e at 500 W; TPS/GPU read at step 90; seq_len 8192 from the torchtitan "
            "config of the time (not printed) for tables 1, 3, 4, 5; Float8 = torchao dynamic tensorwise scaling on "
            "nn.Linear; torch.compile as printed")
_TT_ROWS = [
    _run("tt-llama31-8b-8gpu-bf16", _TT, "llama3-8b", "H100-96G-500W", 8, "bf16",
         dp=8, mbs=2, gbs=16, seq_len=8192, measured=(_tok(6667, "6,667"),), recompute="selective",
         dp_sharding="fsdp2", offload="none", peak_memory=_gib(77.0), derived=("seq_len",),
         families=("precision:tt-llama31-8b-8gpu", "scale:tt-llama31-8b-bf16"),
         notes="Table 1 'FSDP + torch.compile' (eager FSDP printed 5,762 at 82.4 GiB). " + _TT_NOTE),
    _run("tt-llama31-8b-8gpu-fp8", _TT, "llama3-8b", "H100-96G-500W", 8, "fp8-tensorwise",
         dp=8, mbs=2, gbs=16, seq_len=8192, measured=(_tok(8532, "8,532"),), recompute="selective",
         dp_sharding="fsdp2", offload="none", peak_memory=_gib(76.8), derived=("seq_len",),
         families=("precision:tt-llama31-8b-8gpu",), notes="Table 1 'FSDP + torch.compile + Float8'. " + _TT_NOTE),
    _run("tt-llama31-8b-128gpu-bf16", _TT, "llama3-8b", "H100-96G-500W", 128, "bf16",
         dp=128, mbs=2, gbs=256, seq_len=8192, measured=(_tok(6514, "6,514"),), recompute="selective",
         dp_sharding="fsdp2", offload="none", peak_memory=_gib(62.0), derived=("seq_len",),
         families=("precision:tt-llama31-8b-128gpu", "scale:tt-llama31-8b-bf16"),
         notes="Table 3 'FSDP + torch.compile' (eager 5,605). " + _TT_NOTE),
    _run("tt-llama31-8b-128gpu-fp8", _TT, "llama3-8b", "H100-96G-500W", 128, "fp8-tensorwise",
         dp=128, mbs=2, gbs=256, seq_len=8192, measured=(_tok(8380, "8,380"),), recompute="selective",
         dp_sharding="fsdp2", offload="none", peak_memory=_gib(61.8), derived=("seq_len",),
         families=("precision:tt-llama31-8b-128gpu",), notes="Table 3 '+ Float8'. " + _TT_NOTE),
]
for _fs, _cp, _seq, _tps, _mem in ((8, 1, 32768, 3890, 83.9), (4, 2, 65536, 2540, 84.2), (2, 4, 131072, 1071, 84.0),
                                   (1, 8, 262144, 548, 84.5)):
    _TT_ROWS.append(_run(f"tt-llama31-8b-8gpu-fp8-cp{_cp}", _TT, "llama3-8b", "H100-96G-500W", 8, "fp8-tensorwise",
                         cp=_cp, dp=_fs, mbs=1, gbs=_fs, seq_len=_seq, measured=(_tok(_tps, f"{_tps:,}"),),
                         recompute="full", dp_sharding="fsdp2", offload="none", peak_memory=_gib(_mem),
                         notes="Table 2 (FSDP + CP + torch.compile + Float8, local batch 1, full AC). " + _TT_NOTE))
_TT_ROWS += [
    _run("tt-llama31-70b-256gpu-fp8", _TT, "llama3-70b", "H100-96G-500W", 256, "fp8-tensorwise",
         tp=8, dp=32, mbs=16, gbs=512, seq_len=8192, measured=(_tok(829),), recompute="full", dp_sharding="fsdp2",
         offload="none", peak_memory=_gib(71.9), derived=("seq_len",), families=("overlap:tt-llama31-70b-256gpu",),
         notes="Table 4 '2D' (FSDP 32 x TP 8, local batch 16 per DP rank). " + _TT_NOTE),
    _run("tt-llama31-70b-256gpu-fp8-asynctp", _TT, "llama3-70b", "H100-96G-500W", 256, "fp8-tensorwise",
         tp=8, dp=32, mbs=16, gbs=512, seq_len=8192, measured=(_tok(876),), recompute="full", dp_sharding="fsdp2",
         offload="none", peak_memory=_gib(67.6), derived=("seq_len",), families=("overlap:tt-llama31-70b-256gpu",),
         notes="Table 4 '2D + AsyncTP' (TP communication overlapped with the GEMMs). " + _TT_NOTE),
    _run("tt-llama31-405b-512gpu-1f1b", _TT, "llama3.1-405b", "H100-96G-500W", 512, "fp8-tensorwise",
         tp=8, pp=8, dp=8, vpp=1, mbs=None, gbs=256, seq_len=8192, measured=(_tok(100),), recompute="full",
         dp_sharding="fsdp2", offload="none", peak_memory=_gib(82.5), derived=("seq_len",),
         families=("schedule:tt-llama31-405b-512gpu",),
         notes="Table 5 '1F1B' (FSDP 8, TP 8, PP 8, local batch 32, async TP on); microbatch count not printed. " + _TT_NOTE),
    _run("tt-llama31-405b-512gpu-interleaved", _TT, "llama3.1-405b", "H100-96G-500W", 512, "fp8-tensorwise",
         tp=8, pp=8, dp=8, vpp=None, mbs=None, gbs=256, seq_len=8192, measured=(_tok(128),), recompute="full",
         dp_sharding="fsdp2", offload="none", peak_memory=_gib(72.7), derived=("seq_len",),
         families=("schedule:tt-llama31-405b-512gpu",),
         notes="Table 5 'Interleaved 1F1B'; stages per rank not printed. " + _TT_NOTE),
]
for _fs, _cp, _seq, _tps, _mem in ((8, 1, 32768, 76, 75.3), (4, 2, 65536, 47, 75.9), (2, 4, 131072, 31, 77.1),
                                   (1, 8, 262144, 16, 84.9)):
    _TT_ROWS.append(_run(f"tt-llama31-405b-512gpu-cp{_cp}", _TT, "llama3.1-405b", "H100-96G-500W", 512, "fp8-tensorwise",
                         tp=8, pp=8, cp=_cp, dp=_fs, vpp=1, mbs=None, gbs=8 * _fs, seq_len=_seq,
                         measured=(_tok(_tps),), recompute="full", dp_sharding="fsdp2", offload="none",
                         peak_memory=_gib(_mem), derived=("gbs",),
                         notes="Table 6 (TP 8, PP 8 with 1F1B, local batch 8, Float8, async TP). " + _TT_NOTE))

_TTA = "torchtitan-asynctp-202506"
_TTA_ROWS: list[PublishedRun] = []
for _model, _gpus, _tp, _dp, _lbs, _rc, _vals in (
    ("llama3-70b", 256, 8, 32, 16, "full", (("bf16", 597.3, 652.4), ("fp8-tensorwise", 809.8, 942.4), ("fp8-rowwise", 599.6, 624.8))),
    ("llama3-8b", 64, 8, 8, 12, "selective", (("bf16", 4378, 4809.4), ("fp8-tensorwise", 5078.1, 5570.1), ("fp8-rowwise", 3708.5, 3914.9))),
):
    _size = "70b" if _model == "llama3-70b" else "8b"
    for _prec, _van, _asy in _vals:
        for _mode, _tps_v in (("vanilla", _van), ("asynctp", _asy)):
            _TTA_ROWS.append(_run(
                f"tta-llama3-{_size}-{_gpus}gpu-{_prec}-{_mode}", _TTA, _model, "H100-96G-500W", _gpus, _prec,
                tp=_tp, dp=_dp, mbs=_lbs, gbs=_dp * _lbs, seq_len=8192, measured=(_tok(_tps_v, f"{_tps_v:g}"),),
                recompute=_rc, recompute_modules=("per-op SAC",) if _rc == "selective" else (), dp_sharding="fsdp2",
                offload="none", derived=("seq_len", "gbs"),
                families=(f"precision:tta-llama3-{_size}-{_mode}", f"overlap:tta-llama3-{_size}-{_prec}"),
                notes=("FSDP x TP, torch.compile, local batch as printed; the table header says tokens/sec, read as "
                       "torchtitan's per-GPU TPS; seq_len 8192 from torchtitan's config of the time. Grand Teton "
                       "H100 96GB HBM2e at 500 W. The source notes the vanilla-TP rowwise baseline is slow "
                       "(torchtitan issue 1207)."),
            ))

_NEMO2407 = "nemo-24.07"
_NEMO2407_NOTE = ("NeMo 24.07 FP8 table (DGX-H100); FP8 recipe not printed -- Transformer Engine's delayed scaling was "
                  "NeMo's default then")
_NEMO2407_ROWS = [
    _run("nemo2407-llama2-7b-h100", _NEMO2407, "llama2-7b", "H100-SXM", 8, "fp8-delayed",
         mbs=1, gbs=128, seq_len=4096, measured=(_tok(16934), _tf(780)), derived=("precision recipe",), notes=_NEMO2407_NOTE),
    _run("nemo2407-llama2-70b-h100", _NEMO2407, "llama2-70b", "H100-SXM", 64, "fp8-delayed",
         tp=4, pp=4, vpp=20, mbs=1, gbs=128, seq_len=4096, measured=(_tok(1728), _tf(768)),
         derived=("precision recipe",), notes=_NEMO2407_NOTE),
    _run("nemo2407-llama3-8b-h100", _NEMO2407, "llama3-8b", "H100-SXM", 8, "fp8-delayed",
         cp=2, mbs=1, gbs=128, seq_len=8192, measured=(_tok(12273), _tf(711)), derived=("precision recipe",), notes=_NEMO2407_NOTE),
    _run("nemo2407-llama3-70b-h100", _NEMO2407, "llama3-70b", "H100-SXM", 64, "fp8-delayed",
         tp=4, pp=4, cp=2, vpp=5, mbs=1, gbs=128, seq_len=8192, measured=(_tok(1524), _tf(734)),
         derived=("precision recipe",), notes=_NEMO2407_NOTE),
]

_LS_H100_ROWS: list[PublishedRun] = []
for _k, _gpus, _gbs, _nocp, _tp, _pp, _dp, _cp, _tfv in (
    (4, 4, 1024, "768", 1, 1, 4, 1, "768"), (8, 8, 512, "730", 1, 2, 4, 1, "730"), (16, 16, 256, "660", 2, 1, 8, 1, "660"),
    (32, 32, 128, "595", 2, 1, 8, 2, "610"), (64, 64, 64, "534", 4, 1, 8, 2, "574"), (128, 128, 32, "424", 4, 1, 8, 4, "555"),
    (256, 256, 16, "392", 4, 1, 8, 8, "549"), (512, 512, 8, "104", 8, 1, 4, 16, "549"), (1024, 1024, 4, "26.5", 8, 1, 4, 32, "536"),
):
    _LS_H100_ROWS.append(_run(
        f"nemo-longseq-llama2-7b-h100-{_k}k", "nemo-longseq-h100", "llama2-7b", "H100-SXM", _gpus, "fp8-delayed",
        tp=_tp, pp=_pp, cp=_cp, dp=_dp, vpp=None, mbs=None, gbs=_gbs, seq_len=_k * 1024, measured=(_tf(float(_tfv), _tfv),),
        derived=("precision recipe",),
        notes=(f"with-CP layout as printed; the same table prints {_nocp} TFLOPS/GPU for the best layout without CP "
               "(that layout not printed). NeMo 24.03.01; FP8 recipe not printed (delayed scaling was the default). "
               "MBS and recompute not printed."),
    ))

_LS_B200_ROWS: list[PublishedRun] = []
for _k, _gpus, _gbs, _nocp, _tp, _pp, _pdp, _cp, _tfv in (
    (8, 8, 512, "1,671", 1, 1, 2, 1, "1,671"), (16, 16, 256, "1,717", 1, 1, 4, 1, "1,717"), (32, 32, 128, "1,549", 1, 1, 4, 2, "1,624"),
    (64, 64, 64, "1,481", 1, 1, 4, 4, "1,600"), (128, 128, 32, "1,438", 2, 1, 4, 4, "1,588"), (256, 256, 16, "1,162", 4, 1, 4, 4, "1,590"),
    (512, 512, 8, "607", 4, 1, 4, 8, "1,619"), (1024, 1024, 4, "- (does not fit without CP)", 4, 1, 4, 16, "1,608"),
):
    _LS_B200_ROWS.append(_run(
        f"nemo-longseq-llama3-8b-b200-{_k}k", "nemo-longseq-b200", "llama3-8b", "B200", _tp * _pp * _pdp * _cp,
        "fp8-tensorwise", tp=_tp, pp=_pp, cp=_cp, dp=_pdp, vpp=None, mbs=None, gbs=_gbs, seq_len=_k * 1024,
        measured=(_tf(float(_tfv.replace(",", "")), _tfv),), derived=("gpus", "precision recipe"),
        notes=(f"the table's '# of GPUs' column prints {_gpus}, four times TP x PP x DP x CP as printed; the printed DP "
               "is the one consistent with the batch (at 512k and 1024k the batch of 8 and 4 sequences could not "
               f"fill {_gpus} // (TP x CP) replicas), so gpus is derived from the printed degrees. Best layout without "
               f"CP printed at {_nocp} TFLOPS/GPU (layout not printed). NeMo 25.04.rc2; FP8 recipe not printed (NeMo "
               "25.04 used per-tensor current scaling). MBS and recompute not printed."),
    ))

_AM = "automodel-perf"
_AM_NOTE = ("NeMo AutoModel H100 BF16 table; 'LBS' local batch per DP rank, GA counts local batches, MBS the "
            "pipeline microbatch; mock data and fake balanced gate; recompute not printed")
_AM_ROWS = [
    _run("am-dsv3-h100-1024gpu", _AM, "deepseek-v3", "H100-SXM", 1024, "bf16",
         tp=1, pp=4, cp=1, dp=256, vpp=8, ep=64, etp=1, mbs=1, gbs=8192, seq_len=4096,
         measured=(Measured(37.87, "s/step", "37.87"), _tf(216), _tok(865)), dp_sharding="fsdp2",
         moe=MoESettings(dispatcher="deepep", routing="force-balanced", dropless=True, grouped_gemm=True),
         families=("scale:dsv3-h100-automodel",), derived=("etp",),
         notes="FSDP 256, LBS 8, GA 4; TE + DeepEP kernels. " + _AM_NOTE),
    _run("am-dsv3-h100-256gpu", _AM, "deepseek-v3", "H100-SXM", 256, "bf16",
         tp=1, pp=4, cp=1, dp=64, vpp=8, ep=64, etp=1, mbs=1, gbs=512, seq_len=4096,
         measured=(Measured(8.18, "s/step", "8.18"), _tf(250), _tok(1002, "1,002")), dp_sharding="fsdp2",
         moe=MoESettings(dispatcher="deepep", routing="force-balanced", dropless=True, grouped_gemm=True),
         families=("scale:dsv3-h100-automodel",), derived=("etp",),
         notes="FSDP 64, LBS 8, GA 1 (global batch differs from the 1024-GPU row). " + _AM_NOTE),
    _run("am-kimi-k2-h100-256gpu", _AM, "kimi-k2", "H100-SXM", 256, "bf16",
         tp=1, pp=8, cp=1, dp=32, vpp=4, ep=32, etp=1, mbs=1, gbs=512, seq_len=4096,
         measured=(Measured(8.86, "s/step", "8.86"), _tf(189), _tok(924)), dp_sharding="fsdp2",
         moe=MoESettings(dispatcher="deepep", routing="force-balanced", dropless=True, grouped_gemm=True),
         derived=("etp",), notes="FSDP 32, LBS 8, GA 2. " + _AM_NOTE),
    _run("am-qwen3-30b-h100-8gpu", _AM, "qwen3-30b-a3b", "H100-SXM", 8, "bf16",
         tp=1, pp=1, cp=1, dp=8, vpp=1, ep=8, etp=1, mbs=4, gbs=512, seq_len=4096, ga=16,
         measured=(Measured(21.773, "s/step", "21.773"), _tf(277), _tok(12040, "12,040")), dp_sharding="fsdp2",
         moe=MoESettings(dispatcher="deepep", routing="force-balanced", dropless=True, grouped_gemm=True),
         derived=("etp",), notes="FSDP 8, LBS 4, GA 16. " + _AM_NOTE),
    _run("am-llama3-70b-h100-64gpu-cp2", _AM, "llama3-70b", "H100-SXM", 64, "bf16",
         tp=1, pp=1, cp=2, dp=32, vpp=1, mbs=1, gbs=128, seq_len=8192, ga=4,
         measured=(Measured(18.90, "s/step", "18.90"), _tf(389), _tok(866.77, "866.77")), dp_sharding="fsdp2",
         notes="FSDP 32 x CP 2, LBS 1, GA 4; TE + FSDP2 prefetch. " + _AM_NOTE),
]

_TORCHAO_ROWS = [
    _run(f"torchao-llama4-scout-gb200-{_p}", "torchao-moe-training", "llama4-scout", "GB200", 256, _p,
         tp=1, pp=1, cp=1, dp=256, vpp=1, ep=16, etp=1, mbs=1, gbs=256, seq_len=8192, measured=(_tok(_v),),
         recompute="none", dp_sharding="fsdp2", offload="none",
         moe=MoESettings(dispatcher="alltoall", routing="learned", dropless=True, grouped_gemm=True),
         families=("precision:torchao-llama4-scout-gb200",), derived=("gbs", "dispatcher"),
         notes=("64 GB200 nodes x 4 = 256 GPUs per the configuration text, while the table's column says 512 GPUs; "
                "tokens/s read as per GPU (torchtitan's TPS). FSDP 256 on dense parts, 64 on routed experts, EP 16; "
                "AC none; torch.compile. MXFP8 on grouped GEMMs and all linears except output, router gate, wk, wv. "
                "Dispatcher: torchtitan's all-to-all (not printed)."))
    for _p, _v in (("bf16", 6169), ("mxfp8", 7401))
]

_PAI = "pai-megatron-patch-issues"
_PAI_NOTE = ("a user's measurement in a GitHub issue (DLC H800 cluster; NIC bandwidth not printed): the repository's "
             "Qwen3 example script with --moe-router-force-load-balancing, --overlap-grad-reduce "
             "--overlap-param-gather, --manual-gc, --cross-entropy-fusion-impl te, CUDA graphs removed; dispatcher, "
             "expert TP and the uneven pipeline split of 94 layers over PP x VPP chunks not printed")
_PAI_ROWS = [
    _run(f"pai-qwen3-235b-h800-tp{_tp}pp32ep8-mbs{_mbs}-{_name}", _PAI, "qwen3-235b-a22b", "H800", 256, "bf16",
         tp=_tp, pp=32, cp=1, vpp=3, ep=8, etp=1, mbs=_mbs, gbs=_gbs, seq_len=4096,
         measured=(Measured(_step, "s/step", f"{_step}"), _tok(_tgs, f"{_tgs}")),
         recompute=_rec, recompute_modules=_mods, dp_sharding="distributed-optimizer", offload="none",
         moe=MoESettings(routing="force-balanced", dropless=True, grouped_gemm=True),
         families=(f"layout:qwen3-235b-h800-pai-gbs{_gbs}",), derived=("etp",),
         notes=(f"'recompute={_name}' as printed. etp 1: at tp 2 a pipeline rank's 8 GPUs hold ep 8 only with "
                "etp 1 (Megatron-Core: etp x ep divides tp x dp), and issue #643's example prints expert TP 1. "
                + _PAI_NOTE))
    for _tp, _mbs, _gbs, _name, _rec, _mods, _step, _tgs in (
        (1, 4, 4096, "full", "full", (), 42.537, 1540.68),
        (2, 4, 4096, "full", "full", (), 43.495, 1506.76),
        (2, 1, 2048, "select", "selective", ("moe_act", "layernorm"), 22.42, 1461.56),
        (1, 1, 2048, "moe", "selective", ("moe", "layernorm"), 22.946, 1428.04))
] + [
    _run(f"pai-qwen3-30b-h800-tp1pp{_pp}ep{_ep}", _PAI, "qwen3-30b-a3b", "H800", 16, "bf16",
         tp=1, pp=_pp, cp=1, vpp=None, ep=_ep, etp=1, mbs=1, gbs=_gbs, seq_len=8192,
         measured=(Measured(_step, "s/step", f"{_step}"), _tok(_tgs, f"{_tgs}")),
         recompute="none", dp_sharding="distributed-optimizer", offload="none",
         moe=MoESettings(routing="aux-loss", dropless=False, capacity_factor=1.0, grouped_gemm=True),
         notes=("issue #643: expert TP 1, MBS 1, no recompute, --moe-expert-capacity-factor 1.0 (tokens dropped), "
                "CUDA graphs removed; GBS differs between the rows (128 and 256); interleaving not printed. "
                + _PAI_NOTE))
    for _pp, _ep, _gbs, _step, _tgs in ((2, 8, 128, 10.361, 6325), (4, 4, 256, 20.992, 6244))
]

RUNS: tuple[PublishedRun, ...] = tuple(
    _LLAMA3 + _MB2604_ROWS + _MB2511_ROWS + _MB2509_ROWS + _SK_ROWS + _MODELZOO_ROWS + _DSV3_GB200_ROWS + _DSV3_REPORT + _TT_ROWS
    + _TTA_ROWS + _NEMO2407_ROWS + _LS_H100_ROWS + _LS_B200_ROWS + _AM_ROWS + _TORCHAO_ROWS + _PAI_ROWS
)
"""Every published run, in source order."""


# --------------------------------------------------------------------------------------------
# Kernel measurements
# --------------------------------------------------------------------------------------------

_DG = "deepgemm-readme"
_DG_NOTE = "H800 SXM5, FP8 E4M3 with 1x128 / 128x128 scaling and two-level accumulation; 2 m n k per GEMM"
GROUPED_GEMM: tuple[GemmMeasurement, ...] = tuple(
    [GemmMeasurement(_DG, "H800", "fp8-blockwise", "dense", 1, m, n, k, t, "TFLOP/s", f"{t} TFLOPS", notes=_DG_NOTE)
     for m, n, k, t in (
         (64, 2112, 7168, 206), (64, 24576, 1536, 289), (64, 32768, 512, 219), (64, 7168, 16384, 336),
         (64, 4096, 7168, 287), (64, 7168, 2048, 295), (128, 2112, 7168, 352), (128, 24576, 1536, 535),
         (128, 32768, 512, 358), (128, 7168, 16384, 645), (128, 4096, 7168, 533), (128, 7168, 2048, 510),
         (4096, 2112, 7168, 1127), (4096, 24576, 1536, 1212), (4096, 32768, 512, 775), (4096, 7168, 16384, 1520),
         (4096, 4096, 7168, 1410), (4096, 7168, 2048, 1168))]
    + [GemmMeasurement(_DG, "H800", "fp8-blockwise", "grouped-contiguous", g, g * mpg, n, k, t, "TFLOP/s", f"{t} TFLOPS",
                       notes="contiguous layout (training forward / prefill): groups x M per group rows. " + _DG_NOTE)
       for g, mpg, n, k, t in ((4, 8192, 4096, 7168, 1346), (4, 8192, 7168, 2048, 1214), (8, 4096, 4096, 7168, 1346),
                               (8, 4096, 7168, 2048, 1214))]
    + [GemmMeasurement(_DG, "H800", "fp8-blockwise", "grouped-masked", g, g * mpg, n, k, t, "TFLOP/s", f"{t} TFLOPS",
                       notes="masked layout (decoding with CUDA graphs): M per group is the padded row count. " + _DG_NOTE)
       for g, mpg, n, k, t in ((1, 1024, 4096, 7168, 1233), (1, 1024, 7168, 2048, 925), (2, 512, 4096, 7168, 1040),
                               (2, 512, 7168, 2048, 916), (4, 256, 4096, 7168, 932), (4, 256, 7168, 2048, 815))]
    + [GemmMeasurement("torchao-moe-training", "B200", dt, "grouped-fwd-bwd", g, 128000, n, k, t, "us", f"{t:.2f}",
                       passes="fwd+bwd",
                       notes=("torch._grouped_mm (bf16) vs torchao MXFP8 scaled grouped GEMM autograd function, forward "
                              "and both backward GEMMs, quantisation included for MXFP8; B200; torch 2.10a f6de195, "
                              f"torchao 0.14 c7b8e13; {shape} shapes, G = local experts"))
       for shape, n, k, rows in (
           ("Llama4 Scout", 8192, 5120, ((1, 43140.20, 23867.00), (2, 39487.60, 23359.00), (4, 39189.20, 23945.50),
                                         (8, 37700.70, 22170.60))),
           ("DeepSeek-V3", 2048, 7168, ((1, 13064.80, 10996.00), (2, 14900.20, 11283.40), (4, 15823.60, 9919.36),
                                        (8, 14966.80, 10397.20))))
       for g, bf, mx in rows for dt, t in (("bf16", bf), ("mxfp8", mx))]
    + [GemmMeasurement("torchao-moe-training", "B200", dt, "moe-layer", 8, 131072, n, k, t * 1000.0, "us", f"{t:.3f} ms",
                       passes="moe-layer fwd+bwd",
                       notes=f"one {name} MoE layer (8 local experts, local batch 16 x 8192 tokens), forward + backward, "
                             "routing/permutation/quantisation included; B200")
       for name, n, k, bf, mx in (("Llama4 16e", 8192, 5120, 275.270, 192.420), ("DeepSeek-V3", 2048, 7168, 92.032, 80.182))
       for dt, t in (("bf16", bf), ("mxfp8", mx))]
    + [GemmMeasurement("ml-engineering-mamf", gpu, dt, "dense-max", 1, m, n, k, t, "TFLOP/s", f"{t:g}",
                       notes=f"maximum achievable matmul FLOPS over a shape search; theory {theory}; best shape {m}x{n}x{k}; {note}")
       for gpu, dt, t, theory, m, n, k, note in (
           ("A100-80G", "bf16", 271.2, 312, 1024, 10240, 5120, "A100 SXM (memory size not printed), torch 2.6.0+cu126"),
           ("H100-SXM", "bf16", 794.5, 989, 2048, 2048, 13312, "torch 2.7.0+cu126; the table says H200 is the same"),
           ("B200", "bf16", 1745.0, 2250, 1792, 16128, 3072, "B200 SXM, torch 2.7.1+cu128"),
           ("GB200", "bf16", 1822.0, 2500, 4096, 9728, 2048, "torch 2.10.0.dev20250916+cu130"),
           ("H100-SXM", "fp8-tensorwise", 1402.6, 1979, 1024, 9216, 14336, "float8_e4m3fn, torch 2.7.0+cu126"),
           ("H200", "fp8-tensorwise", 1453.4, 1979, 1280, 4096, 12032, "float8_e4m3fn, torch 2.7.1+cu128"),
           ("B200", "fp8-tensorwise", 3432.5, 4500, 15360, 4096, 3072, "float8_e4m3fn, torch 2.7.1+cu128"),
           ("GB200", "fp8-tensorwise", 3615.6, 5000, 19456, 5120, 1536, "float8_e4m3fn, torch 2.10.0.dev20250916+cu130"))]
)
"""Published dense and grouped GEMM measurements: FP8 on H800 (DeepGEMM), BF16/MXFP8 grouped on B200
(torchao), and the maximum achievable dense BF16/FP8 matmul rate per GPU generation (ml-engineering).

The torchao rows give bf16 grouped-GEMM time at 1-8 local experts for two
expert widths; :meth:`GemmMeasurement.tflops` turns the fwd+bwd times into
achieved TFLOP/s (e.g. Llama4 shapes, G=1: ~747 TFLOP/s in bf16)."""


def _fa(source: str, gpu: str, kernel: str, passes: str, causal: bool, hd: int, values: tuple[float | None, ...],
        note: str = "") -> list[AttentionMeasurement]:
    return [AttentionMeasurement(source, gpu, kernel, passes, causal, hd, s, float(v), notes=note)
            for s, v in zip((512, 1024, 2048, 4096, 8192, 16384), values) if v is not None]


_FA2_A100_NOTE = "A100 80GB SXM4; value labels read off the figure (1k labels partly hidden by the legend: 153, 173)"
_FA3_NOTE = "H100 80GB SXM5, FP16, forward only; value labels read off the figure"
ATTENTION: tuple[AttentionMeasurement, ...] = tuple(
    _fa("flashattention2-paper", "A100-80G", "FlashAttention-2", "fwd+bwd", False, 64, (132, 153, 162, 171, 175, 176), _FA2_A100_NOTE)
    + _fa("flashattention2-paper", "A100-80G", "FlashAttention-2", "fwd+bwd", False, 128, (None, 173, 187, 196, 201, 203),
          _FA2_A100_NOTE + "; the 512 label is hidden")
    + _fa("flashattention2-paper", "A100-80G", "FlashAttention-2", "fwd+bwd", True, 64, (88, 119, 140, 156, 165, 171), _FA2_A100_NOTE)
    + _fa("flashattention2-paper", "A100-80G", "FlashAttention-2", "fwd+bwd", True, 128, (99, 133, 155, 173, 182, 189), _FA2_A100_NOTE)
    + _fa("flashattention2-paper", "H100-SXM", "FlashAttention-2", "fwd+bwd", False, 64, (215, 254, 274, 288, 294, 296), "H100 80GB SXM5")
    + _fa("flashattention2-paper", "H100-SXM", "FlashAttention-2", "fwd+bwd", False, 128, (248, 294, 320, 326, 335, 338), "H100 80GB SXM5")
    + _fa("flashattention2-paper", "H100-SXM", "FlashAttention-2", "fwd+bwd", True, 64, (141, 192, 232, 257, 273, 284), "H100 80GB SXM5")
    + _fa("flashattention2-paper", "H100-SXM", "FlashAttention-2", "fwd+bwd", True, 128, (163, 221, 265, 294, 308, 328), "H100 80GB SXM5")
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-3", "fwd", False, 64, (333, 392, 460, 476, 496, 497), _FA3_NOTE)
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-3", "fwd", True, 64, (197, 265, 371, 420, 460, 473), _FA3_NOTE)
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-3", "fwd", False, 128, (467, 565, 625, 638, 646, 648), _FA3_NOTE)
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-3", "fwd", True, 128, (292, 423, 521, 579, 602, 616), _FA3_NOTE)
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-3", "fwd", False, 256, (482, None, 707, 736, 746, 756),
          _FA3_NOTE + "; the 1k label is hidden")
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-3", "fwd", True, 256, (286, 427, 537, 612, 628, 642), _FA3_NOTE)
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-2", "fwd", False, 64, (282, 306, 318, 321, 322, 324), _FA3_NOTE)
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-2", "fwd", True, 64, (180, 229, 262, 284, 295, 299), _FA3_NOTE)
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-2", "fwd", False, 128, (309, 350, 362, 368, 370, 370), _FA3_NOTE)
    + _fa("flashattention3-paper", "H100-SXM", "FlashAttention-2", "fwd", True, 128, (191, 260, 298, 319, 333, 335), _FA3_NOTE)
)
"""Published flash-attention throughput (TFLOP/s) by GPU, kernel, pass, mask, head dim and sequence."""

_CP_NOTE = ("GPU count, PP and DP not printed; TP8CP1 uses full recompute (the baseline), the other layouts are "
            "described as removing most recomputation (their recompute setting is not printed); bar heights read "
            "against 0.2 gridlines, about +-0.02")
LAYOUT_SPEEDUPS: tuple[LayoutSpeedup, ...] = tuple(
    LayoutSpeedup("megatron-cp-docs", "gpt3-175b", "bf16", seq, tp, cp, "full" if (tp, cp) == (8, 1) else "unknown",
                  v, "TP8CP1 (full recompute)", f"layout:gpt3-175b-bf16-s{seq // 1024}k", "bar height, +-0.02", _CP_NOTE)
    for seq, tp, cp, v in ((16384, 8, 1, 1.00), (16384, 16, 1, 1.13), (16384, 8, 2, 1.25),
                           (32768, 8, 1, 1.00), (32768, 32, 1, 0.85), (32768, 16, 2, 1.15), (32768, 8, 4, 1.20))
)
"""Relative layout measurements without absolute throughput (a ranking family for TP vs CP at long context).

The same figure has FP8 bars for a GQA variant (TP8CP2 about 1.28 at 16k,
TP8CP4 about 1.30 at 32k, over TP8CP1); the variant's head counts are not
given, so they are not rows."""


def runs_in(regime: str) -> tuple[PublishedRun, ...]:
    """The runs tagged with ``regime`` (one of :data:`REGIMES`)."""
    return tuple(r for r in RUNS if regime in r.regime)


def families() -> dict[str, tuple[PublishedRun, ...]]:
    """Family tag -> its runs, in source order."""
    out: dict[str, list[PublishedRun]] = {}
    for r in RUNS:
        for tag in r.families:
            out.setdefault(tag, []).append(r)
    return {k: tuple(v) for k, v in out.items()}


def _fmt_measured(r: PublishedRun) -> str:
    parts = []
    for m in r.measured:
        shown = m.printed if m.printed else f"{m.value:g}"
        parts.append(f"{shown} [{m.unit}]" + (" (derived)" if m.derived else ""))
    return "; ".join(parts)


def to_markdown() -> str:
    """The tables of ``benchmarks/results/published.md`` (runs, models, kernels, sources)."""
    lines = [
        "# Published measured training runs",
        "",
        "Made by `python -m benchmarks.calibration.published` from `benchmarks/calibration/published.py` (the data, with each source's "
        "commit or version and what is derived). Layout as published; `dp` and other derived fields are marked in "
        "the module. `H` = held out of fitting.",
        "",
        "| regime | count | held out |",
        "|---|---|---|",
    ]
    for reg in REGIMES:
        rows = runs_in(reg)
        lines.append(f"| {reg} | {len(rows)} | {sum(r.holdout for r in rows)} |")
    lines.append(f"| all | {len(RUNS)} | {sum(r.holdout for r in RUNS)} |")
    lines += ["", "## Runs", "",
              "| key | source | model | GPU | GPUs | precision | TP | PP | VPP | CP | EP | ETP | DP | MBS | GBS | seq | "
              "recompute | measured | families | H |",
              "|" + "---|" * 20]
    for r in RUNS:
        rc = r.recompute + (f" ({', '.join(r.recompute_modules)})" if r.recompute_modules else "")
        cells = [r.key, r.source, r.model, r.gpu, str(r.gpus), r.precision, str(r.tp), str(r.pp),
                 "-" if r.vpp is None else str(r.vpp), str(r.cp), str(r.ep), "-" if r.etp is None else str(r.etp),
                 str(r.dp), "-" if r.mbs is None else str(r.mbs), "-" if r.gbs is None else str(r.gbs), str(r.seq_len),
                 rc, _fmt_measured(r), ", ".join(r.families), "H" if r.holdout else ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Models", "",
              "| key | layers | hidden | ffn | heads | kv | head dim | vocab | tied | experts | top-k | expert ffn | "
              "shared | dense layers | MLA (q_lora, kv_lora, nope, rope, v) | MTP | preset | source |",
              "|" + "---|" * 18]
    for k, m in MODELS.items():
        mla = f"{m.q_lora_rank}, {m.kv_lora_rank}, {m.qk_nope_head_dim}, {m.qk_rope_head_dim}, {m.v_head_dim}" if m.kv_lora_rank else ""
        shared = f"{m.shared_experts} x {m.shared_ffn // max(m.shared_experts, 1)}" if m.shared_experts else ""
        dense = ",".join(str(i) for i in m.dense_layers)
        lines.append(f"| {k} | {m.layers} | {m.hidden} | {m.ffn} | {m.heads} | {m.kv_heads} | {m.head_dim} | {m.vocab} | "
                     f"{'yes' if m.tied_embeddings else 'no'} | {m.experts or ''} | {m.top_k or ''} | {m.moe_ffn or ''} | "
                     f"{shared} | {dense} | {mla} | {m.mtp_layers or ''} | {m.preset} | {m.source} |")
    lines += ["", "## GEMM measurements", "",
              "| source | GPU | dtype | kind | groups | M total | N | K | passes | printed | TFLOP/s |", "|" + "---|" * 11]
    for g in GROUPED_GEMM:
        t = g.tflops()
        lines.append(f"| {g.source} | {g.gpu} | {g.dtype} | {g.kind} | {g.groups} | {g.m_total} | {g.n} | {g.k} | "
                     f"{g.passes} | {g.printed} {'' if g.unit == 'TFLOP/s' else g.unit} | {'' if t is None else f'{t:.0f}'} |")
    lines += ["", "## Flash-attention measurements (TFLOP/s; 16k tokens per batch, hidden 2048)", "",
              "| source | GPU | kernel | passes | causal | head dim | 512 | 1k | 2k | 4k | 8k | 16k |", "|" + "---|" * 12]
    groups: dict[tuple[str, str, str, str, bool, int], dict[int, float]] = {}
    for a in ATTENTION:
        groups.setdefault((a.source, a.gpu, a.kernel, a.passes, a.causal, a.head_dim), {})[a.seq_len] = a.tflops
    for (src, gpu, kern, passes, causal, hd), vals in groups.items():
        cells = [f"{vals[s]:g}" if s in vals else "" for s in (512, 1024, 2048, 4096, 8192, 16384)]
        lines.append(f"| {src} | {gpu} | {kern} | {passes} | {'yes' if causal else 'no'} | {hd} | " + " | ".join(cells) + " |")
    lines += ["", "## Layout speedups without absolute throughput", "",
              "| source | model | precision | seq | TP | CP | recompute | speedup | over | family |", "|" + "---|" * 10]
    for ls in LAYOUT_SPEEDUPS:
        lines.append(f"| {ls.source} | {ls.model} | {ls.precision} | {ls.seq_len} | {ls.tp} | {ls.cp} | {ls.recompute} | "
                     f"{ls.speedup:.2f} ({ls.readout}) | {ls.baseline} | {ls.family} |")
    lines += ["", "## Sources", "", "| key | title | where | version | read | held out |", "|" + "---|" * 6]
    for k, s in SOURCES.items():
        lines.append(f"| {k} | [{s.title}]({s.url}) | {s.where} | {s.version} | {s.read_on} | "
                     f"{'yes' if k in HOLDOUT_SOURCES else ''} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    """Write ``benchmarks/results/published.md``."""
    from pathlib import Path

    out = Path(__file__).resolve().parents[1] / "results" / "published.md"
    out.write_text(to_markdown())
    print(f"wrote {out} ({len(RUNS)} runs)")


if __name__ == "__main__":
    main()
