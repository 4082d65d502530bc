"""A DeepSpeed config JSON -- bare, or as ``export --to deepspeed --json`` writes it -- read as a Recipe.

Contract: :func:`read_deepspeed_config` reads the batch triple, the ZeRO
stage, the precision, ``activation_checkpointing`` and the ``pipeline``
section of a DeepSpeed config and returns the recipe they state, the data-
parallel size derived as DeepSpeed derives it (train_batch_size = micro x
accumulation x dp). Given the export document, it also reads the pipeline
module's settings the exporter writes beside the config (stages, boundaries,
tensor-parallel size, MoE ``ep_size``). What it cannot price is one
:class:`~partitioner.problem.ProblemError` naming the file and the field.

More (the detail of this module): ``docs/internals/frameworks.md``, section ``partitioner.frameworks.deepspeed.recipe``.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

from ...problem import ProblemError
from ..recipe import Recipe
from .rules import RULES

__all__ = ["read_deepspeed_config", "is_deepspeed_config", "DEEPSPEED_KEYS"]

DEEPSPEED_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                  "zero_optimization")
"""Top-level keys only a DeepSpeed config has (a Megatron Bridge config nests its fields under ``model``, ``train``,
``ddp``): ``auto`` reads a ``.json`` holding one of them, or the ``export --to deepspeed --json`` document, as DeepSpeed."""


def is_deepspeed_config(text: str) -> bool:
    """Whether ``text`` is a JSON object with a :data:`DEEPSPEED_KEYS` key, or the DeepSpeed export document."""
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and (any(k in doc for k in DEEPSPEED_KEYS) or _is_export(doc))


def _is_export(doc: Mapping[str, Any]) -> bool:
    return doc.get("target") == "deepspeed" and isinstance(doc.get("settings"), dict)


class _Fields:
    """The recipe fields read so far, with where each came from (``source: path``)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.fields: dict[str, Any] = {}
        self.origin: dict[str, str] = {}

    def put(self, name: str, value: Any, where: str) -> None:
        self.fields[name] = value
        self.origin[name] = f"{self.source}: {where}"

    def error(self, reason: str, where: str) -> ProblemError:
        return ProblemError(reason, path=where, source=self.source)


