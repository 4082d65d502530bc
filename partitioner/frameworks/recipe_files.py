"""A recipe file -- Megatron-LM arguments, a Megatron-Bridge config, a torchtitan TOML, a DeepSpeed config -- read.

Contract: :func:`read_recipe_file` reads a file with the reader of its
format (:mod:`.megatron.recipe`, :mod:`.torchtitan.recipe`, :mod:`.deepspeed.recipe`) and returns the
:class:`~.recipe.Recipe`; :func:`recipe_format` is the choice of ``auto``.
Both ``estimate --recipe`` and ``plan --baseline`` read files here; a file
that is not text, or a format word not in :data:`RECIPE_FORMATS`, is a
:class:`~partitioner.problem.ProblemError` naming the file or the option.
"""
from __future__ import annotations

from pathlib import Path

from ..problem import ProblemError
from .deepspeed.recipe import is_deepspeed_config, read_deepspeed_config
from .deepspeed.rules import RULES as DS_RULES
from .megatron.recipe import (
    BRIDGE_FLAGS,
    INT_FLAGS,
    bridge_entries,
    megatron_tokens,
    read_bridge_config,
    read_megatron_args,
)
from .recipe import Recipe
from .torchtitan.recipe import is_torchtitan_launch, read_torchtitan
from .torchtitan.rules import RULES as TITAN_RULES

__all__ = ["RECIPE_FORMATS", "MAX_RECIPE_BYTES", "recipe_format", "read_recipe_file"]

RECIPE_FORMATS = ("auto", "megatron", "bridge", "torchtitan", "deepspeed")
"""The recipe formats a file may be read as (``auto``: :func:`recipe_format` chooses)."""


# each format's reader, keyed by its home's name as the registry keys the exporters (megatron's is the default)
_READERS = {"bridge": read_bridge_config, TITAN_RULES.name: read_torchtitan, DS_RULES.name: read_deepspeed_config}


MAX_RECIPE_BYTES = 2**18
"""The largest recipe file read (256 KiB): a launch script, Bridge config or torchtitan TOML is a few KiB; a
larger file (``/dev/zero``, a log given by mistake) is refused before its words are split."""


def recipe_format(path: Path, text: str) -> str:
    """``auto``'s choice: ``.toml`` torchtitan; ``.json`` a DeepSpeed config when its top level has a key only
    DeepSpeed's has (:data:`~.deepspeed.recipe.DEEPSPEED_KEYS`) or is the DeepSpeed export document, else a
    Bridge config, as ``.yaml``, ``.yml``, ``.py``; a torchtitan launch (``torchtitan.train`` or a
    ``--parallelism.`` override); else a Megatron-LM argument list, unless the text has no Megatron-LM flag
    the reader knows and Bridge assignments (Hydra overrides in a shell script)."""
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return "torchtitan"
    if suffix == ".json" and is_deepspeed_config(text):
        return "deepspeed"
    if suffix in (".yaml", ".yml", ".json", ".py"):
        return "bridge"
    if is_torchtitan_launch(text):
        return "torchtitan"
    try:
        words = set(megatron_tokens(text))
    except ProblemError:
        words = set()
    known = set(INT_FLAGS) | set(BRIDGE_FLAGS.values())
    if not words & known and set(bridge_entries(text, str(path))) & set(BRIDGE_FLAGS):
        return "bridge"
    return "megatron"


def read_recipe_file(path: str | Path, fmt: str = "auto", option: str = "--recipe-format") -> Recipe:
    """The :class:`~.recipe.Recipe` of the recipe file ``path``, read by its format's reader.

    ``option`` names the format option in the error of a format word not in :data:`RECIPE_FORMATS`.
    """
    if fmt not in RECIPE_FORMATS:
        raise ProblemError(f"must be one of {', '.join(RECIPE_FORMATS)}, got {fmt!r}", path=option)
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_RECIPE_BYTES + 1)  # bounded: /dev/zero or a pipe is never read to its end
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProblemError("not a text file", source=str(path)) from None
    except OSError as err:
        raise ProblemError(f"cannot read the recipe file: {err.strerror or err}", source=str(path)) from None
    if len(raw) > MAX_RECIPE_BYTES:
        raise ProblemError(f"larger than the {MAX_RECIPE_BYTES // 2**10} KiB a recipe file may have (docs/limits.md)",
                           source=str(path))
    fmt = recipe_format(path, text) if fmt == "auto" else fmt
    reader = _READERS.get(fmt, read_megatron_args)
    return reader(text, str(path))
