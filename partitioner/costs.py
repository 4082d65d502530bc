"""Analytical cost model: a model spec + a cluster + a training setup -> a v1 problem.

:func:`build_problem` cuts a model (:mod:`partitioner.presets`) into
pipeline layers -- one per transformer block, plus the projector, the token
embedding and the LM head -- and fills, for every layout (dp, tp) the
cluster allows, the forward and backward time, the weight and activation
bytes per GPU, and the tensor each layer hands on.

The model, per layer and layout, with ``b = (global_batch / m) / dp`` samples
per replica and microbatch:

* **FLOPs** from the matmul shapes: QKV with grouped-query heads, attention
  scores and values (``4 * heads * head_dim`` per query-key pair; every
  pair for vision encoders, the causal half for the LLM, PaliGemma's prefix
  pattern for pi0), output projection, plain or gated MLP, the projector,
  the LM head; 2 FLOPs per multiply-add [1]_. Backward = 2 x forward for
  the weighted matmuls (input and weight gradients), the attention core
  ``flash_backward_factor`` x with flash attention [5]_; frozen modules skip
  the weight gradients, and a frozen *first* module runs no backward at all;
  full recompute adds one forward [2]_.
* **time** = FLOPs / tp / (peak x efficiency) + tensor-parallel
  collectives. Efficiency is ``efficiency_max * H(w, gemm_half_width) *
  H(T, gemm_half_tokens)`` with ``H(x, x50) = x^k / (x^k + x50^k)``
  (``k = efficiency_exponent``), ``w = hidden / tp`` the per-GPU GEMM
  width and ``T`` the tokens of the GEMM: narrow or short GEMMs leave tensor
  cores idle (tile and wave quantization [6]_; seed lesson 15 Q1). Each
  transformer block does 2 all-reduces forward and 2 backward (or the
  same volume as all-gather + reduce-scatter with sequence parallelism)
  [3]_, each costing ``collective_latency_us + 2 (tp-1)/tp * bytes /
  (nvlink_efficiency * intra_node_GBps)`` (ring all-reduce [7]_).
* **memory**: weights, gradients and Adam states at 16 B/param (bf16 weight
  and gradient, fp32 master, momentum, variance [4]_), divided by tp; with
  ``zero1`` the 12 optimizer bytes are also divided by dp; frozen weights
  keep 2 B/param. Activations per block and microbatch follow Korthikanti
  et al. [2]_: ``s b h (10 + 24/t + 5 a s / (h t))`` bytes with TP,
  ``s b h (34 + 5 a s / h) / t`` with sequence parallelism; the ``5 a s / h``
  term (softmax and dropout of the score matrix) vanishes with flash
  attention or selective recompute; full recompute keeps only the block
  input ``2 s b h`` (``/ t`` with sequence parallelism).
* **boundaries**: a layer's ``out_bytes`` is the bf16 tensor the next layer
  needs, for the whole microbatch (the vision hidden state, the projected
  image tokens, the LLM hidden state; pi0 carries both the prefix and the
  action-expert state).

* **data-parallel gradient sync**: once per iteration each stage
  all-reduces the bf16 gradients of its trainable weights over its dp
  replicas (NVLink inside a node, the network across nodes); the part not
  hidden behind the backward pass (``1 - grad_sync_overlap`` [9]_) is
  spread over the ``m`` microbatches' backward times, so that the 1F1B
  iteration estimate carries it once.

Not modelled: pipeline-send overlap, the optimizer step, stragglers.

Every constant is a field of :class:`CostOptions`.

References
----------
.. [1] J. Kaplan et al., "Scaling Laws for Neural Language Models",
   arXiv:2001.08361 (2020), Table 1: C_forward = 2N + 2 n_layer n_ctx d_attn.
.. [2] V. Korthikanti et al., "Reducing Activation Recomputation in Large
   Transformer Models", MLSys 2023, arXiv:2205.05198, Sections 4-5.
.. [3] M. Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter
   Language Models Using Model Parallelism", arXiv:1909.08053 (2019).
.. [4] S. Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training
   Trillion Parameter Models", SC 2020 (2 + 2 + 12 bytes per parameter).
.. [5] T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism
   and Work Partitioning", arXiv:2307.08691 (2023): the backward pass runs
   5 matmuls of the attention core against 2 forward.
.. [6] NVIDIA, "Matrix Multiplication Background User's Guide", Deep
   Learning Performance documentation (tile and wave quantization).
.. [7] R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
   Communication Operations in MPICH", IJHPCA 19(1), 2005.
.. [8] A. Chowdhery et al., "PaLM", arXiv:2204.02311 (2022), Appendix B:
   model FLOPs utilization.
.. [9] S. Li et al., "PyTorch Distributed: Experiences on Accelerating Data
   Parallel Training", VLDB 2020 (bucketed all-reduce overlapping backward).
"""
from __future__ import annotations

