"""Model and cluster presets: architectures with published dimensions, GPU nodes.

A *model spec* lists the modules of a multimodal model in execution order
(vision encoders, a projector, the language model, an action expert or
head), each with the dimensions of its matmuls. A *cluster spec* describes
one kind of GPU node. Both are read from YAML files (``models/*.yaml`` and
``models/clusters/*.yaml``, shipped inside the package as
``partitioner/_presets``), from a path, or -- for single transformers --
from a Hugging Face ``config.json`` (:mod:`.hf`: 19 current VLM and LLM types).

Every preset names the source of its numbers (paper or model card) in its
``references`` and each module's ``source``.

More (the detail of this module): ``docs/internals/presets.md``, section ``partitioner.presets``.
"""
from __future__ import annotations

from .checks import check_cluster, check_model
from .files import (
    PRESET_ENV,
    cluster_from_dict,
    list_clusters,
    list_models,
    load_cluster,
    load_model,
    model_from_dict,
    preset_dirs,
)
from .hf import model_from_hf_config
from .hints import MlaHints
from .spec import (
    GPU_GENERATIONS,
    MODULE_KINDS,
    ClusterSpec,
    ModelSpec,
    ModuleSpec,
    block_params,
    gpu_generation,
    is_cross_layer,
    is_moe_layer,
    layer_active_params,
    layer_block_params,
    mla_down_params,
    module_active_params,
    module_layer_params,
    module_params,
    mtp_block_index,
    mtp_layer_params,
    with_module,
)
from .workload import Workload, apply_workload, check_workload, sequence_summary, with_mtp

__all__ = [
    "ModuleSpec",
    "ModelSpec",
    "ClusterSpec",
    "GPU_GENERATIONS",
    "gpu_generation",
    "MODULE_KINDS",
    "PRESET_ENV",
    "preset_dirs",
    "list_models",
    "list_clusters",
    "load_model",
    "load_cluster",
    "model_from_dict",
    "cluster_from_dict",
    "model_from_hf_config",
    "MlaHints",
    "check_model",
    "check_cluster",
    "module_params",
    "module_layer_params",
    "block_params",
    "is_cross_layer",
    "is_moe_layer",
    "layer_active_params",
    "layer_block_params",
    "mla_down_params",
    "module_active_params",
    "mtp_block_index",
    "mtp_layer_params",
    "with_module",
    "Workload",
    "apply_workload",
    "check_workload",
    "sequence_summary",
    "with_mtp",
]
