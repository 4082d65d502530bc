"""Problem formats v1 and v2: the model, the cluster and the training setup a plan is made for.

A problem is loaded from JSON or YAML (:func:`load_problem`) or built from a
dict (:meth:`Problem.from_dict`). Loading validates everything and raises one
exception type, :class:`ProblemError`, whose message names the source and the
field path, e.g. ``p.json: layers[3].costs.dp2tp1.fwd_ms: must be >= 0, got -1``.
Units: times in ms, sizes in bytes, bandwidth in GB/s (1e9 B/s).

The formats are specified in ``DESIGN.md`` ("Problem format v1", "Problem
format v2", "Schedules"). Version 2 adds *variants* to the cost keys
(``dp2tp4/zero3``: a config is (dp, tp, variant)) and *segments*: in a
version-2 problem each maximal run of same-``module`` layers inside a stage
has its own config (:meth:`Problem.segments`).

More (the detail of this module): ``docs/internals/problem.md``, section ``partitioner.problem``.
"""
from __future__ import annotations

from ..core.documents import read_document
from .files import as_problem, dump_problem, load_problem
from .nodes import _Node
from .parse import _parse_cost, _parse_cost_checked
from .records import *  # noqa: F403  (the data model; its names are listed once, in its own __all__)
from .records import __all__ as _records_all
from .records import _cost_doc
from .workload import LayerHint, ModelWorkload

__all__ = [*_records_all, "ModelWorkload", "LayerHint", "load_problem", "as_problem", "dump_problem", "read_document"]

# Private names code outside the package imports from here (the tests of the parser's fast path):
# kept importable as ``partitioner.problem._Node`` and so on; the tuple marks them used for pyflakes.
_REEXPORTED = (_cost_doc, _Node, _parse_cost, _parse_cost_checked)