import csv
import fnmatch
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .presets import (
    ClusterSpec,
    ModelSpec,
    ModuleSpec,
    list_clusters,
    list_models,
    load_cluster,
    load_model,
    module_layer_params,
)
from .problem import OBJECTIVES, Layout, Problem, ProblemError, read_document

__all__ = [
    "CostOptions",
    "Piece",
    "PipelineLayer",
    "build_problem",
    "model_layers",
    "layer_cost",
    "layouts_for",
    "block_activation_bytes",
    "efficiency",
    "allreduce_ms",
    "grad_sync_ms",
    "forward_flops",
    "model_flops_per_sample",
    "apply_profile",
    "load_profile",
    "load_model",
    "load_cluster",
    "list_models",
    "list_clusters",
    "BF16_BYTES",
]

BF16_BYTES = 2


# --------------------------------------------------------------------------- options


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
    recompute : {"none", "selective", "full"}
        Activation recomputation [2]_: selective drops the score-matrix
        term (recomputing the attention core in backward); full keeps only
        each block's input and replays the forward in backward.
    zero1 : bool
        Shard the 12 optimizer bytes per parameter over dp (ZeRO stage 1 [4]_).
    bytes_per_param : float
        Trainable-weight memory per parameter: bf16 weight (2) + bf16
        gradient (2) + fp32 master weight, Adam momentum and variance (12) [4]_.
    optimizer_bytes_per_param : float
        The part of ``bytes_per_param`` ZeRO-1 shards.
    frozen_bytes_per_param : float
        A frozen weight: bf16 only.
    efficiency_max : float
        Fraction of the dense bf16 peak a large, wide GEMM reaches. 0.70 is
        in line with the 50-60 % model FLOPs utilization reported for large
        Megatron runs on A100 (Narayanan et al., SC 2021) once pipeline
        bubbles and communication are added; calibrate with profiled times.
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
    grad_bytes_per_param : float
        Bytes per trainable parameter in the data-parallel gradient all-reduce (bf16).
    grad_sync_overlap : float
        Fraction of the data-parallel gradient all-reduce hidden behind the
        backward pass (bucketed overlap [9]_, Megatron ``--overlap-grad-reduce``);
        a modelling choice: 0 exposes it all, 1 hides it all.
    memory_reserve_bytes : int
        Subtracted from each GPU's memory for the CUDA context, NCCL buffers
        and allocator fragmentation (a choice, not a measurement).
    freeze, train : tuple of str
        Module names to freeze, or to train although the preset freezes them.
    text_tokens : int or None
        Overrides the LLM's text tokens per sample.
    max_tp : int or None
        Largest tensor-parallel degree to offer.
    """

    flash_attention: bool = True
    sequence_parallel: bool = True
    recompute: str = "none"
    zero1: bool = False
    bytes_per_param: float = 16.0
    optimizer_bytes_per_param: float = 12.0
    frozen_bytes_per_param: float = 2.0
    efficiency_max: float = 0.70
    gemm_half_width: float = 256.0
    gemm_half_tokens: float = 128.0
    efficiency_exponent: float = 2.0
    collective_latency_us: float = 20.0
    nvlink_efficiency: float = 0.8
    flash_backward_factor: float = 2.5
    grad_bytes_per_param: float = 2.0
    grad_sync_overlap: float = 0.5
    memory_reserve_bytes: int = 2 * 2**30
    freeze: tuple[str, ...] = ()
    train: tuple[str, ...] = ()
    text_tokens: int | None = None
    max_tp: int | None = None

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | "CostOptions" | None) -> "CostOptions":
        """Options from a mapping (e.g. CLI ``--cost-option key=value``); unknown keys are an error."""
        if options is None:
            return cls()
        if isinstance(options, CostOptions):
            return options
        known = {f.name: f for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in options.items():
            if key not in known:
                raise ProblemError(f"unknown cost option {key!r} (options: {', '.join(known)})", path=f"options.{key}")
            default = getattr(cls(), key)
            where = f"options.{key}"
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    raise ProblemError(f"must be true or false, got {value!r}", path=where)
            elif isinstance(default, tuple):
                if isinstance(value, str):
                    value = tuple(v for v in value.split(",") if v)
                if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                    raise ProblemError("must be a list of module names", path=where)
                value = tuple(value)
            elif key == "recompute":
                if value not in ("none", "selective", "full"):
                    raise ProblemError(f"must be none, selective or full, got {value!r}", path=where)
            elif key in ("text_tokens", "max_tp"):
                if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                    raise ProblemError(f"must be a positive integer, got {value!r}", path=where)
            else:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ProblemError(f"must be a non-negative number, got {value!r}", path=where)
                if key in ("efficiency_max", "nvlink_efficiency") and not 0 < value <= 1:
                    raise ProblemError(f"must be in (0, 1], got {value!r}", path=where)
                if key == "grad_sync_overlap" and not 0 <= value <= 1:
                    raise ProblemError(f"must be in [0, 1], got {value!r}", path=where)
            values[key] = value
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


# --------------------------------------------------------------------------- pipeline layers


@dataclass(frozen=True)
class Piece:
    """One matmul group inside a pipeline layer, per training sample.

    ``gemm_flops`` are the forward FLOPs of weighted matmuls, ``attn_flops``
    those of the attention core (scores and values). A ``block`` piece has
    Korthikanti activations over ``tokens x width`` with ``heads`` heads and
    ``attn_pairs`` query-key pairs; a ``dense`` piece stores
    ``dense_act`` bytes per sample (split into the part sequence
    parallelism shards and the part tp shards anyway).
    """

    name: str
    module: str
    kind: str  # block | dense
    gemm_flops: float
    attn_flops: float
    params: int
    tokens: int
    width: int
    heads: int = 1
    attn_pairs: float = 0.0  # query-key pairs computed (the causal half for causal attention)
    score_entries: float = 0.0  # score-matrix entries per head stored without flash attention (masked ones too)
    allreduces: int = 0  # forward collectives over tokens x width (as many again in backward)
    dense_act: tuple[float, float] = (0.0, 0.0)  # (replicated without SP, always sharded) bytes per sample
    tp_dims: tuple[int, ...] = ()  # dimensions tp must divide
    frozen: bool = False
    backward: bool = True  # False: a frozen module with nothing trainable before it
    passes: int = 1


@dataclass(frozen=True)
class PipelineLayer:
    """One problem layer: its pieces, the bf16 tensor it hands on (per sample) and export hints."""

    name: str
    module: str
    role: str  # vision | projector | embedding | decoder | loss | action
    pieces: tuple[Piece, ...]
    out_bytes_per_sample: float
    fqns: tuple[str, ...] = ()

    @property
    def params(self) -> int:
        return sum(p.params for p in self.pieces)


def _block_gemm_flops(spec: ModuleSpec, tokens: int) -> float:
    h = spec.hidden
    per_token = h * (spec.attn_dim + 2 * spec.kv_dim) + spec.attn_dim * h + (3 if spec.gated else 2) * h * spec.ffn
    return 2.0 * tokens * per_token


def _attn_flops(spec: ModuleSpec, pairs: float) -> float:
    # QK^T and AV: 2 matmuls, each 2 * head_dim FLOPs per query-key pair per head
    return 4.0 * spec.heads * spec.d_head * pairs


def _block_piece(
    spec: ModuleSpec, name: str, tokens: int, pairs: float, extra_params: int = 0, extra_flops: float = 0.0, passes: int = 1,
    scores: float | None = None,
) -> Piece:
    return Piece(
        name=name,
        module=spec.name,
        kind="block",
        gemm_flops=passes * (_block_gemm_flops(spec, tokens) + extra_flops),
        attn_flops=passes * _attn_flops(spec, pairs),
        params=module_layer_params(spec)["block"] + extra_params,
        tokens=tokens,
        width=spec.hidden,
        heads=spec.heads,
        attn_pairs=pairs,
        score_entries=pairs if scores is None else scores,
        allreduces=2,
        tp_dims=(spec.heads, spec.hidden, spec.ffn),
        frozen=spec.frozen,
        passes=passes,
    )


def _fqn(spec: ModuleSpec, part: str, i: int | None = None) -> tuple[str, ...]:
    value = spec.fqn.get(part) if spec.fqn else None
    if value is None:
        return ()
    if isinstance(value, str):
        return (value.format(i=i),) if i is not None else (value,)
    return tuple(str(v) for v in value)


def model_layers(model: ModelSpec, options: CostOptions | None = None) -> list[PipelineLayer]:
    """Cut ``model`` into pipeline layers, in execution order, with per-sample pieces."""
    opts = options or CostOptions()
    frozen = {m.name: (m.frozen or m.name in opts.freeze) and m.name not in opts.train for m in model.modules}
    modules = [replace(m, frozen=frozen[m.name]) for m in model.modules]
    for name in (*opts.freeze, *opts.train):
        if name not in frozen:
            raise ProblemError(f"model {model.name} has no module {name!r} (modules: {', '.join(frozen)})", path="options.freeze")
    if opts.text_tokens is not None:
        modules = [replace(m, text_tokens=opts.text_tokens) if m.kind == "llm" else m for m in modules]
    model = replace(model, modules=tuple(modules))

    if model.image_tokens and model.llm is None:
        raise ProblemError(f"model {model.name}: a projector without a language model is not supported")
    vits = [m for m in modules if m.kind == "vit"]
    expert = next((m for m in modules if m.kind == "action_expert"), None)
    layers: list[PipelineLayer] = []
    s_llm = model.llm_tokens

    for spec in modules:
        parts = module_layer_params(spec)
        if spec.kind == "vit":
            tpi, n = spec.tokens_per_image, spec.images
            tokens = n * tpi
            pairs = float(n * tpi * tpi)  # bidirectional, per image
            patch_flops = 2.0 * n * spec.patches_per_image * spec.channels * spec.temporal_patch * spec.patch**2 * spec.hidden
            # what travels with this encoder's state: the image for the encoders still to run,
            # the outputs of the encoders already run (fused backbones such as OpenVLA's)
            later = [v for v in vits if vits.index(v) > vits.index(spec)]
            earlier = [v for v in vits if vits.index(v) < vits.index(spec)]
            carry = 0.0
            if later:
                carry += n * spec.channels * spec.image_size**2 * BF16_BYTES
            carry += sum(v.images * (v.output_tokens or v.patches_per_image) * v.hidden * BF16_BYTES for v in earlier)
            for i in range(spec.layers):
                extra_p = (parts["pre"] if i == 0 else 0) + (parts["post"] if i == spec.layers - 1 else 0)
                piece = _block_piece(spec, f"{spec.name}.{i}", tokens, pairs, extra_p, patch_flops if i == 0 else 0.0)
                fq = (_fqn(spec, "pre") if i == 0 else ()) + _fqn(spec, "block", i) + (_fqn(spec, "post") if i == spec.layers - 1 else ())
                out = tokens * spec.hidden * BF16_BYTES + carry
                if i == spec.layers - 1:
                    out = n * (spec.output_tokens or spec.patches_per_image) * spec.hidden * BF16_BYTES + carry
                layers.append(PipelineLayer(f"{spec.name}.{i}", spec.name, "vision", (piece,), out, fq))
        elif spec.kind == "projector":
            t = spec.tokens
            dims = (spec.in_dim, *spec.dims)
            gemm = 2.0 * t * sum(a * b for a, b in zip(dims, dims[1:]))
            # stored per linear: its input; per activation function: its input (as Korthikanti's MLP term)
            sharded = sum(2 * BF16_BYTES * t * d for d in spec.dims[:-1])
            replicated = BF16_BYTES * t * spec.in_dim + (BF16_BYTES * t * spec.pre_norm_dim if spec.pre_norm_dim else 0)
            piece = Piece(
                name=spec.name,
                module=spec.name,
                kind="dense",
                gemm_flops=gemm,
                attn_flops=0.0,
                params=parts["pre"],
                tokens=t,
                width=min(dims),
                allreduces=max(1, len(spec.dims) // 2),
                dense_act=(replicated, sharded),
                tp_dims=tuple(spec.dims),
                frozen=spec.frozen,
            )
            layers.append(PipelineLayer(spec.name, spec.name, "projector", (piece,), t * spec.out_dim * BF16_BYTES, _fqn(spec, "pre")))
        elif spec.kind == "llm":
            h = spec.hidden
            embed = Piece(
                name=f"{spec.name}.embed",
                module=spec.name,
                kind="dense",
                gemm_flops=0.0,
                attn_flops=0.0,
                params=parts["pre"],
                tokens=s_llm,
                width=h,
                allreduces=1,  # vocab-parallel embedding
                frozen=spec.frozen,
            )
            layers.append(PipelineLayer(f"{spec.name}.embed", spec.name, "embedding", (embed,), s_llm * h * BF16_BYTES, _fqn(spec, "pre")[:1]))
            if spec.attention == "causal":
                pairs = s_llm * (s_llm + 1) / 2.0
            else:  # prefix (PaliGemma) or bidirectional: every prefix pair
                pairs = float(s_llm * s_llm)
            e_parts = module_layer_params(expert) if expert else None
            for i in range(spec.layers):
                last = i == spec.layers - 1
                extra_p = parts["post"] if last and not spec.lm_head else 0
                s_all = s_llm + (expert.tokens if expert is not None else 0)
                pieces = [_block_piece(spec, f"{spec.name}.{i}", s_llm, pairs, extra_p, scores=float(s_llm * s_all))]
                fq = _fqn(spec, "block", i) + (_fqn(spec, "post")[:1] if last and not spec.lm_head else ())
                out = s_llm * h * BF16_BYTES
                if expert is not None:
                    s_e = expert.tokens
                    e_pairs = float(s_e * (s_llm + s_e))  # the suffix attends to the prefix and to itself
                    e_extra = (e_parts["pre"] if i == 0 else 0) + (e_parts["post"] if last else 0)
                    io = 0.0
                    if i == 0:
                        io += 2.0 * s_e * (expert.action_dim * expert.hidden + 2 * expert.hidden * expert.hidden + expert.hidden**2)
                    if last:
                        io += 2.0 * s_e * expert.hidden * expert.action_dim
                    pieces.append(_block_piece(expert, f"{expert.name}.{i}", s_e, e_pairs, e_extra, io, scores=float(s_e * s_all)))
                    fq += (_fqn(expert, "pre") if i == 0 else ()) + _fqn(expert, "block", i) + (_fqn(expert, "post") if last else ())
                    out += s_e * expert.hidden * BF16_BYTES
                layers.append(PipelineLayer(f"{spec.name}.{i}", spec.name if expert is None else f"{spec.name}+{expert.name}", "decoder", tuple(pieces), out, fq))
            if spec.lm_head:
                V = spec.vocab
                head_params = parts["post"] + (V * h if spec.tie_embeddings else 0)  # a tied head keeps its own copy
                head = Piece(
                    name=f"{spec.name}.head",
                    module=spec.name,
                    kind="dense",
                    gemm_flops=2.0 * s_llm * h * V,
                    attn_flops=0.0,
                    params=head_params,
                    tokens=s_llm,
                    width=h,
                    allreduces=1,
                    # Korthikanti Sec. 4.3: the output norm and projection inputs, fp32 logits for the loss
                    dense_act=(BF16_BYTES * s_llm * h, 4.0 * s_llm * V),
                    frozen=spec.frozen,
                )
                layers.append(PipelineLayer(f"{spec.name}.head", spec.name, "loss", (head,), 0.0, _fqn(spec, "post")))
        elif spec.kind == "action_head":
            t = spec.tokens + spec.cond_tokens
            pairs = float(t * t)
            for i in range(spec.layers):
                last = i == spec.layers - 1
                extra_p = (parts["pre"] if i == 0 else 0) + (parts["post"] if last else 0)
                extra_f = 0.0
                if i == 0:
                    extra_f += 2.0 * (spec.cond_tokens * spec.cond_dim * spec.hidden + spec.tokens * spec.action_dim * spec.hidden)
                if last:
                    extra_f += 2.0 * spec.tokens * spec.hidden * spec.action_dim
                piece = _block_piece(spec, f"{spec.name}.{i}", t, pairs, extra_p, extra_f, passes=spec.passes)
                fq = (_fqn(spec, "pre") if i == 0 else ()) + _fqn(spec, "block", i) + (_fqn(spec, "post") if last else ())
                out = 0.0 if last else spec.passes * t * spec.hidden * BF16_BYTES
                layers.append(PipelineLayer(f"{spec.name}.{i}", spec.name, "action", (piece,), out, fq))
        elif spec.kind == "action_expert":
            continue  # fused into the llm's layers above
    # frozen modules with nothing trainable before them run no backward at all
    trainable_seen = False
    result = []
    for layer in layers:
        pieces = []
        for piece in layer.pieces:
            if not piece.frozen:
                trainable_seen = True
            pieces.append(replace(piece, backward=trainable_seen or not piece.frozen))
        result.append(replace(layer, pieces=tuple(pieces)))
    return result


# --------------------------------------------------------------------------- per-layout costs


def block_activation_bytes(s: float, b: float, h: float, a: float, t: int, *, pairs: float | None = None,
                           flash_attention: bool = False, sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Activation bytes one transformer block stores per microbatch (Korthikanti et al. [2]_).

    ``s`` tokens, ``b`` samples, width ``h``, ``a`` heads, tensor-parallel
    degree ``t``; ``pairs`` score-matrix entries per head and sample
    (``s**2`` for self-attention, causal or not: the masked half is stored
    too), so the ``5 a s / h`` term is ``5 a b pairs / (s b h)``.
    """
    pairs = s * s if pairs is None else pairs
    if recompute == "full":
        stored = 2.0 * s * b * h
        return stored / t if sequence_parallel else stored
    score = 0.0 if (flash_attention or recompute == "selective") else 5.0 * a * b * pairs / t
    if sequence_parallel:
        return 34.0 * s * b * h / t + score
    return s * b * h * (10.0 + 24.0 / t) + score


