"""Plans of the VLMs NVIDIA ships Megatron Bridge recipes for, as that recipe's launch with Hydra overrides.

:data:`BRIDGE_RECIPES` maps a preset to its full-SFT recipe; :func:`bridge_overrides` writes the plan as
``KEY=VALUE`` overrides of the recipe's ``ConfigContainer`` (``model.*`` TransformerConfig fields, ``ddp.*``,
``train.*`` batch, ``dataset.seq_length``, ``mixed_precision=<preset>`` for FP8 via :func:`bridge_fp8`),
resetting what the recipe sets and the plan leaves off; the model's shape and router stay the provider's
(:data:`PROVIDER_FIELDS`). :func:`bridge_snippet` is the ``run_recipe.py`` launch, the layout quoted for
Hydra's grammar (:func:`hydra_value`). Names and fields are Bridge's at :data:`BRIDGE_COMMIT`.

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.megatron.bridge``.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Sequence

__all__ = ["BRIDGE_COMMIT", "BridgeRecipe", "BRIDGE_RECIPES", "PROVIDER_FIELDS", "Fp8Preset", "BRIDGE_FP8_PRESETS",
           "bridge_fp8", "bridge_overrides", "bridge_snippet", "hydra_value"]

BRIDGE_COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"
"""The Megatron Bridge commit whose recipe names, runner arguments and config fields the export uses."""

_BLOB = f"https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{BRIDGE_COMMIT}/src/megatron/bridge/recipes/"


@dataclass(frozen=True)
class BridgeRecipe:
    """One Megatron Bridge full-SFT recipe: its function, the forward step the runner pairs with it, its source."""

    function: str
    step_func: str
    hf_path: str
    source: str


BRIDGE_RECIPES: Mapping[str, BridgeRecipe] = MappingProxyType({
    "qwen3-vl-30b-a3b": BridgeRecipe("qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config", "qwen3_vl_step",
                                     "Qwen/Qwen3-VL-30B-A3B-Instruct", _BLOB + "qwen_vl/h100/qwen3_vl.py"),
    "qwen3-vl-235b-a22b": BridgeRecipe("qwen3_vl_235b_a22b_sft_32gpu_h100_bf16_config", "qwen3_vl_step",
                                       "Qwen/Qwen3-VL-235B-A22B-Instruct", _BLOB + "qwen_vl/h100/qwen3_vl.py"),
    "glm-4.5v": BridgeRecipe("glm_45v_sft_128gpu_h100_bf16_config", "vlm_step", "zai-org/GLM-4.5V",
                             _BLOB + "glm_vl/h100/glm_45v.py"),
    "qwen2.5-vl-72b": BridgeRecipe("qwen25_vl_72b_sft_32gpu_h100_bf16_config", "vlm_step",
                                   "Qwen/Qwen2.5-VL-72B-Instruct", _BLOB + "qwen_vl/h100/qwen25_vl.py"),
    "qwen2.5-vl-7b-video-64f": BridgeRecipe("qwen25_vl_7b_sft_2gpu_h100_bf16_config", "vlm_step",
                                            "Qwen/Qwen2.5-VL-7B-Instruct", _BLOB + "qwen_vl/h100/qwen25_vl.py"),
})
"""Preset -> the Bridge SFT recipe of the same checkpoint (the step is the runner's registry entry for its prefix)."""

PROVIDER_FIELDS = frozenset({
    "num_moe_experts", "moe_router_topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size",
    "moe_layer_freq", "moe_router_score_function", "moe_router_pre_softmax", "moe_router_enable_expert_bias",
    "moe_router_load_balancing_type", "moe_aux_loss_coeff", "moe_router_num_groups", "moe_router_group_topk",
    "moe_router_topk_scaling_factor", "bf16", "fp8", "fp8_recipe", "fp8_param", "first_last_layers_bf16",
    "num_layers_at_start_in_bf16", "num_layers_at_end_in_bf16", "fp8_param_gather",
    "reuse_grad_buf_for_mxfp8_param_ag",
})
"""TransformerConfig / DDP-config fields the export leaves to the provider (the checkpoint's shape and router,
from its Hugging Face config) or to the mixed-precision preset (``bf16``, ``fp8*``, the BF16 edge layers: the
preset writes its own values over the model's and the DDP config's at setup)."""


@dataclass(frozen=True)
class Fp8Preset:
    """One of Bridge's FP8 mixed-precision presets: its name, whether it keeps fp8 parameters, its BF16 edge layers."""

    name: str
    param_gather: bool
    bf16_layers: int


BRIDGE_FP8_PRESETS: Mapping[str, Fp8Preset] = MappingProxyType({
    "delayed": Fp8Preset("bf16_with_fp8_delayed_scaling_mixed", True, 0),
    "tensorwise": Fp8Preset("bf16_with_fp8_current_scaling_mixed", True, 1),
    "blockwise": Fp8Preset("bf16_with_fp8_subchannel_scaling_mixed", False, 0),
    "mxfp8": Fp8Preset("bf16_with_mxfp8_mixed", True, 0),
})
"""megatron-core's ``fp8_recipe`` -> Bridge's mixed-precision preset that trains with it, with the preset's
``fp8_param_gather`` and ``num_layers_at_start/end_in_bf16`` (``first_last_layers_bf16``), as ``src/megatron/bridge/training/mixed_precision.py`` of Megatron Bridge commit 067f987d defines them. The recipe
names its mixed precision by a string, which Hydra overrides replace whole: FP8 runs as one of these presets,
exactly."""


def bridge_fp8(recipe: str, param_gather: bool, bf16_layers: int) -> tuple[Fp8Preset | None, str | None]:
    """The preset that trains the plan's FP8 as planned, or why none does."""
    preset = BRIDGE_FP8_PRESETS.get(recipe)
    if preset is None:
        return None, f"Bridge has no mixed-precision preset for the FP8 recipe {recipe}"
    if (preset.param_gather, preset.bf16_layers) != (param_gather, bf16_layers):
        return None, (f"Bridge trains {recipe} FP8 with its preset {preset.name}: fp8 parameters "
                      f"{'on' if preset.param_gather else 'off'}, {preset.bf16_layers} BF16 layer(s) at each end; the "
                      f"plan has fp8 parameters {'on' if param_gather else 'off'} and {bf16_layers} (the preset is "
                      "named by a string, which an override replaces whole, so its fields cannot be set one by one); "
                      f"plan again with --cost-option fp8_param_gather={'true' if preset.param_gather else 'false'} "
                      f"--cost-option fp8_bf16_layers={preset.bf16_layers}")
    return preset, None


# recipe fields the plan may leave unset: written as their off value so the recipe's own choice never runs
_RESET = {"virtual_pipeline_model_parallel_size": None, "recompute_granularity": None, "recompute_method": None,
          "recompute_num_layers": None, "recompute_modules": None, "sequence_parallel": False,
          "context_parallel_size": 1, "expert_model_parallel_size": 1}


def hydra_value(value: Any) -> str:
    """``value`` in Hydra's override grammar: null, true/false, numbers, bare or quoted strings, lists."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if text.replace("_", "").replace("-", "").replace(".", "").isalnum():
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def bridge_overrides(core: Mapping[str, Any], ddp: Mapping[str, Any], te_core: Mapping[str, Any],
                     batch: tuple[int, int] | None, fp8: Fp8Preset | None, seq_length: int | None = None) -> list[str]:
    """The ``KEY=VALUE`` overrides (unquoted for the shell) of the plan's settings (module docstring).

    ``core`` / ``te_core`` / ``ddp`` are the Megatron-LM export's
    TransformerConfig and DDP-config fields, ``batch`` (micro, global), ``fp8`` the preset (:func:`bridge_fp8`),
    ``seq_length`` the plan's tokens per sample: ``dataset.seq_length`` (the runner sets the model's from the
    dataset's after the overrides: ``scripts/training/run_recipe.py`` of Megatron Bridge commit 067f987d).
    """
    out: list[str] = []
    model = {k: v for k, v in {**core, **te_core}.items() if k not in PROVIDER_FIELDS}
    for key, off in _RESET.items():
        model.setdefault(key, off)
    for key, value in model.items():
        out.append(f"model.{key}={hydra_value(value)}")
    zero1 = bool(ddp.get("use_distributed_optimizer"))
    fsdp = bool(ddp.get("use_megatron_fsdp"))
    out += [f"ddp.use_distributed_optimizer={hydra_value(zero1)}", f"optimizer.use_distributed_optimizer={hydra_value(zero1)}",
            f"ddp.use_megatron_fsdp={hydra_value(fsdp)}"]
    for key, value in ddp.items():
        if key not in ("use_distributed_optimizer", "use_megatron_fsdp") and key not in PROVIDER_FIELDS:
            out.append(f"ddp.{key}={hydra_value(value)}")
    if batch is not None:
        out += [f"train.micro_batch_size={batch[0]}", f"train.global_batch_size={batch[1]}"]
    if seq_length is not None:
        out.append(f"dataset.seq_length={seq_length}")
    if fp8 is not None:
        out.append(f"mixed_precision={fp8.name}")
    return out


def _shell(override: str) -> str:
    """One override as a shell word: single-quoted when it holds a character the shell would read."""
    return f"'{override}'" if any(c in override for c in " \"|()*[],;&<>$`\\") else override


def bridge_snippet(recipe: BridgeRecipe, overrides: Sequence[str], world: int, env: Mapping[str, str]) -> str:
    """The launch: torchrun of Bridge's ``run_recipe.py`` with the recipe, its forward step and the overrides."""
    lines = [f"# {world} GPUs; run from a Megatron-Bridge checkout at {BRIDGE_COMMIT[:12]}",
             f"# recipe: {recipe.source} ({recipe.hf_path})"]
    lines += [f"export {k}={v}" for k, v in env.items()]
    lines.append("torchrun $DISTRIBUTED_ARGS scripts/training/run_recipe.py \\")
    words = [f"--recipe {recipe.function}", f"--step_func {recipe.step_func}", *(_shell(o) for o in overrides)]
    lines += ["    " + w + " \\" for w in words[:-1]] + ["    " + words[-1]]
    return "\n".join(lines)
