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

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs``.
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