def efficiency(width: float, tokens: float, opts: CostOptions) -> float:
    """Fraction of peak a GEMM of per-GPU ``width`` over ``tokens`` rows reaches."""
    k = opts.efficiency_exponent

    def hill(x: float, half: float) -> float:
        return 1.0 if half <= 0 else x**k / (x**k + half**k)

    return opts.efficiency_max * hill(width, opts.gemm_half_width) * hill(tokens, opts.gemm_half_tokens)


def allreduce_ms(nbytes: float, ranks: int, GBps: float, opts: CostOptions, link_efficiency: float | None = None) -> float:
    """One ring all-reduce of ``nbytes`` over ``ranks`` GPUs, each on a ``GBps`` link, in ms [7]_."""
    if ranks <= 1:
        return 0.0
    eff = opts.nvlink_efficiency if link_efficiency is None else link_efficiency
    volume = 2.0 * (ranks - 1) / ranks * nbytes
    return opts.collective_latency_us * 1e-3 + volume / (eff * GBps * 1e6)


def grad_sync_ms(trainable_params: float, layout: Layout, cluster: ClusterSpec, opts: CostOptions) -> float:
    """The data-parallel gradient all-reduce of a stage's ``trainable_params``, once per iteration.

    A stage of at most one node syncs over NVLink; a larger one over the network.
    """
    if layout.dp <= 1 or trainable_params <= 0:
        return 0.0
    inside = layout.devices <= cluster.gpus_per_node
    bw = cluster.intra_node_GBps if inside else cluster.inter_node_GBps
    nbytes = trainable_params / layout.tp * opts.grad_bytes_per_param
    return allreduce_ms(nbytes, layout.dp, bw, opts, link_efficiency=opts.nvlink_efficiency if inside else 1.0)


