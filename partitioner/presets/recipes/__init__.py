"""Published training recipes shipped with the model presets (data files, each with its source).

Contract: each ``*.yaml`` file here states one published recipe for one
model preset: ``model`` (the preset name), ``cluster`` (the cluster preset
it ran on) and ``nodes``, ``title`` (what it is), ``source`` (the URL it is
read from), ``states`` (what the source states, in its own terms) and
``recipe`` (the layout as :class:`~partitioner.frameworks.recipe.Recipe`
fields: tp, pp, vpp, cp, ep, etp, mbs, gbs, zero, recompute, precision).
:func:`published_recipes` lists a preset's files; :func:`published_recipe`
picks the one for a cluster and node count, or raises a
:class:`~partitioner.problem.ProblemError` listing what is shipped. The
fields are checked where they become a Recipe (``plan --baseline published``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ...problem import ProblemError, read_document

__all__ = ["PublishedRecipe", "published_recipes", "published_recipe", "RECIPES_DIR"]

RECIPES_DIR = Path(__file__).resolve().parent
"""Where the recipe files live (``partitioner/presets/recipes``)."""

_KEYS = ("model", "cluster", "nodes", "title", "source", "states", "recipe")


@dataclass(frozen=True)
class PublishedRecipe:
    """One shipped recipe: the preset, cluster and nodes it is for, its source and its Recipe fields."""

    model: str
    cluster: str
    nodes: int
    title: str
    url: str
    states: str
    fields: Mapping[str, Any]
    path: str

    def label(self) -> str:
        """``glm-4.5v on 8 x dgx-h100: <title>``."""
        return f"{self.model} on {self.nodes} x {self.cluster}: {self.title}"


def _read(path: Path) -> PublishedRecipe:
    """The recipe of one file (its keys all present, ``recipe`` a mapping)."""
    doc = read_document(path)
    if not isinstance(doc, Mapping):
        raise ProblemError("must be a mapping", source=str(path))
    missing = [k for k in _KEYS if k not in doc]
    if missing:
        raise ProblemError(f"missing key(s) {', '.join(missing)}", source=str(path))
    if not isinstance(doc["recipe"], Mapping):
        raise ProblemError("must be a mapping of recipe fields", source=str(path), path="recipe")
    return PublishedRecipe(str(doc["model"]), str(doc["cluster"]), int(doc["nodes"]), str(doc["title"]),
                           str(doc["source"]), str(doc["states"]).strip(), dict(doc["recipe"]), str(path))


def published_recipes(model: str | None = None) -> list[PublishedRecipe]:
    """Every shipped recipe (of ``model`` when given), in file-name order."""
    found = [_read(p) for p in sorted(RECIPES_DIR.glob("*.yaml"))]
    return [r for r in found if model is None or r.model == model]


def published_recipe(model: str, cluster: str, nodes: int) -> PublishedRecipe:
    """The shipped recipe of ``model`` on ``nodes`` x ``cluster``, or a ProblemError listing what is shipped."""
    every = published_recipes()
    for r in every:
        if (r.model, r.cluster, r.nodes) == (model, cluster, nodes):
            return r
    shipped = "; ".join(r.label() for r in every) or "none"
    raise ProblemError(f"no published recipe of {model} on {nodes} x {cluster} is shipped (shipped: {shipped})",
                       path="--baseline")
