"""A value in a problem document together with its field path: the shape and scalar checks, the messages.

:class:`_Node` is what the validating parser (:mod:`partitioner.problem.parse`)
walks the document with; a failed check is a :class:`ProblemError` naming
the field path, e.g. ``layers[3].costs.dp2tp1.fwd_ms: must be >= 0, got -1``.
:func:`_big`, :func:`_num` and :func:`_describe` spell values for those
messages.
"""
from __future__ import annotations

import math
from typing import Any, Iterator, Mapping

from .records import ProblemError


class _Node:
    """A value in the document together with its field path, for error messages.

    The path is spelled out only when asked for (an error, a nested message):
    a large problem has millions of nodes and almost never needs one.
    """

    __slots__ = ("value", "_path", "_parent", "_key")

    def __init__(self, value: Any, path: str | None, parent: "_Node | None" = None, key: str | int | None = None):
        self.value = value
        self._path = path
        self._parent = parent
        self._key = key

    @property
    def path(self) -> str:
        if self._path is None:
            parent = self._parent
            assert parent is not None, "a node made without a path has a parent"
            base, key = parent.path, self._key
            self._path = f"{base}[{key}]" if isinstance(key, int) else (f"{base}.{key}" if base else str(key))
        return self._path

    def fail(self, reason: str) -> ProblemError:
        return ProblemError(reason, path=self.path)

    def child(self, key: str | int) -> "_Node":
        return _Node(self.value[key], None, self, key)

    # -- shapes
    def mapping(self, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> "_Node":
        if type(self.value) is not dict and not isinstance(self.value, Mapping):
            raise self.fail(f"must be an object, got {_describe(self.value)}")
        for key in required:
            if key not in self.value:
                where = f"{self.path}.{key}" if self.path else key
                raise ProblemError("is missing", path=where)
        unknown = [k for k in self.value if k not in required and k not in optional]
        if unknown:
            allowed = ", ".join(required + optional)
            raise self.fail(f"unknown field {unknown[0]!r} (allowed: {allowed})")
        return self

    def items(self) -> Iterator[tuple[str, "_Node"]]:
        for key in self.value:
            if not isinstance(key, str):
                raise self.fail(f"keys must be strings, got {key!r}")
            yield key, self.child(key)

    def elements(self) -> Iterator["_Node"]:
        if not isinstance(self.value, list):
            raise self.fail(f"must be a list, got {_describe(self.value)}")
        for i in range(len(self.value)):
            yield self.child(i)

    # -- scalars
    def string(self) -> str:
        if not isinstance(self.value, str):
            raise self.fail(f"must be a string, got {_describe(self.value)}")
        return self.value

    def number(self, *, minimum: float | None = None, positive: bool = False, maximum: float | None = None) -> float:
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(f"must be a number, got {_describe(v)}")
        if isinstance(v, int) and v.bit_length() > 63:
            raise self.fail(f"must be a number in range, got {_big(v)}")
        if not math.isfinite(v):
            raise self.fail(f"must be finite, got {v}")
        if positive and v <= 0:
            raise self.fail(f"must be > 0, got {_num(v)}")
        if minimum is not None and v < minimum:
            raise self.fail(f"must be >= {_num(minimum)}, got {_num(v)}")
        if maximum is not None and v > maximum:
            raise self.fail(f"must be <= {_num(maximum)}, got {_num(v)} (see the accepted ranges in docs/limits.md)")
        return float(v)

    def integer(self, *, minimum: int | None = None, maximum: int | None = None) -> int:
        v = self.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(f"must be an integer, got {_describe(v)}")
        if isinstance(v, float):
            if not math.isfinite(v):
                raise self.fail(f"must be finite, got {v}")
            if not v.is_integer():
                raise self.fail(f"must be an integer, got {v}")
            v = int(v)
        if minimum is not None and v < minimum:
            raise self.fail(f"must be >= {minimum}, got {_big(v)}")
        if maximum is not None and v > maximum:
            raise self.fail(f"must be <= {_num(maximum)}, got {_big(v)} (see the accepted ranges in docs/limits.md)")
        return v


def _big(v: int) -> str:
    """An integer for a message: its digits, or its size when it has very many."""
    return str(v) if v.bit_length() <= 64 else f"an integer of {v.bit_length()} bits"


def _num(v: float) -> str:
    if isinstance(v, int) and v.bit_length() > 64:
        return _big(v)
    if isinstance(v, int) and v >= 2**40 and v & (v - 1) == 0:
        return f"2^{v.bit_length() - 1}"
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e16 else repr(float(v))


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}" if len(value) <= 40 else "a string"
    if isinstance(value, (int, float)):
        return f"number {value}"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
