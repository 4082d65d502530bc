"""The cost model's options: every constant and knob, named and documented.

Contract: :class:`CostOptions` is a frozen dataclass; each field is one
constant (with its source) or one modelling choice.
:meth:`CostOptions.from_mapping` validates a mapping (the CLI's
``--cost-option key=value``) and raises
:class:`~partitioner.problem.ProblemError` naming ``options.<key>`` for an
unknown key or a bad value; :meth:`CostOptions.to_dict` is its inverse (the
problem's ``meta.options``). Nothing here computes a cost.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.options``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from ..problem import ProblemError
from .axes.options import AxisOptions
from .compute.fp8 import DEFAULT_FP8_RECIPE, FP8_RECIPES, PRECISIONS
from .memory.param_memory import param_memory
from .memory.recompute_names import canonical_setting

__all__ = ["BF16_BYTES", "CostOptions", "FP8_FIELDS"]

BF16_BYTES = 2
# the options that describe FP8 training: written by :meth:`CostOptions.to_dict` only when precision is fp8,
# so that every bf16 problem's ``meta.options`` stays what it was before they existed
FP8_FIELDS = ("precision", "fp8_recipe", "fp8_param_gather", "fp8_bf16_layers", "fp8_gemm_efficiency")


@dataclass(frozen=True)
class CostOptions:
    """The knobs and constants of the cost model; each one is documented here.

    Parameters
    ----------
    flash_attention : bool
        Fused attention: no score matrix is stored (drops Korthikanti's
        ``5as/h`` term) and the backward recomputes it (``flash_backward_factor``).
    sequence_parallel : bool
        Megatron sequence parallelism: norms and dropouts sharded over tp,
        so every activation is divided by tp [2]_.
    fused_norm : bool
        Norms run as fused kernels that keep only their input (Apex,
        Transformer Engine, Megatron-LM). False: transformers' eager
        RMSNorm, which also keeps its fp32 upcast and bf16 output
        (:mod:`partitioner.costs.memory`).
    expert_fused_glu : bool
        The routed experts' gated activation runs as Megatron-Core's fused
        weighted SwiGLU (``bias_activation_fusion``, the default of
        Megatron-LM's ``--bias-swiglu-fusion`` and of Megatron-Bridge's
        Qwen3-VL and GLM-4.5V providers), which saves only its input: an
        expert keeps its fc1 output (gate and up, ``2f``) and fc2 input
        (``f``) per routed copy. False: an unfused ``act(gate) * up``
        (torchtitan's ``GroupedExperts``) also keeps ``act(gate)``
        (:func:`~partitioner.costs.axes.experts.expert_activation_bytes`).
    variants : tuple of str
        The memory-knob variants emitted per layout (format v2,
        :mod:`partitioner.costs.variants`): ``all``, ``none`` (a format-v1
        problem whose plain key follows ``recompute`` and ``zero1``), or a
        list of variant names (``zero3,recompute-full``; the plain key is
        always there). Default ``none`` for :func:`~partitioner.costs.build_problem`
        (v1 problems, for every solver); :func:`~partitioner.planning.plan_model`
        asks for ``all``. Giving ``recompute`` or ``zero1`` without
        ``variants`` fixes the knobs: ``variants`` becomes ``none``.
    recompute : str
        With ``variants=none``: activation recomputation for every layer
        [2]_: ``none``, ``selective`` (drops the score-matrix term,
        recomputing the attention core in backward), ``full`` (keeps only
        each block's input and replays the forward in backward), a module
        set such as ``layernorm+moe_act`` (Megatron-Core's
        ``--recompute-modules``) or ``op`` (torchtitan's per-op policy):
        :mod:`partitioner.costs.memory.recompute`.
    recompute_modules : tuple of str
        The recompute settings below ``full`` that ``variants=all`` adds to
        none, selective and full: ``auto`` (the module sets worth a variant
        for this model, :func:`~partitioner.costs.memory.recompute.module_chain`),
        ``none``, or settings (``layernorm+moe_act``, ``moe``, ``op``).
    zero1 : bool
        With ``variants=none``: shard the 12 optimizer bytes per parameter
        over dp (ZeRO stage 1 [4]_).
    zero3_overlap : float or None
        None (the default): the ZeRO-3 parameter all-gathers and gradient
        reduce-scatters of a layer hide behind about one layer's compute,
        as FSDP's prefetching runs them (derived per entry:
        :func:`~.entry.zero3_exposed_ms`) [10]_. A number in [0, 1]: that
        fixed fraction hidden instead.
    zero3_keep_gathered : bool
        ZeRO-3 keeps each layer's gathered bf16 parameters from the first
        microbatch's forward to the end of the iteration (FSDP
        ``reshard_after_forward=False`` across gradient accumulation): one
        all-gather per iteration instead of two per microbatch, for 2 B per
        parameter (/ tp) more memory.
    bytes_per_param : float
        Trainable-weight memory per parameter as Megatron-LM counts it for
        mixed-precision Adam: bf16 weight (2) + fp32 gradient (4, the
        ``main_grad`` buffer) + fp32 master weight, Adam momentum and
        variance (12): 18 [13]_ (ZeRO's count with a bf16 gradient is 16 [4]_).
    optimizer_bytes_per_param : float
        The part of ``bytes_per_param`` ZeRO-1 (Megatron's distributed
        optimizer) shards: 6 + 12 / dp per parameter [13]_.
    frozen_bytes_per_param : float
        A frozen weight: bf16 only.
    memory_count : str
        The framework whose bytes per parameter the four fields above
        follow (:data:`~.memory.param_memory.PARAM_MEMORY`: ``megatron``,
        ``megatron-distopt``, ``fsdp2``, ``fsdp2-keep-gathered``,
        ``torchtitan-ddp``, ``deepspeed-zero0`` ... ``deepspeed-zero3``,
        ``deepspeed-bf16``). Given to :meth:`from_mapping`, it sets
        ``bytes_per_param``, ``optimizer_bytes_per_param``,
        ``grad_bytes_per_param`` and ``frozen_bytes_per_param`` to the
        count's (:meth:`~.memory.param_memory.ParamBytes.option_overrides`) unless
        the mapping gives them too (:func:`partitioner.frameworks.target_options`
        picks it by export target and ZeRO stage). The defaults are Megatron-LM's.
    efficiency_max : float or None
        Fraction of the dense bf16 peak a large, wide GEMM reaches. None
        (the default): the cluster's GPU generation's
        (:mod:`partitioner.costs.compute.hardware`): 0.70 on A100, in line with the
        50-60 % model FLOPs utilization reported for large Megatron runs on
        A100 (Narayanan et al., SC 2021) once pipeline bubbles and
        communication are added; the newer generations' calibrated on their
        own published runs.
    gemm_half_width : float
        Per-GPU GEMM width ``hidden / tp`` at which efficiency is half of
        ``efficiency_max`` (seed lesson 15 Q1: a 1024-wide ViT at TP=4 gives
        256-wide GEMMs that starve the tensor cores [6]_).
    gemm_half_tokens : float
        Tokens per GEMM (the M dimension) at which efficiency halves.
    efficiency_exponent : float
        Steepness ``k`` of the fall-off: with 2, a GEMM twice as wide as
        ``gemm_half_width`` runs at 80 % of ``efficiency_max``, half as wide at 20 %.
    collective_latency_us : float
        Fixed cost of one NCCL collective inside a node (launch plus
        synchronization), microseconds.
    nvlink_efficiency : float
        Fraction of ``intra_node_GBps`` a ring all-reduce achieves as bus
        bandwidth.
    flash_backward_factor : float
        Backward/forward FLOPs of the attention core with flash attention
        (2.5: five matmuls against two [5]_); 2 without.
    attention_kernels : bool
        With flash attention, time the attention core at the published
        flash-attention kernel rates of the cluster's GPU generation, by
        head dim, key-loop length (the chunk under context parallelism),
        causal diagonal tiles and pass (:mod:`partitioner.costs.attention.flash`);
        False, or a GPU no curve was published for: at the dense GEMM
        efficiency.
    grad_bytes_per_param : float
        Bytes per trainable parameter in the data-parallel gradient
        all-reduce or reduce-scatter: 4, Megatron-LM reduces the fp32
        ``main_grad`` buffer in bf16 training [13]_.
    grad_sync_overlap : float
        Fraction of the data-parallel gradient all-reduce hidden behind the
        backward pass (bucketed overlap [9]_, Megatron ``--overlap-grad-reduce``);
        a modelling choice: 0 exposes it all, 1 hides it all.
    memory_reserve_bytes : int
        Subtracted from each GPU's memory for the CUDA context, the NCCL
        communicators' buffers and the cuBLAS workspaces (see Notes).
    memory_bound_ops : bool
        Charge the memory-bound kernels -- norms, residual adds, dropouts,
        activations, rotary, softmax over the score matrix without flash
        attention, the embedding and the loss -- by the bytes they move
        (:mod:`partitioner.costs.memory.traffic`) at the cluster's ``hbm_GBps`` x
        ``hbm_efficiency``. False: matmuls and collectives only (the model
        without the memory-bound terms).
    hbm_efficiency : float
        Fraction of the HBM bandwidth an elementwise or reduction kernel
        reaches (see Notes).
    loss_fwd_bytes_per_logit, loss_bwd_bytes_per_logit : float
        Bytes the cross-entropy moves per logit (per GPU's ``V / t`` share)
        forward and backward (see Notes).
    optimizer_step_bytes_per_param : float
        Bytes the optimizer step moves per parameter the GPU owns: its
        optimizer shard (ZeRO-1 / distributed optimizer: ``/ dp``), all
        its parameters without sharding (see Notes). Charged once per
        iteration, spread over the microbatches like the gradient sync.
    tp_comm_overlap : float
        Fraction of the backward's tensor-parallel collectives hidden behind
        the weight-gradient GEMMs, at most their time (see Notes); the hidden
        part still slows those GEMMs by the share of SMs the collective
        occupies (:func:`~.compute.hardware.comm_sm_fraction`). 0: in series, as
        Megatron-LM before ``--async-tensor-model-parallel-allreduce``.
    param_gather_bytes_per_param : float
        Bytes per parameter of a ZeRO-3 parameter all-gather and of the copy
        ``zero3_keep_gathered`` keeps (bf16).
    allocator_fragmentation : float
        Fraction of the memory left after ``memory_reserve_bytes`` that the
        caching allocator's fragmentation makes unusable (see Notes).
    freeze, train : tuple of str
        Module names to freeze, or to train although the preset freezes them.
    text_tokens : int or None
        Overrides the LLM's text tokens per sample.
    max_tp : int or None
        Largest tensor-parallel degree to offer.
    precision : {"bf16", "fp8"}
        The GEMM precision (:mod:`partitioner.costs.compute.precision`): ``fp8``
        runs the linear layers of every transformer block -- QKV, output
        projection, MLP, the experts -- in FP8 at the cluster's
        ``peak_tflops_fp8``, with the casts and the fp8 weight copies
        charged; the router, the attention core, the embedding, the LM head
        and the projector stay in BF16, as Megatron-LM with Transformer
        Engine and torchtitan's float8 converters keep them.
    fp8_recipe : {"tensorwise", "delayed", "blockwise", "mxfp8", "rowwise"}
        The scaling recipe (:data:`~.compute.fp8.RECIPES`); checked against the
        cluster's GPU when the problem is built (``mxfp8`` needs Blackwell,
        ``blockwise`` Hopper or later). Default ``tensorwise``, what
        NVIDIA's published FP8 runs on Hopper use.
    fp8_param_gather : bool or None
        Keep the parameters in fp8 (Megatron's ``--fp8-param-gather``): no
        bf16 weight copy besides the fp8 ones, no per-iteration weight
        cast. None: as NVIDIA's published recipes (Megatron-Bridge's
        ``mixed_precision``) set it -- on for tensorwise, delayed and
        mxfp8, off for blockwise; torchtitan's rowwise keeps bf16 weights.
    fp8_bf16_layers : int
        Decoder layers of the language model kept in BF16 at each end
        (Megatron's ``--first-last-layers-bf16`` with this many at the start
        and at the end; refused with delayed scaling, as Megatron does).
    fp8_gemm_efficiency : float or None
        Fraction of the BF16 efficiency curve an FP8 GEMM of the same shape
        reaches, as a fraction of the FP8 peak. None: the GPU
        generation's measured ratio (:func:`~.compute.fp8.fp8_gemm_efficiency`).
    axes : AxisOptions
        The context- and expert-parallel options (format v3's cp, ep and
        etp axes: :class:`~.axes.options.AxisOptions`, documented there).
        They are embedded, not merged, so that the cost terms of the two
        axes keep reading their own record; but their keys are flat like
        every other option's: :meth:`from_mapping` takes ``cp_degrees``,
        ``cp_algorithm``, ``cp_min_tokens``, ``ep_degrees`` ... at the top
        level (``-c cp_degrees=1,2``) and :meth:`to_dict` writes them there.

    Notes
    -----
    Derivations of the memory-bound and optimizer constants (one set for every GPU;
    the GPU's own numbers -- peak FLOP/s, HBM, NVLink and NIC bandwidth --
    come from the cluster preset):

    * ``hbm_efficiency = 0.8``: streaming kernels (STREAM / BabelStream
      copy and triad) reach about 85-90 % of the HBM peak on A100 and H100
      [15]_; framework kernels with reductions (softmax, norms) and short
      tensors somewhat less. Cross-check, not a fit: the model gives 1.33 ms
      for the selective recompute of one 22B GPT layer (h 6144, a 64,
      s 2048, b 4, t 8), which Korthikanti et al. measured at 1.3 ms [2]_
      (Table 4); the same layer's forward comes out at 8.3 ms (7.7 ms
      measured; 7.7 ms against 7.2 with sequence parallelism).
    * ``loss_fwd_bytes_per_logit = 38``, ``loss_bwd_bytes_per_logit = 14``:
      Megatron-LM's vocabulary-parallel cross-entropy on ``V / t`` fp32
      logits per token [13]_: upcast (read 2, write 4), max (read 4),
      subtract (read, write 8), exp (8), sum (4), normalise in place (8) =
      38; backward: scale the saved softmax by the incoming gradient (8),
      cast back to bf16 (read 4, write 2) = 14.
    * ``optimizer_step_bytes_per_param = 46``: per parameter the GPU owns,
      Megatron-LM's mixed-precision Adam step [13]_: the gradient norm
      reads the fp32 gradient (4), clipping scales it (read, write 8),
      fused Adam reads gradient, master weight, m, v and writes weight, m,
      v (16 + 12), and the updated fp32 master is cast to the bf16 model
      weight (read 4, write 2). The step runs once per iteration; the cost
      model spreads it over the m microbatches as it does the gradient sync.
    * ``tp_comm_overlap = 1``: Megatron-LM launches the all-reduce (with
      sequence parallelism: the reduce-scatter) of a column-parallel
      layer's input gradient asynchronously and computes the weight
      gradient meanwhile (``--async-tensor-model-parallel-allreduce``, on by
      default since late 2021; with sequence parallelism the all-gather of
      the input is overlapped the same way) [2]_ [13]_. The hidden part is
      at most the piece's weight-gradient GEMM time; the forward's
      collectives stay in series.
    * ``bytes_per_param = 18``, ``optimizer_bytes_per_param = 12``,
      ``grad_bytes_per_param = 4``: Megatron-LM keeps a bf16 weight, an fp32
      gradient buffer (``main_grad``, reduced in fp32 in bf16 training)
      and fp32 master weight, Adam m and v; its distributed optimizer
      shards the last 12 over dp: ``6 + 12 / d`` bytes per parameter [13]_.
    * ``allocator_fragmentation = 0.05`` and ``memory_reserve_bytes =
      2 GiB``: the CUDA context, NCCL communicator buffers and cuBLAS
      workspaces take about 1-2 GiB per GPU; PyTorch's caching allocator
      loses more to fragmentation in long training runs (GMLake measures
      up to tens of percent without expandable segments [16]_); 5 % of
      what is left is a modest reserve, a choice like ``grad_sync_overlap``.

    References
    ----------
    .. [13] NVIDIA Megatron-LM, ``README.md`` ("Distributed Optimizer":
       bytes per parameter 18 and 6 + 12/d) and ``megatron/core``
       (``tensor_parallel.cross_entropy``, ``optimizer``,
       ``DistributedDataParallel``); Narayanan et al., SC 2021, arXiv:2104.04473.
    .. [15] T. Deakin et al., "Evaluating attainable memory bandwidth of
       parallel programming models via BabelStream", IJCSE 17(3), 2018.
    .. [16] C. Guo et al., "GMLake: Efficient and Transparent GPU Memory
       Defragmentation for Large-scale DNN Training with Virtual Memory
       Stitching", ASPLOS 2024.
    .. [2] V. Korthikanti et al., "Reducing Activation Recomputation in Large
       Transformer Models", MLSys 2023, arXiv:2205.05198, Sections 4-5.
    .. [4] S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
       Trillion Parameter Models", SC 2020 (2 + 2 + 12 bytes per parameter).
    .. [10] Y. Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded
       Data Parallel", VLDB 2023.
    .. [6] NVIDIA, "Matrix Multiplication Background User's Guide", Deep
       Learning Performance documentation (tile and wave quantization).
    .. [5] T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism
       and Work Partitioning", arXiv:2307.08691 (2023).
    .. [9] S. Li et al., "PyTorch Distributed: Experiences on Accelerating Data
       Parallel Training", VLDB 2020 (bucketed all-reduce overlapping backward).
    """

    flash_attention: bool = True
    sequence_parallel: bool = True
    fused_norm: bool = True
    expert_fused_glu: bool = True
    variants: tuple[str, ...] = ("none",)
    recompute: str = "none"
    recompute_modules: tuple[str, ...] = ("auto",)
    zero1: bool = False
    zero3_overlap: float | None = None
    zero3_keep_gathered: bool = False
    bytes_per_param: float = 18.0
    optimizer_bytes_per_param: float = 12.0
    frozen_bytes_per_param: float = 2.0
    memory_count: str = "megatron-distopt"
    efficiency_max: float | None = None
    gemm_half_width: float = 256.0
    gemm_half_tokens: float = 128.0
    efficiency_exponent: float = 2.0
    collective_latency_us: float = 20.0
    nvlink_efficiency: float = 0.8
    flash_backward_factor: float = 2.5
    attention_kernels: bool = True
    grad_bytes_per_param: float = 4.0
    grad_sync_overlap: float = 0.5
    memory_reserve_bytes: int = 2 * 2**30
    memory_bound_ops: bool = True
    hbm_efficiency: float = 0.8
    loss_fwd_bytes_per_logit: float = 38.0
    loss_bwd_bytes_per_logit: float = 14.0
    optimizer_step_bytes_per_param: float = 46.0
    tp_comm_overlap: float = 1.0
    param_gather_bytes_per_param: float = 2.0
    allocator_fragmentation: float = 0.05
    freeze: tuple[str, ...] = ()
    train: tuple[str, ...] = ()
    text_tokens: int | None = None
    max_tp: int | None = None
    precision: str = "bf16"
    fp8_recipe: str = DEFAULT_FP8_RECIPE
    fp8_param_gather: bool | None = None
    fp8_bf16_layers: int = 0
    fp8_gemm_efficiency: float | None = None
    axes: AxisOptions = AxisOptions()

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | "CostOptions" | None) -> "CostOptions":
        """Options from a mapping (e.g. CLI ``--cost-option key=value``); unknown keys are an error."""
        if options is None:
            return cls()
        if isinstance(options, CostOptions):
            return options
        known = {f.name: f for f in fields(cls) if f.name != "axes"}
        axis_keys = [f.name for f in fields(AxisOptions)]
        values: dict[str, Any] = {}
        axis_values: dict[str, Any] = {}
        for key, value in options.items():
            if key in axis_keys:
                axis_values[key] = value
                continue
            if key not in known:
                raise ProblemError(f"unknown cost option {key!r} (options: {', '.join([*known, *axis_keys])})",
                                   path=f"options.{key}")
            default = getattr(cls(), key)
            where = f"options.{key}"
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise ProblemError(f"must be true or false, got {value!r}", path=where)
            elif isinstance(default, tuple):
                if isinstance(value, str):
                    value = tuple(v for v in value.split(",") if v)
                what = {"variants": "variant names (or all, none)",
                        "recompute_modules": "recompute settings (or auto, none)"}.get(key, "module names")
                if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                    raise ProblemError(f"must be a list of {what}", path=where)
                value = tuple(value)
                if key == "variants" and not value:
                    raise ProblemError("must name at least one variant (or all, none)", path=where)
                if key == "recompute_modules":
                    value = _recompute_settings(value, where)
            elif key == "recompute":
                if not isinstance(value, str):
                    raise ProblemError(f"must be a recompute setting, got {value!r}", path=where)
                try:
                    canonical = canonical_setting(value)
                except ValueError as err:
                    raise ProblemError(str(err), path=where) from None
                if canonical != value:
                    raise ProblemError(f"write the setting as {canonical!r}, got {value!r}", path=where)
            elif key == "memory_count":
                param_memory(value)  # a ProblemError naming options.memory_count if unknown
            elif key in ("efficiency_max", "zero3_overlap") and value is None:
                pass  # derived: the cluster's GPU generation's, the schedule's
            elif key == "precision":
                if value not in PRECISIONS:
                    raise ProblemError(f"must be one of {', '.join(PRECISIONS)}, got {value!r}", path=where)
            elif key == "fp8_recipe":
                if value not in FP8_RECIPES:
                    raise ProblemError(f"must be one of {', '.join(FP8_RECIPES)}, got {value!r}", path=where)
            elif key == "fp8_param_gather":
                if value is not None and not isinstance(value, bool):
                    raise ProblemError(f"must be true, false or null, got {value!r}", path=where)
            elif key == "fp8_bf16_layers":
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ProblemError(f"must be a non-negative integer, got {value!r}", path=where)
            elif key == "fp8_gemm_efficiency":
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                          or not 0 < value <= 1):
                    raise ProblemError(f"must be in (0, 1] or null, got {value!r}", path=where)
            elif key in ("text_tokens", "max_tp"):
                if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                    raise ProblemError(f"must be a positive integer, got {value!r}", path=where)
            else:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ProblemError(f"must be a non-negative number, got {value!r}", path=where)
                if key in ("efficiency_max", "nvlink_efficiency", "hbm_efficiency") and not 0 < value <= 1:
                    raise ProblemError(f"must be in (0, 1], got {value!r}", path=where)
                if key in ("grad_sync_overlap", "zero3_overlap", "tp_comm_overlap") and not 0 <= value <= 1:
                    raise ProblemError(f"must be in [0, 1], got {value!r}", path=where)
                if key == "allocator_fragmentation" and not 0 <= value < 1:
                    raise ProblemError(f"must be in [0, 1), got {value!r}", path=where)
            values[key] = value
        if "memory_count" in values:
            values = {**param_memory(values["memory_count"]).option_overrides(), **values}
        if ("recompute" in values or "zero1" in values) and "variants" not in values:
            values["variants"] = ("none",)  # a fixed knob: one setting for every layer (format v1)
        if axis_values:
            values["axes"] = AxisOptions.from_mapping(axis_values)  # a ProblemError naming options.<key>
        _check_fp8(values)
        return cls(**values)

    @property
    def fp8(self) -> bool:
        """Whether the GEMMs of the transformer blocks run in FP8 (``precision == "fp8"``)."""
        return self.precision == "fp8"

    def to_dict(self) -> dict[str, Any]:
        """The options as :meth:`from_mapping` takes them (the axis options flat at the top level).

        The FP8 fields (:data:`FP8_FIELDS`) only when ``precision`` is fp8.
        """
        dense = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()
                 if k != "axes" and (self.fp8 or k not in FP8_FIELDS)}
        return {**dense, **self.axes.to_dict()}


def _check_fp8(values: Mapping[str, Any]) -> None:
    """The FP8 options together: only with precision fp8, and first/last BF16 layers not with delayed scaling.

    Megatron-core refuses ``first_last_layers_bf16`` with delayed scaling
    ("Delayed scaling does not support first / last layer in BF16":
    ``TransformerConfig.__post_init__``), so the option door does too.
    """
    given = [k for k in FP8_FIELDS[1:] if k in values]
    if values.get("precision", "bf16") != "fp8":
        if given:
            raise ProblemError(f"needs precision fp8 (got precision {values.get('precision', 'bf16')})",
                               path=f"options.{given[0]}")
        return
    if values.get("fp8_bf16_layers", 0) and values.get("fp8_recipe", DEFAULT_FP8_RECIPE) == "delayed":
        raise ProblemError("BF16 first/last layers do not run with delayed scaling (megatron-core refuses "
                           "first_last_layers_bf16 with fp8_recipe delayed)", path="options.fp8_bf16_layers")


def _recompute_settings(values: tuple[str, ...], where: str) -> tuple[str, ...]:
    """``recompute_modules``: ``("auto",)``, ``("none",)`` or canonical settings below full (ProblemError otherwise)."""
    if values in (("auto",), ("none",)):
        return values
    out = []
    for v in values:
        try:
            canonical = canonical_setting(v)
        except ValueError as err:
            raise ProblemError(str(err), path=where) from None
        if canonical in ("none", "full", "auto") or v in ("auto", "none"):
            raise ProblemError(f"auto and none stand alone, and full is always offered; got {v!r}", path=where)
        if canonical != v:
            raise ProblemError(f"write the setting as {canonical!r}, got {v!r}", path=where)
        if v not in out:
            out.append(v)
    return tuple(out)