@dataclass(frozen=True)
class _Cost:
    fwd_ms: float
    bwd_ms: float
    weight_bytes: int
    act_bytes: int


def layer_cost(layer: PipelineLayer, layout: Layout, samples: float, cluster: ClusterSpec, opts: CostOptions,
               microbatches: int = 1) -> _Cost:
    """Time and memory of ``layer`` per microbatch on each GPU of a ``layout`` stage.

    ``samples`` is the per-replica microbatch ``(global_batch / m) / dp``;
    ``microbatches`` (m) spreads the per-iteration gradient sync.
    """
    t, dp, b = layout.tp, layout.dp, samples
    flop_per_ms = cluster.peak_tflops * 1e9
    fwd = bwd = 0.0
    weight = act = 0.0
    for p in layer.pieces:
        rows = b * p.tokens * p.passes
        rate = flop_per_ms * efficiency(p.width / t, rows, opts)
        f_gemm = b * p.gemm_flops / t / rate
        f_attn = b * p.attn_flops / t / rate
        comm = p.allreduces * allreduce_ms(rows * p.width * BF16_BYTES, t, cluster.intra_node_GBps, opts)
        fwd += f_gemm + f_attn + comm
        if p.backward:
            attn_factor = opts.flash_backward_factor if opts.flash_attention else 2.0
            bwd += (1.0 if p.frozen else 2.0) * f_gemm + attn_factor * f_attn + comm
            if opts.recompute == "full":
                bwd += f_gemm + f_attn + comm
            elif opts.recompute == "selective" and not opts.flash_attention:
                bwd += f_attn
        if p.frozen:
            weight += p.params * opts.frozen_bytes_per_param / t
        else:
            per_param = opts.bytes_per_param
            if opts.zero1:
                per_param -= opts.optimizer_bytes_per_param * (1.0 - 1.0 / dp)
            weight += p.params * per_param / t
        if not p.backward:
            continue  # runs under no_grad: nothing kept for a backward pass
        if p.kind == "block":
            act += p.passes * block_activation_bytes(
                p.tokens, b, p.width, p.heads, t, pairs=p.score_entries, flash_attention=opts.flash_attention,
                sequence_parallel=opts.sequence_parallel, recompute=opts.recompute,
            )
        else:
            replicated, sharded = p.dense_act
            act += b * (replicated / (t if opts.sequence_parallel else 1) + sharded / t)
    trainable = sum(p.params for p in layer.pieces if not p.frozen)
    bwd += (1.0 - opts.grad_sync_overlap) * grad_sync_ms(trainable, layout, cluster, opts) / microbatches
    return _Cost(fwd, bwd, int(math.ceil(weight)), int(math.ceil(act)))