def _section(doc: Mapping[str, Any], key: str, where: str, out: _Fields) -> Mapping[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise out.error(f"must be an object, got {value!r}", where + key)
    return value


def _positive(doc: Mapping[str, Any], key: str, where: str, out: _Fields) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise out.error(f"must be a positive integer, got {value!r}", where + key)
    return value


def _enabled(doc: Mapping[str, Any], key: str, where: str, out: _Fields) -> bool:
    value = _section(doc, key, where, out).get("enabled", False)
    if not isinstance(value, bool):
        raise out.error(f"must be true or false, got {value!r}", f"{where}{key}.enabled")
    return value


def read_deepspeed_config(text: str, source: str = "recipe") -> Recipe:
    """The :class:`Recipe` a DeepSpeed config states (module docstring); ``source`` names it in errors."""
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise ProblemError(f"not JSON: {err}", source=source) from None
    out = _Fields(source)
    if not isinstance(doc, dict):
        raise out.error("a DeepSpeed config must be a JSON object", "config")
    where, module = "", None
    if _is_export(doc):  # export --to deepspeed --json: the config and the pipeline module's settings beside it
        if doc.get("expressible") is False:
            raise out.error("the export is not expressible in DeepSpeed: " + "; ".join(map(str, doc.get("reasons", []))),
                            "expressible")
        module, where = doc["settings"], "settings.ds_config."
        config = _section(module, "ds_config", "settings.", out)
    else:
        config = doc
    notes: list[str] = []
    _batch(config, where, out)
    zero = _zero(config, where, out, notes)
    _precision(config, where, out)
    _checkpointing(config, where, out, notes)
    _pipeline(config, where, out)
    if module is not None:
        _module(module, out)
    if out.fields.get("pp", 1) > 1 and zero > 1:
        raise out.error(f"ZeRO-{zero} with {out.fields['pp']} pipeline stages: DeepSpeed's PipelineEngine refuses "
                        "ZeRO-2 and ZeRO-3 under pipeline parallelism", f"{where}zero_optimization.stage")
    out.put("memory_count", RULES.memory[zero], f"{where}zero_optimization.stage")
    out.put("expert_fused_glu", RULES.expert_fused_glu, "the framework (deepspeed.moe.layer.MoE wraps the user's expert)")
    notes.append(f"DeepSpeed config: weights, gradients and optimizer states charged as DeepSpeed keeps them "
                 f"({RULES.memory[zero]})")
    try:
        return Recipe.from_fields(out.fields, out.origin, tuple(notes))
    except ProblemError as err:
        raise ProblemError(err.reason, path=err.path, source=source) from None


def _batch(config: Mapping[str, Any], where: str, out: _Fields) -> None:
    """The global batch, the micro batch and the dp they imply (DeepSpeed's train_batch_size = micro x gas x dp)."""
    total = _positive(config, "train_batch_size", where, out)
    micro = _positive(config, "train_micro_batch_size_per_gpu", where, out)
    steps = _positive(config, "gradient_accumulation_steps", where, out)
    if total is None:
        raise out.error("not stated: the estimate needs the global batch (from micro x accumulation DeepSpeed derives "
                        "it only with the dp world)", where + "train_batch_size")
    if micro is None:
        raise out.error("not stated: the micro batch per GPU is what a pipeline stage runs (from train_batch_size "
                        "DeepSpeed derives it only with the dp world)", where + "train_micro_batch_size_per_gpu")
    out.put("gbs", total, where + "train_batch_size")
    out.put("mbs", micro, where + "train_micro_batch_size_per_gpu")
    if steps is None:
        if total % micro:
            raise out.error(f"{total} is not a multiple of train_micro_batch_size_per_gpu {micro}",
                            where + "train_batch_size")
        return
    if total % (micro * steps):
        raise out.error(f"{total} is not train_micro_batch_size_per_gpu {micro} x gradient_accumulation_steps "
                        f"{steps} x dp for a whole dp (DeepSpeed's batch rule)", where + "train_batch_size")
    out.put("dp", total // (micro * steps), where + "train_batch_size")


def _zero(config: Mapping[str, Any], where: str, out: _Fields, notes: list[str]) -> int:
    """``zero_optimization.stage`` (0, 1 or 3: the stages the cost model prices); offload is refused."""
    zo = _section(config, "zero_optimization", where, out)
    stage = zo.get("stage", 0)
    path = f"{where}zero_optimization."
    if isinstance(stage, bool) or stage not in (0, 1, 3):
        raise out.error(f"must be 0, 1 or 3 (the ZeRO stages the cost model prices), got {stage!r}", path + "stage")
    for key in ("offload_optimizer", "offload_param"):
        value = zo.get(key)
        device = value.get("device", "none") if isinstance(value, dict) else value
        if device not in (None, "none"):
            raise out.error(f"offloading to {device!r} is not priced (the cost model keeps every state in GPU memory)",
                            path + key)
    tuning = sorted(set(zo) - {"stage", "offload_optimizer", "offload_param"})
    if tuning:
        notes.append(f"zero_optimization {', '.join(tuning)}: communication tuning, not priced")
    out.put("zero", stage, path + "stage")
    return stage


def _precision(config: Mapping[str, Any], where: str, out: _Fields) -> None:
    """BF16 training, the precision the cost model prices: fp16 and fp32 (neither enabled) are refused."""
    if _enabled(config, "fp16", where, out):
        raise out.error("fp16 training (loss scaling, fp16 weights) is not priced: the cost model prices BF16 "
                        "(bf16.enabled)", where + "fp16.enabled")
    key = "bfloat16" if "bfloat16" in config and "bf16" not in config else "bf16"
    if not _enabled(config, key, where, out):
        raise out.error("not true: DeepSpeed then trains in fp32, which the cost model does not price (it prices BF16 "
                        "training)", f"{where}{key}.enabled")


def _checkpointing(config: Mapping[str, Any], where: str, out: _Fields, notes: list[str]) -> None:
    """``activation_checkpointing``: how checkpoints are kept (partitioned or on the CPU is not priced)."""
    ac = _section(config, "activation_checkpointing", where, out)
    for key in ("partition_activations", "cpu_checkpointing"):
        value = ac.get(key, False)
        if value is not False:
            raise out.error(f"{value!r}: checkpoints split over the tensor-parallel ranks or kept on the CPU are not "
                            "priced (the cost model keeps whole layer inputs on the GPU)",
                            f"{where}activation_checkpointing.{key}")
    if ac:
        notes.append("activation_checkpointing: which layers are recomputed is the pipeline module's "
                     "activation_checkpoint_interval")


def _interval_recompute(value: Any, path: str, out: _Fields) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value not in (0, 1):
        raise out.error(f"must be 0 (no recompute) or 1 (every layer recomputed, as full recompute prices it), got "
                        f"{value!r}", path)
    return "full" if value == 1 else "none"


def _pipeline(config: Mapping[str, Any], where: str, out: _Fields) -> None:
    """DeepSpeed's ``pipeline`` section: ``stages`` (pp) and ``activation_checkpoint_interval`` (recompute)."""
    pipe = _section(config, "pipeline", where, out)
    path = f"{where}pipeline."
    stages = pipe.get("stages", "auto")
    if stages != "auto":
        out.put("pp", _positive(pipe, "stages", path, out), path + "stages")
    if "activation_checkpoint_interval" in pipe:
        out.put("recompute", _interval_recompute(pipe["activation_checkpoint_interval"],
                                                 path + "activation_checkpoint_interval", out),
                path + "activation_checkpoint_interval")


def _module(settings: Mapping[str, Any], out: _Fields) -> None:
    """The pipeline module's settings ``export --to deepspeed`` writes beside ``ds_config``."""
    for key, name in (("num_stages", "pp"), ("model_parallel_size", "tp")):
        value = _positive(settings, key, "settings.", out)
        if value is not None:
            out.put(name, value, f"settings.{key}")
    dp = _positive(settings, "data_parallel_size", "settings.", out)
    if dp is not None and dp != out.fields.get("dp", dp):
        raise out.error(f"{dp} disagrees with the config's batch: train_batch_size / (micro x accumulation) = "
                        f"{out.fields['dp']}", "settings.data_parallel_size")
    parts = settings.get("parts")
    if parts is not None:
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise out.error(f"must be a list of layer indices, got {parts!r}", "settings.parts")
        out.put("layer_parts", tuple(parts), "settings.parts")
    intervals = settings.get("activation_checkpoint_intervals")
    if intervals is not None:
        path = "settings.activation_checkpoint_intervals"
        if not isinstance(intervals, list) or not intervals:
            raise out.error(f"must be a list of 0 or 1 per stage, got {intervals!r}", path)
        settings_of = {_interval_recompute(v, path, out) for v in intervals}
        if len(settings_of) > 1:
            raise out.error(f"{intervals}: recompute on some stages only; the estimate states one recompute setting "
                            "for the model", path)
        out.put("recompute", settings_of.pop(), path)
    moe = settings.get("moe")
    if moe is not None:
        if not isinstance(moe, dict):
            raise out.error(f"must be an object, got {moe!r}", "settings.moe")
        ep = _positive(moe, "ep_size", "settings.moe.", out)
        if ep is not None:
            out.put("ep", ep, "settings.moe.ep_size")
        split = moe.get("enable_expert_tensor_parallelism", False)
        if not isinstance(split, bool):
            raise out.error(f"must be true or false, got {split!r}", "settings.moe.enable_expert_tensor_parallelism")
        if not split:  # experts whole on each rank; with it, over the whole TP group (etp = tp, the default)
            out.put("etp", 1, "settings.moe.enable_expert_tensor_parallelism")
