"""A torchtitan job TOML read as a :class:`~partitioner.frameworks.recipe.Recipe`.

Contract: :func:`read_torchtitan_toml` reads the ``[parallelism]``,
``[training]`` and ``[activation_checkpoint]`` tables of a torchtitan job
TOML and returns the recipe they state (degrees, ZeRO stage, microbatch,
global batch, recompute, weight memory as torchtitan keeps it); what it
cannot price faithfully is one :class:`~partitioner.problem.ProblemError`
naming the file and the field.

More (the detail of this module): ``docs/internals/frameworks.md``, section ``partitioner.frameworks.torchtitan.recipe``.
"""
from __future__ import annotations

import sys
from typing import Any, Mapping

from ...problem import ProblemError
from ..recipe import Recipe
from .rules import RULES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: the same parser as a package (pyproject's tomli)
    import tomli as tomllib

__all__ = ["read_torchtitan_toml"]

_DEGREES = {"tensor_parallel_degree": "tp", "pipeline_parallel_degree": "pp", "context_parallel_degree": "cp",
            "expert_parallel_degree": "ep", "expert_tensor_parallel_degree": "etp"}


def _table(doc: Mapping[str, Any], name: str, source: str) -> Mapping[str, Any]:
    value = doc.get(name, {})
    if not isinstance(value, dict):
        raise ProblemError("must be a table", path=name, source=source)
    return value


def _int(table: Mapping[str, Any], key: str, where: str, source: str, default: int) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProblemError(f"must be an integer, got {value!r}", path=f"{where}.{key}", source=source)
    return value


def read_torchtitan_toml(text: str, source: str = "recipe") -> Recipe:
    """The :class:`Recipe` a torchtitan job TOML states (module docstring); ``source`` names it in errors."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ProblemError(f"not TOML: {err}", source=source) from None
    par = _table(doc, "parallelism", source)
    train = _table(doc, "training", source)
    ac = _table(doc, "activation_checkpoint", source)
    fields: dict[str, Any] = {}
    origin: dict[str, str] = {}

    def put(name: str, value: Any, where: str) -> None:
        fields[name] = value
        origin[name] = f"{source}: {where}"

    for key, name in _DEGREES.items():
        put(name, _int(par, key, "parallelism", source, 1), f"parallelism.{key}")
    replicate = _int(par, "data_parallel_replicate_degree", "parallelism", source, 1)
    shard = _int(par, "data_parallel_shard_degree", "parallelism", source, -1)
    if shard != -1:
        put("dp", replicate * shard, "parallelism.data_parallel_shard_degree")
    reshard = par.get("fsdp_reshard_after_forward", "default")
    sharded = shard > 1 or shard == -1
    # FSDP2 that keeps the gathered weights from forward to backward is the ZeRO-1 knob, as plan --target prices it
    zero = (1 if reshard == "never" else 3) if sharded else 0
    put("zero", zero, "parallelism.fsdp_reshard_after_forward" if sharded and reshard == "never"
        else "parallelism.data_parallel_shard_degree")
    put("memory_count", RULES.memory[zero], "parallelism.data_parallel_shard_degree")
    put("expert_fused_glu", RULES.expert_fused_glu, "the framework (torchtitan's GroupedExperts)")
    schedule = par.get("pipeline_parallel_schedule", "1F1B")
    if fields["pp"] > 1 and schedule != "1F1B":
        raise ProblemError(f"{schedule!r}: the estimate runs Megatron's 1F1B (and interleaved with a "
                           "--pipeline-model-parallel-layout); state it as 1F1B or give the layout as flags",
                           path="parallelism.pipeline_parallel_schedule", source=source)
    local = _int(train, "local_batch_size", "training", source, 8)
    if fields["pp"] > 1:
        put("mbs", _int(par, "pipeline_parallel_microbatch_size", "parallelism", source, 1),
            "parallelism.pipeline_parallel_microbatch_size")
    else:
        put("mbs", local, "training.local_batch_size")
    gbs = _int(train, "global_batch_size", "training", source, -1)
    if gbs > 0:
        put("gbs", gbs, "training.global_batch_size")
    elif shard != -1:
        put("gbs", local * replicate * shard, "training.local_batch_size")
    notes: list[str] = []
    if not ac:
        notes.append("no [activation_checkpoint] table: priced without recompute")
    mode = ac.get("mode", "none") if ac else "none"
    option = str(ac.get("selective_ac_option", "op"))
    if mode == "selective" and option != "op":
        raise ProblemError(f"selective_ac_option {option!r} checkpoints every {option}th layer; the cost model prices "
                           "per-op selective AC (\"op\") or full", path="activation_checkpoint.selective_ac_option",
                           source=source)
    settings = {"none": "none", "full": "full", "selective": "op"}
    if not isinstance(mode, str) or mode not in settings:  # a list or table is refused, never hashed
        raise ProblemError(f"must be none, selective or full, got {mode!r}", path="activation_checkpoint.mode",
                           source=source)
    put("recompute", settings[mode], "activation_checkpoint.mode")
    notes.append(f"torchtitan recipe: weights, gradients and optimizer states charged as torchtitan keeps them "
                 f"({RULES.memory[zero]})")
    try:
        return Recipe.from_fields(fields, origin, tuple(notes))
    except ProblemError as err:
        raise ProblemError(err.reason, path=err.path) from None
