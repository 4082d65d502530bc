"""A Megatron-LM argument list (a launch script's flags), or a Megatron Bridge config, read as a

:class:`~partitioner.frameworks.recipe.Recipe`.

Contract: :func:`read_megatron_args` takes the text of a launch line or
script (``torchrun ... pretrain_gpt.py --tensor-model-parallel-size 2 ...``,
backslash continuations, ``#`` comments, bash arrays and ``--flag=value``
all accepted) and returns the recipe its parallelism, batch and memory flags
state; flags the cost model does not price (learning rate, data paths, ...)
are skipped.

More (the detail of this module): ``docs/internals/frameworks.md``, section ``partitioner.frameworks.megatron.recipe``.
"""
from __future__ import annotations

import ast
import re
import shlex
from dataclasses import replace
from typing import Any, Mapping

from ...core.documents import parse_text
from ...costs.memory.recompute_names import MODULES, setting_of
from ...problem import ProblemError
from ..recipe import Recipe

__all__ = ["read_megatron_args", "read_bridge_config", "bridge_entries", "megatron_tokens", "INT_FLAGS", "BRIDGE_FLAGS",
           "CP_COMM_TYPES"]

INT_FLAGS: Mapping[str, str] = {
    "--tensor-model-parallel-size": "tp",
    "--pipeline-model-parallel-size": "pp",
    "--virtual-pipeline-model-parallel-size": "vpp",
    "--num-virtual-stages-per-pipeline-rank": "vpp",
    "--context-parallel-size": "cp",
    "--expert-model-parallel-size": "ep",
    "--expert-tensor-parallel-size": "etp",
    "--micro-batch-size": "mbs",
    "--global-batch-size": "gbs",
    "--num-layers": "num_layers",
    "--nnodes": "nodes",
    "--decoder-first-pipeline-num-layers": "first_stage_layers",
    "--decoder-last-pipeline-num-layers": "last_stage_layers",
}
"""Integer flags and the :class:`Recipe` field each states (``--nnodes`` is torchrun's)."""

# flags refused: the cost model would price them as something else
_REFUSED = {
    "--account-for-embedding-in-pipeline-split": "the embedding as a layer of the split: state the split with "
                                                 "--pipeline-model-parallel-layout",
    "--account-for-loss-in-pipeline-split": "the loss as a layer of the split: state the split with "
                                            "--pipeline-model-parallel-layout",
}
# Megatron-LM's --cp-comm-type -> the cost options' cp_algorithm (a2a+p2p, hierarchical, is not priced)
CP_COMM_TYPES = {"p2p": "p2p", "a2a": "a2a", "allgather": "all_gather"}
# sharding strategies of Megatron-FSDP (--data-parallel-sharding-strategy) -> ZeRO stage, None: not priced
_SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": None, "optim_grads_params": 3}


def megatron_tokens(text: str) -> list[str]:
    """The shell words of a launch line or script: continuations joined, comments dropped, ``--a=b`` split."""
    joined = text.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        words = shlex.split(joined, comments=True, posix=True)
    except ValueError as err:  # an unclosed quote
        raise ProblemError(f"cannot split into shell words: {err}", path="recipe") from None
    out: list[str] = []
    for w in words:
        if w.startswith("--") and "=" in w:
            out.extend(w.split("=", 1))
        else:
            out.append(w.strip("()") if w in ("(", ")") else w)
    return [w for w in out if w]


def _flags(words: list[str]) -> dict[str, list[str]]:
    """Each ``--flag`` and the words after it up to the next flag (the last occurrence wins, as argparse does)."""
    found: dict[str, list[str]] = {}
    current: str | None = None
    for w in words:
        if w.startswith("--") and len(w) > 2 and not w[2].isdigit():
            current = w
            found[current] = []
        elif current is not None:
            found[current].append(w)
    return found


def _int(flag: str, values: list[str], source: str) -> int:
    if not values:
        raise ProblemError("needs a value", path=flag, source=source)
    try:
        return int(values[0])
    except ValueError:
        raise ProblemError(f"must be an integer, got {values[0]!r} (expand the script's shell variables first)",
                           path=flag, source=source) from None


def read_megatron_args(text: str, source: str = "recipe") -> Recipe:
    """The :class:`Recipe` a Megatron-LM argument list states (module docstring); ``source`` names it in errors."""
    return _recipe_of_flags(_flags(megatron_tokens(text)), source)


