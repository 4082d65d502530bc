"""Problem files: load and validate one (JSON or YAML), take what the API accepts as a problem, write one."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import yaml

from ..core.documents import read_document
from .nodes import _describe
from .records import Problem, ProblemError

__all__ = ["load_problem", "as_problem", "dump_problem"]


def load_problem(path: str | Path) -> Problem:
    """Load and validate a v1 or v2 problem from a JSON or YAML file.

    The file must follow the document rules of :mod:`partitioner.core.documents`
    (size, depth, strict values, no duplicate keys) and the fields the ranges
    of :mod:`partitioner.core.limits`; anything else raises :class:`ProblemError`.
    """
    data = read_document(path)
    return Problem.from_dict(data, source=str(path), _checked=True)


def as_problem(value: Any, *, what: str = "problem") -> Problem:
    """What the API accepts as a problem: a :class:`Problem`, a problem document (a mapping), or a file path.

    Raises
    ------
    ProblemError
        When ``value`` is none of these (saying what was expected), or is not a valid problem.
    """
    if isinstance(value, Problem):
        return value
    if isinstance(value, Mapping):
        return Problem.from_dict(value)
    if isinstance(value, (str, Path)):
        return load_problem(value)
    raise ProblemError(
        f"expected a Problem, a problem document (dict) or the path of a problem file, got {_describe(value)}", path=what
    )


def dump_problem(problem: Problem, path: str | Path) -> None:
    """Write ``problem`` as JSON (``.json``) or YAML (``.yaml``/``.yml``)."""
    path = Path(path)
    doc = problem.to_dict()
    if path.suffix.lower() in (".yaml", ".yml"):
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    else:
        path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
