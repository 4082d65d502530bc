"""Analytical cost model: a model spec + a cluster + a training setup -> a problem.

The package, one job per module: :mod:`.options` (every constant),
:mod:`.comm` (collectives), :mod:`.layers` (model -> pipeline layers),
:mod:`.entry` (one layer in one layout), :mod:`.variants` (the memory
knobs as format-v2 variants), :mod:`.build` (the problem),
:mod:`.profile` (profiled times); the terms below the entries in
subpackages, each importing only the ones before it: :mod:`.attention`
(flash attention, MLA), :mod:`.memory` (activation and parameter bytes,
recompute, tied copies, HBM traffic), :mod:`.compute` (FLOPs and GEMM
efficiency, GPU generations, FP8), :mod:`.axes` (cp and ep).
Every public name is re-exported here.

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
* **memory-bound work** (:mod:`.memory.traffic`): norms, residual adds, dropouts,
  activations, rotary, the softmax over the score matrix without flash
  attention (whose matmuls then compute every entry), the embedding and
  the loss, by the bytes they move at the GPU's HBM bandwidth x
  ``hbm_efficiency``; the optimizer step over the parameters a GPU owns.
  The backward's tensor-parallel collectives hide behind the weight
  gradients (``tp_comm_overlap``); :func:`block_time_terms` names each term.
* **memory**: weights, gradients and Adam states at 18 B/param as
  Megatron-LM counts them (bf16 weight, fp32 gradient, fp32 master,
  momentum, variance), divided by tp; with ``zero1`` the 12 optimizer
  bytes are also divided by dp (6 + 12/d); frozen weights keep 2 B/param. Activations per block and microbatch are counted from
  the block's own shapes (:mod:`.memory.activations`): norm inputs, the QKV input,
  Q/K/V with grouped-query heads and head_dim, the attention output (plus
  the score matrix without flash attention), the MLP input and its
  intermediates (4 tensors of width ffn for a gated MLP), layer scale,
  QK-norm and dropout masks where the model has them. For the GPT-3 block
  this is Korthikanti et al.'s ``s b h (34 + 5 a s / h)`` [2]_; Gemma-2B's
  block keeps 76.5 s b h. ÷ tp with sequence parallelism; selective
  recompute drops the score matrix; full recompute keeps only the block
  input ``2 s b h`` (``/ t`` with sequence parallelism).
* **memory knobs** (format v2, option ``variants``): per layout, ZeRO 0/1/3
  x recompute none/selective/full as variant keys (``dp8tp1/zero3``);
  ZeRO-3 (FSDP full shard) divides weights, gradients and optimizer states
  by dp and pays a parameter all-gather in forward and backward and a
  gradient reduce-scatter per microbatch (``zero3_overlap`` hidden);
  every entry splits its backward into B (input gradients) and W (weight
  gradients, gradient sync).
* **work a real run skips** (:mod:`.layers`): no backward for a frozen
  prefix, no input gradient for the first trainable module, forward only
  for vision blocks after the feature layer, pi0's last prefix layer
  backpropagates through K and V only.
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

A tied LM head's entries carry the all-reduce of the embedding's gradient
between the first and last pipeline stage (Megatron-LM's embedding group;
:func:`~.entry.tied_sync_ms`), once per iteration.

Not modelled: pipeline-send overlap, kernel-launch gaps, stragglers.

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

from ..presets import list_clusters, list_models, load_cluster, load_model
from .build import ProblemBuilder, TermsStore, build_problem, cluster_layouts, layouts_for, usable_memory_bytes
from .comm import allreduce_ms, grad_sync_ms
from .compute.flops import efficiency, forward_flops, model_flops_per_sample
from .entry import TIME_TERMS, block_time_terms, layer_cost, optimizer_step_ms, tied_sync_ms
from .layers import Piece, PipelineLayer, model_layers
from .memory.activations import BlockShape, block_activation_bytes, block_activation_terms
from .memory.param_memory import PARAM_MEMORY, ParamBytes, param_memory
from .memory.traffic import Traffic, block_traffic, traffic_ms
from .options import BF16_BYTES, CostOptions
from .profile import apply_profile, load_profile
from .variants import ALL_VARIANTS, Knobs, parse_variant

__all__ = [
    "CostOptions",
    "Piece",
    "PipelineLayer",
    "build_problem",
    "ProblemBuilder",
    "TermsStore",
    "model_layers",
    "layer_cost",
    "block_time_terms",
    "TIME_TERMS",
    "optimizer_step_ms",
    "tied_sync_ms",
    "usable_memory_bytes",
    "Traffic",
    "block_traffic",
    "traffic_ms",
    "layouts_for",
    "cluster_layouts",
    "block_activation_bytes",
    "block_activation_terms",
    "BlockShape",
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
    "ALL_VARIANTS",
    "Knobs",
    "parse_variant",
    "PARAM_MEMORY",
    "ParamBytes",
    "param_memory",
]
