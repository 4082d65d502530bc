"""Profiled per-layer times in place of the analytic ones.

Contract: :func:`load_profile` reads records ``{layer, layout, fwd_ms,
bwd_ms}`` from CSV, JSON or YAML (``layer`` a name or shell pattern,
``layout`` a key or ``*``); :func:`apply_profile` returns the problem with
those times, memory and boundaries unchanged. A record matching no layer or
naming a layout the layer lacks, or a bad number, is a
:class:`~partitioner.problem.ProblemError` naming the file and record.
"""
from __future__ import annotations

import csv
import fnmatch
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..problem import Problem, ProblemError, read_document

__all__ = ["load_profile", "apply_profile"]


def load_profile(path: str | Path) -> list[dict[str, Any]]:
    """Profiled times from CSV (columns ``layer, layout, fwd_ms, bwd_ms``) or JSON/YAML.

    JSON/YAML: a list of such records, or ``{"layers": [...]}``. ``layer``
    is a layer name or a shell pattern (``llm.*``); ``layout`` a key such as
    ``dp2tp4`` or ``*`` for every layout. A plain key's profiled times carry
    over to its memory-knob variants (``dp2tp4/zero3``...), each keeping its
    modelled difference from the plain entry; a record naming a variant key
    sets that entry alone.
    """
    path = Path(path)
    if path.suffix.lower() == ".csv":
        try:
            with path.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        except FileNotFoundError:
            raise ProblemError("file not found", source=str(path)) from None
        except (OSError, UnicodeDecodeError, csv.Error) as err:
            raise ProblemError(f"cannot read CSV: {err}", source=str(path)) from None
        records = []
        for i, row in enumerate(rows):
            rec: dict[str, Any] = dict(row)
            for key in ("fwd_ms", "bwd_ms"):
                try:
                    rec[key] = float(row.get(key) or "")
                except ValueError:
                    raise ProblemError(f"must be a number, got {row.get(key)!r}", path=f"row {i + 2}.{key}", source=str(path)) from None
            records.append(rec)
        return records
    data = read_document(path)
    if isinstance(data, Mapping) and "layers" in data:
        data = data["layers"]
    if not isinstance(data, list):
        raise ProblemError("must be a list of {layer, layout, fwd_ms, bwd_ms} records (or {layers: [...]})", source=str(path))
    return list(data)


def apply_profile(problem: Problem, profile: str | Path | Sequence[Mapping[str, Any]]) -> Problem:
    """``problem`` with the profiled ``fwd_ms``/``bwd_ms`` in place of the analytic ones.

    Memory, boundaries and unprofiled entries are kept. A record matching
    no layer, or naming a layout the layer does not have, is an error.
    """
    records = load_profile(profile) if isinstance(profile, (str, Path)) else list(profile)
    source = str(profile) if isinstance(profile, (str, Path)) else "profile"
    return Problem.from_dict(_apply_profile_doc(problem.to_dict(), records, source))


def _apply_profile_doc(doc: dict[str, Any], records: Sequence[Mapping[str, Any]], source: str) -> dict[str, Any]:
    names = [layer["name"] for layer in doc["layers"]]
    replaced = 0
    for i, rec in enumerate(records):
        where = f"[{i}]"
        if not isinstance(rec, Mapping):
            raise ProblemError("must be an object", path=where, source=source)
        for key in ("layer", "layout", "fwd_ms", "bwd_ms"):
            if key not in rec:
                raise ProblemError("is missing", path=f"{where}.{key}", source=source)
        for key in ("fwd_ms", "bwd_ms"):
            v = rec[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ProblemError(f"must be a number >= 0, got {v!r}", path=f"{where}.{key}", source=source)
        pattern, layout = str(rec["layer"]), str(rec["layout"])
        hits = [k for k, n in enumerate(names) if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise ProblemError(f"matches no layer (layers: {names[0]} .. {names[-1]})", path=f"{where}.layer", source=source)
        for k in hits:
            costs = doc["layers"][k]["costs"]
            keys = [c for c in costs if "/" not in c] if layout == "*" else [layout]
            for key in keys:
                if key not in costs:
                    raise ProblemError(
                        f"layer {names[k]} has no layout {key} (it has {', '.join(costs)})", path=f"{where}.layout", source=source
                    )
                fwd, bwd = float(rec["fwd_ms"]), float(rec["bwd_ms"])
                model = costs[key]
                if "/" not in key:  # the mesh's variants keep their modelled difference from the plain entry
                    for other in [c for c in costs if c.startswith(key + "/")]:
                        v = costs[other]
                        costs[other] = _with_times(v, max(0.0, fwd + v["fwd_ms"] - model["fwd_ms"]),
                                                   max(0.0, bwd + v["bwd_ms"] - model["bwd_ms"]))
                costs[key] = _with_times(model, fwd, bwd)
                replaced += 1
    meta = dict(doc.get("meta") or {})
    meta["profiled_entries"] = replaced
    doc["meta"] = meta
    return doc


def _with_times(entry: Mapping[str, Any], fwd_ms: float, bwd_ms: float) -> dict[str, Any]:
    """``entry`` with profiled times; its B/W split keeps the modelled proportion (dropped if it had none)."""
    out = dict(entry, fwd_ms=fwd_ms, bwd_ms=bwd_ms)
    b_in, b_w = out.pop("bwd_input_ms", None), out.pop("bwd_weight_ms", None)
    if b_in is not None and b_w is not None and b_in + b_w > 0:
        share = b_in / (b_in + b_w)
        out["bwd_input_ms"] = bwd_ms * share
        out["bwd_weight_ms"] = bwd_ms - out["bwd_input_ms"]
    return out