def layouts_for(layer: PipelineLayer, cluster_layouts: Sequence[Layout], microbatch: int, opts: CostOptions) -> list[Layout]:
    """The layouts ``layer`` can run in: tp divides its heads and widths, dp divides the microbatch."""
    out = []
    for lay in cluster_layouts:
        if microbatch % lay.dp:
            continue
        if opts.max_tp is not None and lay.tp > opts.max_tp:
            continue
        if any(d % lay.tp for p in layer.pieces for d in p.tp_dims):
            continue
        out.append(lay)
    return out


def cluster_layouts(gpus_per_node: int, nodes: int) -> list[Layout]:
    """Every (dp, tp) whose size rule 3 allows, tp a power of two within a node."""
    from .problem import Cluster

    cluster = Cluster(nodes, gpus_per_node, 1, 1.0, 1.0)
    out = []
    for d in cluster.allowed_sizes():
        tp = 1
        while tp <= min(d, gpus_per_node):
            if d % tp == 0:
                lay = Layout(d // tp, tp)
                if cluster.allows(lay):
                    out.append(lay)
            tp *= 2
    return out


# --------------------------------------------------------------------------- FLOPs summaries


def forward_flops(layers: Iterable[PipelineLayer]) -> float:
    """Forward FLOPs per sample of the given layers (weighted matmuls plus attention core)."""
    return sum(p.gemm_flops + p.attn_flops for layer in layers for p in layer.pieces)


def model_flops_per_sample(layers: Iterable[PipelineLayer]) -> float:
    """FLOPs one sample needs for forward and backward, without recomputation (model FLOPs [8]_).

    3 x forward for trainable pieces, 2 x for frozen pieces that pass
    gradients through (input gradients only), 1 x for a frozen prefix.
    """
    total = 0.0
    for layer in layers:
        for p in layer.pieces:
            f = p.gemm_flops + p.attn_flops
            if not p.backward:
                total += f
            elif p.frozen:
                total += 2.0 * f + p.attn_flops  # attention core still needs both its matmuls' gradients
            else:
                total += 3.0 * f
    return total


# --------------------------------------------------------------------------- the problem


def build_problem(
    model: str | ModelSpec,
    cluster: str | ClusterSpec,
    *,
    nodes: int,
    global_batch: int,
    microbatches: int,
    options: Mapping[str, Any] | CostOptions | None = None,
    objective: str = "iteration",
    profile: str | Path | Sequence[Mapping[str, Any]] | None = None,
    max_stages: int | None = None,
) -> Problem:
    """A v1 problem for training ``model`` on ``nodes`` nodes of ``cluster``.

    Parameters
    ----------
    model, cluster : str or spec
        A preset name, a YAML/``config.json`` path, or a spec object.
    nodes : int
        Nodes of the cluster to use.
    global_batch : int
        Samples per iteration; each of the ``microbatches`` microbatches holds
        ``global_batch / microbatches`` samples, split over each stage's dp.
    options : mapping or CostOptions, optional
        Cost-model options (:class:`CostOptions`).
    objective : {"iteration", "bottleneck"}
    profile : path or records, optional
        Profiled per-layer times replacing the analytic ones (:func:`apply_profile`).
    max_stages : int, optional
        Upper bound on the number of stages (default: min(layers, GPUs)).

    Returns
    -------
    Problem
        One cost entry per allowed layout; ``meta`` carries the model name,
        batch, FLOPs per iteration, peak FLOPs and per-layer export hints.
    """
    spec = load_model(model)
    cl = load_cluster(cluster)
    opts = CostOptions.from_mapping(options)
    for name, value in (("nodes", nodes), ("global_batch", global_batch), ("microbatches", microbatches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(f"must be a positive integer, got {value!r}", path=name)
    if global_batch % microbatches:
        raise ProblemError(
            f"global batch {global_batch} is not divisible into {microbatches} microbatches", path="microbatches"
        )
    if objective not in OBJECTIVES:
        raise ProblemError(f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}", path="objective")
    mb = global_batch // microbatches
    layers = model_layers(spec, opts)
    all_layouts = cluster_layouts(cl.gpus_per_node, nodes)
    memory = cl.gpu_memory_bytes - opts.memory_reserve_bytes
    if memory <= 0:
        raise ProblemError("memory_reserve_bytes leaves no GPU memory", path="options.memory_reserve_bytes")

    doc_layers = []
    for layer in layers:
        allowed = layouts_for(layer, all_layouts, mb, opts)
        if not allowed:
            raise ProblemError(
                f"layer {layer.name} has no usable layout: dp must divide the microbatch of {mb} samples "
                f"and tp its heads and widths",
                path="microbatches",
            )
        costs = {}
        for lay in allowed:
            c = layer_cost(layer, lay, mb / lay.dp, cl, opts, microbatches)
            costs[lay.key] = {"fwd_ms": c.fwd_ms, "bwd_ms": c.bwd_ms, "weight_bytes": c.weight_bytes, "act_bytes": c.act_bytes}
        doc_layers.append(
            {"name": layer.name, "module": layer.module, "out_bytes": int(round(mb * layer.out_bytes_per_sample)), "costs": costs}
        )
    flops_sample = model_flops_per_sample(layers)
    meta = {
        "generator": "partitioner.costs",
        "model": spec.name,
        "cluster": cl.name,
        "nodes": nodes,
        "global_batch": global_batch,
        "microbatch_size": mb,
        "llm_tokens_per_sample": spec.llm_tokens,
        "model_flops_per_iteration": flops_sample * global_batch,
        "forward_flops_per_sample": forward_flops(layers),
        "peak_flops_per_gpu": cl.peak_tflops * 1e12,
        "params": spec.params,
        "options": opts.to_dict(),
        "layers": [
            {"name": layer.name, "module": layer.module, "role": layer.role, "params": layer.params, "fqns": list(layer.fqns)}
            for layer in layers
        ],
    }
    doc = {
        "version": 1,
        "name": f"{spec.name}-{cl.name}-{nodes}n-b{global_batch}-m{microbatches}",
        "cluster": {
            "nodes": nodes,
            "gpus_per_node": cl.gpus_per_node,
            "gpu_memory_bytes": int(memory),
            "intra_node_GBps": cl.intra_node_GBps,
            "inter_node_GBps": cl.inter_node_GBps,
        },
        "training": {"microbatches": microbatches, "objective": objective},
        "layers": doc_layers,
        "meta": meta,
    }
    if max_stages is not None:
        if isinstance(max_stages, bool) or not isinstance(max_stages, int) or max_stages < 1:
            raise ProblemError(f"must be a positive integer, got {max_stages!r}", path="max_stages")
        doc["stages"] = {"min": 1, "max": min(max_stages, len(doc_layers), nodes * cl.gpus_per_node)}
    if profile is not None:
        records = load_profile(profile) if isinstance(profile, (str, Path)) else list(profile)
        doc = _apply_profile_doc(doc, records, source=str(profile) if isinstance(profile, (str, Path)) else "profile")
    return Problem.from_dict(doc)


# --------------------------------------------------------------------------- profiled times


def load_profile(path: str | Path) -> list[dict[str, Any]]:
    """Profiled times from CSV (columns ``layer, layout, fwd_ms, bwd_ms``) or JSON/YAML.

    JSON/YAML: a list of such records, or ``{"layers": [...]}``. ``layer``
    is a layer name or a shell pattern (``llm.*``); ``layout`` a key such as
    ``dp2tp4`` or ``*`` for every layout.
    """
    path = Path(path)
    if path.suffix.lower() == ".csv":
        try:
            with path.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        except FileNotFoundError:
            raise ProblemError("file not found", source=str(path)) from None
        except (OSError, UnicodeDecodeError, csv.Error) as err:
            raise ProblemError(f"cannot read CSV: {err}", source=str(path)) from None
        records = []
        for i, row in enumerate(rows):
            rec: dict[str, Any] = dict(row)
            for key in ("fwd_ms", "bwd_ms"):
                try:
                    rec[key] = float(row.get(key) or "")
                except ValueError:
                    raise ProblemError(f"must be a number, got {row.get(key)!r}", path=f"row {i + 2}.{key}", source=str(path)) from None
            records.append(rec)
        return records
    data = read_document(path)
    if isinstance(data, Mapping) and "layers" in data:
        data = data["layers"]
    if not isinstance(data, list):
        raise ProblemError("must be a list of {layer, layout, fwd_ms, bwd_ms} records (or {layers: [...]})", source=str(path))
    return list(data)


def apply_profile(problem: Problem, profile: str | Path | Sequence[Mapping[str, Any]]) -> Problem:
    """``problem`` with the profiled ``fwd_ms``/``bwd_ms`` in place of the analytic ones.

    Memory, boundaries and unprofiled entries are kept. A record matching
    no layer, or naming a layout the layer does not have, is an error.
    """
    records = load_profile(profile) if isinstance(profile, (str, Path)) else list(profile)
    source = str(profile) if isinstance(profile, (str, Path)) else "profile"
    return Problem.from_dict(_apply_profile_doc(problem.to_dict(), records, source))


def _apply_profile_doc(doc: dict[str, Any], records: Sequence[Mapping[str, Any]], source: str) -> dict[str, Any]:
    names = [layer["name"] for layer in doc["layers"]]
    replaced = 0
    for i, rec in enumerate(records):
        where = f"[{i}]"
        if not isinstance(rec, Mapping):
            raise ProblemError("must be an object", path=where, source=source)
        for key in ("layer", "layout", "fwd_ms", "bwd_ms"):
            if key not in rec:
                raise ProblemError("is missing", path=f"{where}.{key}", source=source)
        for key in ("fwd_ms", "bwd_ms"):
            v = rec[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ProblemError(f"must be a number >= 0, got {v!r}", path=f"{where}.{key}", source=source)
        pattern, layout = str(rec["layer"]), str(rec["layout"])
        hits = [k for k, n in enumerate(names) if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise ProblemError(f"matches no layer (layers: {names[0]} .. {names[-1]})", path=f"{where}.layer", source=source)
        for k in hits:
            costs = doc["layers"][k]["costs"]
            keys = list(costs) if layout == "*" else [layout]
            for key in keys:
                if key not in costs:
                    raise ProblemError(
                        f"layer {names[k]} has no layout {key} (it has {', '.join(costs)})", path=f"{where}.layout", source=source
                    )
                costs[key] = dict(costs[key], fwd_ms=float(rec["fwd_ms"]), bwd_ms=float(rec["bwd_ms"]))
                replaced += 1
    meta = dict(doc.get("meta") or {})
    meta["profiled_entries"] = replaced
    doc["meta"] = meta
    return doc