def _recipe_of_flags(flags: Mapping[str, list[str]], source: str) -> Recipe:
    """The recipe of parsed Megatron-LM flags (each flag and the words after it)."""
    fields: dict[str, Any] = {}
    origin: dict[str, str] = {}
    notes: list[str] = []

    def put(name: str, value: Any, flag: str) -> None:
        fields[name] = value
        origin[name] = f"{source}: {flag}"

    for flag, why in _REFUSED.items():
        if flag in flags:
            raise ProblemError(f"not read: {why}", path=flag, source=source)
    layers_per_virtual = None
    for flag, values in flags.items():
        if flag == "--nnodes" and not (values and values[0].isdigit()):
            notes.append(f"--nnodes {' '.join(values[:1])}: not a number of nodes (give --nodes)")
        elif flag in INT_FLAGS:
            put(INT_FLAGS[flag], _int(flag, values, source), flag)
        elif flag == "--num-layers-per-virtual-pipeline-stage":
            layers_per_virtual = _int(flag, values, source)
    if layers_per_virtual is not None:  # vpp = layers per pipeline rank / layers per virtual stage
        flag = "--num-layers-per-virtual-pipeline-stage"
        n, pp = fields.get("num_layers"), fields.get("pp", 1)
        for value, named in ((layers_per_virtual, flag), (pp, "--pipeline-model-parallel-size")):
            if value < 1:  # a divisor below: refused before the arithmetic, naming its own flag
                raise ProblemError(f"must be a positive integer, got {value}", path=named, source=source)
        if n is None or n % pp or (n // pp) % layers_per_virtual:
            raise ProblemError(f"{layers_per_virtual} layers per virtual stage need --num-layers divisible by "
                               f"pp {pp} x {layers_per_virtual} (got --num-layers {n})", path=flag, source=source)
        put("vpp", n // pp // layers_per_virtual, flag)
    if "--pipeline-model-parallel-layout" in flags:
        values = flags["--pipeline-model-parallel-layout"]
        if not values:
            raise ProblemError("needs a layout string", path="--pipeline-model-parallel-layout", source=source)
        put("pipeline_layout", values[0], "--pipeline-model-parallel-layout")
    if "--cp-comm-type" in flags:
        flag, values = "--cp-comm-type", flags["--cp-comm-type"]
        kind = values[0] if values else ""
        if kind not in CP_COMM_TYPES:
            raise ProblemError(f"{kind!r} is not priced (p2p, a2a or allgather; one type for every layer)", path=flag,
                               source=source)
        put("cp_algorithm", CP_COMM_TYPES[kind], flag)
    _zero(flags, put, source)
    _recompute(flags, put, notes, source)
    _precision(flags, put, notes)
    put("sequence_parallel", "--sequence-parallel" in flags, "--sequence-parallel")
    for flag in ("--fp16",):
        if flag in flags:
            notes.append(f"{flag}: the cost model prices bf16 activations and weights")
    try:
        return Recipe.from_fields(fields, origin, tuple(notes))
    except ProblemError as err:  # the path already names the file and the flag
        raise ProblemError(err.reason, path=err.path) from None


def _zero(flags: Mapping[str, list[str]], put: Any, source: str) -> None:
    """The ZeRO stage: the distributed optimizer (1), Megatron-FSDP's or torch FSDP2's sharding (3)."""
    if "--use-distributed-optimizer" in flags:
        put("zero", 1, "--use-distributed-optimizer")
    if "--use-torch-fsdp2" in flags:
        put("zero", 3, "--use-torch-fsdp2")
    if "--use-megatron-fsdp" in flags:
        flag = "--data-parallel-sharding-strategy"
        strategy = (flags.get(flag) or ["optim_grads_params"])[0]  # Megatron-LM's default strategy
        if strategy not in _SHARDING:
            raise ProblemError(f"unknown strategy {strategy!r} (one of {', '.join(_SHARDING)})", path=flag, source=source)
        zero = _SHARDING[strategy]
        if zero is None:
            raise ProblemError(f"{strategy} (gradients and optimizer states sharded, ZeRO-2) is not priced by the cost "
                               "model: use optim (the distributed optimizer) or optim_grads_params (FSDP)",
                               path=flag, source=source)
        put("zero", zero, "--use-megatron-fsdp")


def _recompute(flags: Mapping[str, list[str]], put: Any, notes: list[str], source: str) -> None:
    """``--recompute-granularity`` with its method and modules (``--recompute-activations``: selective)."""
    stated = flags.get("--recompute-granularity")
    granularity: str | None = stated[0] if stated else None
    if "--recompute-activations" in flags and granularity is None:
        granularity = "selective"
    if granularity is None:
        if "--recompute-modules" in flags:
            raise ProblemError("without --recompute-granularity selective Megatron-LM recomputes nothing",
                               path="--recompute-modules", source=source)
        return
    if granularity == "full":
        method = (flags.get("--recompute-method") or ["uniform"])[0]
        if method == "block":
            raise ProblemError("block recomputes only --recompute-num-layers layers of each stage; the cost model "
                               "prices full recompute of every layer (use uniform)", path="--recompute-method",
                               source=source)
        if method != "uniform":
            raise ProblemError(f"must be uniform or block, got {method!r}", path="--recompute-method", source=source)
        chunk = flags.get("--recompute-num-layers")
        if chunk and chunk[0] != "1":
            notes.append(f"--recompute-num-layers {chunk[0]}: priced as full recompute of every layer (each layer "
                         "keeps its input; uniform groups of several layers keep fewer inputs)")
        put("recompute", "full", "--recompute-granularity")
        return
    if granularity != "selective":
        raise ProblemError(f"must be full or selective, got {granularity!r}", path="--recompute-granularity",
                           source=source)
    modules = flags.get("--recompute-modules") or ["core_attn"]
    unknown = [m for m in modules if m not in MODULES]
    if unknown:
        raise ProblemError(f"unknown module(s) {', '.join(unknown)} (Megatron-Core's: {', '.join(MODULES)})",
                           path="--recompute-modules", source=source)
    put("recompute", setting_of(modules), "--recompute-modules" if "--recompute-modules" in flags
        else "--recompute-granularity")


def _precision(flags: Mapping[str, list[str]], put: Any, notes: list[str]) -> None:
    """FP8 when ``--fp8-format`` is given, with ``--fp8-recipe`` (Megatron-Core's default: delayed)."""
    if "--fp8-format" not in flags:
        return
    put("precision", "fp8", "--fp8-format")
    recipe = (flags.get("--fp8-recipe") or ["delayed"])[0]
    put("fp8_recipe", recipe, "--fp8-recipe" if "--fp8-recipe" in flags else "--fp8-format")
    if "--fp8-recipe" not in flags:
        notes.append("--fp8-format without --fp8-recipe: Megatron-Core's default recipe, delayed")


# --------------------------------------------------------------------------- Megatron Bridge

BRIDGE_FLAGS: Mapping[str, str] = {
    "model.tensor_model_parallel_size": "--tensor-model-parallel-size",
    "model.pipeline_model_parallel_size": "--pipeline-model-parallel-size",
    "model.virtual_pipeline_model_parallel_size": "--virtual-pipeline-model-parallel-size",
    "model.context_parallel_size": "--context-parallel-size",
    "model.cp_comm_type": "--cp-comm-type",
    "model.expert_model_parallel_size": "--expert-model-parallel-size",
    "model.expert_tensor_parallel_size": "--expert-tensor-parallel-size",
    "model.sequence_parallel": "--sequence-parallel",
    "model.pipeline_model_parallel_layout": "--pipeline-model-parallel-layout",
    "model.num_layers_in_first_pipeline_stage": "--decoder-first-pipeline-num-layers",
    "model.num_layers_in_last_pipeline_stage": "--decoder-last-pipeline-num-layers",
    "model.account_for_embedding_in_pipeline_split": "--account-for-embedding-in-pipeline-split",
    "model.account_for_loss_in_pipeline_split": "--account-for-loss-in-pipeline-split",
    "model.num_layers": "--num-layers",
    "model.recompute_granularity": "--recompute-granularity",
    "model.recompute_method": "--recompute-method",
    "model.recompute_num_layers": "--recompute-num-layers",
    "model.recompute_modules": "--recompute-modules",
    "model.fp8": "--fp8-format",
    "model.fp8_recipe": "--fp8-recipe",
    "train.global_batch_size": "--global-batch-size",
    "train.micro_batch_size": "--micro-batch-size",
    "ddp.use_distributed_optimizer": "--use-distributed-optimizer",
    "optimizer.use_distributed_optimizer": "--use-distributed-optimizer",
    "ddp.use_megatron_fsdp": "--use-megatron-fsdp",
    "ddp.data_parallel_sharding_strategy": "--data-parallel-sharding-strategy",
}
"""Megatron Bridge ``ConfigContainer`` fields [3]_ and the Megatron-LM flag each one is (the Bridge guide's mapping).

References
----------
.. [3] NVIDIA NeMo Megatron Bridge, "Megatron-LM to Megatron Bridge Guide" (the mapping of Megatron-LM
   flags to ``ConfigContainer`` fields: ``model.*``, ``train.*``, ``ddp.*``, ``optimizer.*``) and
   ``megatron/bridge/training/mixed_precision.py`` (the ``bf16_with_fp8_*`` presets).
"""

# Megatron-LM's switches (store_true flags): their Bridge fields are booleans, never a value after the flag
_SWITCHES = frozenset({"--sequence-parallel", "--account-for-embedding-in-pipeline-split",
                       "--account-for-loss-in-pipeline-split", "--use-distributed-optimizer", "--use-megatron-fsdp"})

# Bridge's mixed-precision presets that train in FP8 -> the FP8 recipe (megatron/bridge/training/mixed_precision.py)
_BRIDGE_FP8 = {"bf16_with_fp8_delayed_scaling_mixed": "delayed", "bf16_with_fp8_current_scaling_mixed": "tensorwise",
               "bf16_with_fp8_subchannel_scaling_mixed": "blockwise", "bf16_with_mxfp8_mixed": "mxfp8"}

_ASSIGNMENT = re.compile(r"(?<![\w])(?:\w+\.)?((?:model|train|ddp|optimizer)\.\w+|mixed_precision)\s*=\s*"
                         r"(\[[^\]]*\]|\"[^\"]*\"|'[^']*'|[^\s,#)]+)")


def _literal(text: str) -> Any:
    """A value as Python, YAML or Hydra write it: numbers, true/false/null, quoted or bare strings, lists."""
    word = text.strip()
    lowered = word.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    try:
        return ast.literal_eval(word)
    except (ValueError, SyntaxError):
        if word.startswith("[") and word.endswith("]"):  # Hydra's bare list: [moe_act,layernorm]
            return [_literal(w) for w in word[1:-1].split(",") if w.strip()]
        return word


def _flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def bridge_entries(text: str, source: str = "recipe") -> dict[str, Any]:
    """The ``ConfigContainer`` fields a Bridge config states, by dotted name: a YAML (or JSON) document, or the
    assignments of Hydra overrides (``model.tensor_model_parallel_size=2``) and of a Python recipe
    (``cfg.model.tensor_model_parallel_size = 2``); the last assignment of a field wins."""
    try:
        doc = parse_text(text, source, ".yaml")  # YAML reads JSON too
    except ProblemError:
        doc = None
    if isinstance(doc, Mapping):
        return _flatten(doc)
    return {key: _literal(value) for key, value in _ASSIGNMENT.findall(text)}


def read_bridge_config(text: str, source: str = "recipe") -> Recipe:
    """The :class:`Recipe` a Megatron Bridge config states (:func:`bridge_entries`), read as the Megatron-LM flags
    its fields are (:data:`BRIDGE_FLAGS`); errors and origins name the Bridge field."""
    entries = bridge_entries(text, source)
    flags: dict[str, list[str]] = {}
    label: dict[str, str] = {}
    for key, flag in BRIDGE_FLAGS.items():  # a flag's Bridge field (the first, unless the config states another)
        label.setdefault(flag, key)
    for key, value in entries.items():
        stated = BRIDGE_FLAGS.get(key)
        if stated in _SWITCHES and value is not None:
            if not isinstance(value, int) or value not in (0, 1):  # "maybe" or [1] was read as on
                raise ProblemError(f"must be true or false, got {value!r}", path=key, source=source)
            value = bool(value)  # 0 was read as on too
        if stated is None or value is None or value is False:
            continue
        flag = stated
        label[flag] = key
        if value is True:
            flags[flag] = []
        elif isinstance(value, (list, tuple)):
            flags[flag] = [str(v) for v in value]
        else:
            flags[flag] = [str(value)]
    preset = entries.get("mixed_precision")
    if isinstance(preset, str) and preset in _BRIDGE_FP8 and "--fp8-format" not in flags:
        flags.update({"--fp8-format": ["hybrid"], "--fp8-recipe": [_BRIDGE_FP8[preset]]})
        label.update({"--fp8-format": "mixed_precision", "--fp8-recipe": "mixed_precision"})

    def named(text: str) -> str:
        for flag, key in label.items():
            text = re.sub(re.escape(flag) + r"(?![\w-])", key, text)
        return text

    try:
        recipe = _recipe_of_flags(flags, source)
    except ProblemError as err:
        raise ProblemError(named(err.reason), path=named(err.path), source=err.source) from None
    return replace(recipe, origin={k: named(v) for k, v in recipe.origin.items()},
                   notes=tuple(named(n) for n in recipe.notes))
