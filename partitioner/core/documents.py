"""Reading JSON and YAML documents safely: bounded size, strict values, no duplicate keys.

Every file the package reads (problems, plans, results, sweeps, presets,
profiles) goes through :func:`read_document`, and every document handed to
the API as a dict through :func:`check_document`. The contract:

More (the detail of this module): ``docs/internals/core.md``, section ``partitioner.core.documents``.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml

from .errors import ProblemError
from .limits import MAX_DEPTH, MAX_FILE_BYTES, MAX_INT, MAX_STRING, MAX_VALUES

__all__ = ["read_document", "parse_text", "check_document", "strict_json_value"]


def _error(reason: str, *, path: str = "", source: str | None = None) -> Exception:
    return ProblemError(reason, path=path, source=source)


# --------------------------------------------------------------------------- files


def read_document(path: str | Path) -> Any:
    """Parse a JSON or YAML file (by suffix; unknown suffixes try JSON, then YAML) and check it.

    Raises :class:`~partitioner.problem.ProblemError` naming the file when it
    cannot be read, is too large, does not parse, or breaks the document
    rules of this module.
    """
    path = Path(path)
    name = str(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size  # 0 for pipes and devices: then the read is bounded
            if size > MAX_FILE_BYTES:
                raise _error(f"file is larger than the {MAX_FILE_BYTES // 2**20} MiB a document may have", source=name)
            raw = f.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise _error("file not found", source=name) from None
    except OSError as err:
        raise _error(f"cannot read file: {err.strerror or err}", source=name) from None
    if len(raw) > MAX_FILE_BYTES:
        raise _error(f"file is larger than the {MAX_FILE_BYTES // 2**20} MiB a document may have", source=name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _error(f"cannot read file: not UTF-8 text (byte {err.start})", source=name) from None
    del raw
    data = parse_text(text, name, path.suffix.lower())
    check_document(data, source=name)
    return data


def parse_text(text: str, name: str, suffix: str = "") -> Any:
    """Parse ``text`` as JSON (``.json``), YAML (``.yaml``/``.yml``) or, otherwise, JSON then YAML."""
    if suffix == ".json":
        return _parse_json(text, name)
    if suffix in (".yaml", ".yml"):
        return _parse_yaml(text, name)
    try:
        return _parse_json(text, name)
    except _JSONSyntax:
        return _parse_yaml(text, name, what="JSON or YAML")


class _JSONSyntax(Exception):
    """Internal: the text is not JSON (the caller may try YAML)."""


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def _parse_json(text: str, name: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as err:
        error = _error(f"not valid JSON: line {err.lineno} column {err.colno}: {err.msg}", source=name)
        raise error from _JSONSyntax()
    except _DuplicateKey as err:
        raise _error(f"duplicate key {_short(err.key)} in one object (each key may appear once)", source=name) from None
    except (RecursionError, MemoryError, ValueError) as err:
        raise _parser_failure(err, name, "JSON") from None


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a key named twice in one mapping."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` merges; explicit keys may override merged ones
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # unhashable: the base class reports it
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"duplicate key {_short(key)} (each key may appear once)",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


def _parse_yaml(text: str, name: str, what: str = "YAML") -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or _first_line(err)
        raise _error(f"not valid {what}: {where}{problem}", source=name) from None
    except (RecursionError, MemoryError, ValueError) as err:
        raise _parser_failure(err, name, what) from None


def _parser_failure(err: BaseException, name: str, what: str) -> Exception:
    """The input error for a parser that gave up: too deep, too large, or a value it cannot hold."""
    if isinstance(err, RecursionError):
        return _error(f"nested too deeply (at most {MAX_DEPTH} levels of objects and lists)", source=name)
    if isinstance(err, MemoryError):
        return _error("too large to load in memory", source=name)
    return _error(f"not valid {what}: {_first_line(err)}", source=name)  # e.g. an integer of thousands of digits


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return _short(lines[0] if lines else type(err).__name__, quote=False)


def _short(value: Any, limit: int = 60, quote: bool = True) -> str:
    text = repr(value) if quote else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- values


def check_document(data: Any, *, source: str | None = None) -> None:
    """Raise :class:`~partitioner.problem.ProblemError` unless ``data`` is a small, finite, acyclic JSON value.

    The walk is iterative (no recursion, whatever the depth) and visits each
    distinct object and list once: a YAML alias used many times is counted
    as often as it is used (so :data:`~partitioner.core.limits.MAX_VALUES` bounds
    the expanded size) but walked only once. Values are counted as nodes: a
    container is one value plus its contents.
    """
    if not _is_container(data):
        _check_leaf(data, lambda: "", source)
        return
    done: dict[int, int] = {}  # id -> values of a finished container
    active: set[int] = {id(data)}
    # frame: [container, iterator of (key, child), values so far, key of the child being walked]
    stack: list[list[Any]] = [[data, _children(data), 1 + len(data), None]]
    if len(data) >= MAX_VALUES:
        raise _too_many("", source)
    float_, int_, str_, dict_, list_ = float, int, str, dict, list  # locals: this loop sees every value

    def where(key: Any = None) -> str:
        """The path of the top container (``key`` None) or of its child ``key``."""
        parents = [f[3] for f in stack[:-1]]
        return _path(parents + [key] if key is not None else parents)

    while stack:
        frame = stack[-1]
        is_map = type(frame[0]) is dict_ or isinstance(frame[0], Mapping)
        pushed = False
        for key, child in frame[1]:
            if is_map:
                if type(key) is not str_:
                    raise _error(f"keys must be strings, got {_short(key)}", path=where(), source=source)
                if len(key) > MAX_STRING:
                    raise _error(f"a key of {len(key)} characters is longer than the {MAX_STRING} allowed", path=where(), source=source)
            kind = type(child)
            if kind is float_:
                if child - child != 0.0:  # inf - inf and nan - nan are nan
                    _check_leaf(child, lambda: where(key), source)
                continue
            if kind is str_:
                if len(child) > MAX_STRING:
                    _check_leaf(child, lambda: where(key), source)
                continue
            if kind is int_:
                if not -MAX_INT <= child <= MAX_INT:
                    _check_leaf(child, lambda: where(key), source)
                continue
            if child is None or kind is bool:
                continue
            if kind is dict_ or kind is list_ or _is_container(child):
                cid = id(child)
                if cid in done:
                    frame[2] += done[cid] - 1
                    if frame[2] > MAX_VALUES:
                        raise _too_many(where(key), source)
                    continue
                if cid in active:
                    raise _error("refers to itself (a recursive YAML alias)", path=where(key), source=source)
                if len(stack) >= MAX_DEPTH:
                    raise _error(f"nested too deeply (at most {MAX_DEPTH} levels of objects and lists)", path=where(key), source=source)
                if frame[2] + len(child) > MAX_VALUES:
                    raise _too_many(where(key), source)
                frame[3] = key
                active.add(cid)
                stack.append([child, _children(child), 1 + len(child), None])
                pushed = True
                break
            _check_leaf(child, lambda: where(key), source)
        if pushed:
            continue
        stack.pop()
        values = frame[2]
        active.discard(id(frame[0]))
        done[id(frame[0])] = values
        if stack:
            parent = stack[-1]
            parent[2] += values - 1
            if parent[2] > MAX_VALUES:
                raise _too_many(where(), source)


def strict_json_value(value: Any) -> Any:
    """A copy of ``value`` that ``json.dumps(..., allow_nan=False)`` accepts: non-finite floats become None.

    Mappings become dicts, tuples lists, numpy scalars Python numbers; other
    values are returned as they are (the encoder's ``default`` handles them).
    Used by every ``--json`` output and every results line, so a consumer with
    a strict JSON parser can always read them.
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {k: strict_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json_value(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype"):  # numpy scalars
        return strict_json_value(value.item())
    return value


def _is_container(value: Any) -> bool:
    kind = type(value)
    return kind is dict or kind is list or isinstance(value, (Mapping, list, tuple))


def _children(container: Any) -> Iterator[tuple[Any, Any]]:
    is_map = type(container) is dict or (type(container) is not list and isinstance(container, Mapping))
    return iter(container.items()) if is_map else enumerate(container)


def _path(keys: Any) -> str:
    out = ""
    for key in keys:
        if key is None:
            break
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            out += f".{key}" if out else str(key)
    return out


def _too_many(path: str, source: str | None) -> Exception:
    return _error(
        f"the document holds more than {MAX_VALUES} values (YAML aliases counted as expanded)", path=path, source=source
    )


def _check_leaf(value: Any, where: Any, source: str | None) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _error(f"must be finite (strict JSON has no NaN or Infinity), got {value}", path=where(), source=source)
    elif isinstance(value, int):
        if not -MAX_INT <= value <= MAX_INT:
            raise _error(f"an integer of {value.bit_length()} bits is out of range (|n| <= 2^63 - 1)", path=where(), source=source)
    elif isinstance(value, str):
        if len(value) > MAX_STRING:
            raise _error(f"a string of {len(value)} characters is longer than the {MAX_STRING} allowed", path=where(), source=source)
    else:
        raise _error(
            f"a {type(value).__name__} value is not allowed (only JSON values: objects, lists, strings, numbers, "
            "booleans, null; quote dates and the like)",
            path=where(),
            source=source,
        )
