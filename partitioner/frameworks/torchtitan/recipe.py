"""A torchtitan job -- a TOML file, or a launch with ``--section.key`` overrides -- read as a Recipe.

Contract: :func:`read_torchtitan_toml` reads the ``[parallelism]``,
``[training]`` and ``[activation_checkpoint]`` tables of a torchtitan job
TOML, :func:`read_torchtitan_overrides` the same fields given as torchtitan
0.3's overrides (``export --to torchtitan`` writes them, with the stage split
``module_fqns_per_model_part``), and both return the recipe they state
(degrees, ZeRO stage, microbatch, global batch, recompute, weight memory as
torchtitan keeps it, the split as a layout); what they cannot price is one
:class:`~partitioner.problem.ProblemError` naming the file and the field.

More (the detail of this module): ``docs/internals/frameworks.md``, section ``partitioner.frameworks.torchtitan.recipe``.
"""
from __future__ import annotations

import re
import shlex
import sys
from typing import Any, Mapping

from ...problem import ProblemError
from ..recipe import Recipe
from .rules import RULES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: the same parser as a package (pyproject's tomli)
    import tomli as tomllib

__all__ = ["read_torchtitan_toml", "read_torchtitan_overrides", "read_torchtitan", "is_torchtitan_launch"]

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
    return _recipe_of(doc, source)


def _recipe_of(doc: Mapping[str, Any], source: str) -> Recipe:
    """The recipe of a job's tables (a TOML's, or the overrides' gathered into tables)."""
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
    parts = par.get("module_fqns_per_model_part")
    if parts is not None:
        put("pipeline_layout", _layout_of(parts, source), "parallelism.module_fqns_per_model_part")
    if fields["pp"] > 1 and schedule != "1F1B" and not (schedule == "Interleaved1F1B" and parts is not None):
        raise ProblemError(f"{schedule!r}: the estimate runs 1F1B, and Interleaved1F1B with the stage split "
                           "(module_fqns_per_model_part: vpp = its parts / pp); state it as 1F1B or give the split",
                           path="parallelism.pipeline_parallel_schedule", source=source)
    if parts is not None and schedule == "1F1B" and len(parts) != fields["pp"]:
        raise ProblemError(f"{len(parts)} model parts under 1F1B, but pipeline_parallel_degree is {fields['pp']} "
                           "(one part per stage)", path="parallelism.module_fqns_per_model_part", source=source)
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


_LAYER = re.compile(r"layers\.(\d+)")


def _layout_of(parts: Any, source: str) -> str:
    """``module_fqns_per_model_part`` as a Megatron layout string (``E`` tok_embeddings, ``t`` layers.k, ``L``
    norm and lm_head; vision_encoder with tok_embeddings, where torchtitan's VLMs run it)."""
    where = "parallelism.module_fqns_per_model_part"
    if not isinstance(parts, list) or not parts or not all(isinstance(p, list) and p for p in parts):
        raise ProblemError(f"must be a list of non-empty lists of module names, got {parts!r}", path=where,
                           source=source)
    stages, k = [], 0
    for n, part in enumerate(parts):
        names = set(part)
        if "vision_encoder" in names and "tok_embeddings" not in names:
            raise ProblemError(f"part {n} holds vision_encoder without tok_embeddings: torchtitan's VLMs run the "
                               "vision encoder in the embedding step", path=where, source=source)
        if ("norm" in names) != ("lm_head" in names):
            raise ProblemError(f"part {n} holds one of norm and lm_head: the estimate keeps them on one stage",
                               path=where, source=source)
        layers = 0
        for name in part:
            match = _LAYER.fullmatch(str(name))
            if match:
                if int(match.group(1)) != k:
                    raise ProblemError(f"part {n}: {name} out of order (expected layers.{k})", path=where,
                                       source=source)
                k, layers = k + 1, layers + 1
            elif name not in ("vision_encoder", "tok_embeddings", "norm", "lm_head"):
                raise ProblemError(f"part {n}: {name!r} is not a module the estimate places (vision_encoder, "
                                   "tok_embeddings, layers.<k>, norm, lm_head)", path=where, source=source)
        stages.append(("E" if "tok_embeddings" in names else "") + (f"t*{layers}" if layers else "") +
                      ("L" if "lm_head" in names else ""))
    return "|".join(stages)


def is_torchtitan_launch(text: str) -> bool:
    """Whether ``text`` is a torchtitan launch (``-m torchtitan.train``) or holds its ``--parallelism.`` overrides."""
    return "torchtitan.train" in text or "--parallelism." in text


def _value(words: list[str]) -> Any:
    """An override's value: no word a flag (true), an integer, a word, or parts (words of comma-joined names)."""
    if not words:
        return True
    if len(words) == 1 and "," not in words[0]:
        word = words[0]
        return int(word) if re.fullmatch(r"-?\d+", word) else word
    return [w.split(",") for w in words]


def read_torchtitan_overrides(text: str, source: str = "recipe") -> Recipe:
    """The :class:`Recipe` of a torchtitan launch's ``--section.key value`` overrides and its
    ``activation_checkpoint:<mode>`` subcommand (what ``export --to torchtitan`` writes); ``source`` names it."""
    launch = text.split("\n\n# or, as a config_registry function")[0]  # the export's Python snippet follows
    try:
        words = shlex.split(launch.replace("\\\r\n", " ").replace("\\\n", " "), comments=True, posix=True)
    except ValueError as err:  # an unclosed quote
        raise ProblemError(f"cannot split into shell words: {err}", source=source) from None
    words = [part for w in words for part in (w.split("=", 1) if w.startswith("--") and "=" in w else [w])]
    doc: dict[str, dict[str, Any]] = {}
    key: tuple[str, str] | None = None
    values: list[str] = []

    def close() -> None:
        if key is not None:
            doc.setdefault(key[0], {})[key[1]] = _value(values)

    for w in words:
        flag = re.fullmatch(r"--(parallelism|training|activation_checkpoint)\.(\w+)", w)
        mode = re.fullmatch(r"activation_checkpoint:(\w+)", w)
        if flag or mode or w.startswith("-"):
            close()
            key, values = (flag.group(1), flag.group(2)) if flag else None, []
            if mode:
                doc.setdefault("activation_checkpoint", {})["mode"] = mode.group(1)
        elif key is not None:
            values.append(w)
    close()
    if not doc.get("parallelism") and not doc.get("training"):
        raise ProblemError("no --parallelism.* or --training.* override: not a torchtitan launch", source=source)
    if "module_fqns_per_model_part" in doc.get("parallelism", {}):
        parts = doc["parallelism"]["module_fqns_per_model_part"]
        doc["parallelism"]["module_fqns_per_model_part"] = parts if isinstance(parts, list) else [[parts]]
    return _recipe_of(doc, source)


def read_torchtitan(text: str, source: str = "recipe") -> Recipe:
    """A torchtitan recipe: a launch's overrides (:func:`is_torchtitan_launch`), else a job TOML."""
    return (read_torchtitan_overrides if is_torchtitan_launch(text) else read_torchtitan_toml)(text, source)
