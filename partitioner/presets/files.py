"""Presets on disk: where they live, loading and validating model and cluster documents.

Contract: :func:`preset_dirs` lists the folders searched
(``$PARTITIONER_PRESETS``, the installed ``partitioner/_presets``, the
checkout's ``models/``); :func:`load_model` / :func:`load_cluster` take a
preset name, a YAML path or (models) a Hugging Face ``config.json``
(:mod:`.hf`); :func:`model_from_dict` / :func:`cluster_from_dict` validate
a document and raise :class:`~partitioner.problem.ProblemError` naming the
file and the field.
"""
from __future__ import annotations

import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

from ..core.limits import MAX_MODULES
from ..problem import Level, ProblemError, read_document
from ..problem.parse import parse_levels
from .checks import LAYER_LIST_FIELDS, check_cluster, check_model, field_problem, module_problem
from .hf import model_from_hf_config
from .spec import MODULE_KINDS, ClusterSpec, ModelSpec, ModuleSpec
from .workload import Workload, apply_workload

__all__ = [
    "PRESET_ENV",
    "preset_dirs",
    "list_models",
    "list_clusters",
    "load_model",
    "load_cluster",
    "model_from_dict",
    "cluster_from_dict",
]

PRESET_ENV = "PARTITIONER_PRESETS"

# --------------------------------------------------------------------------- where presets live


def preset_dirs() -> list[Path]:
    """Folders searched for presets, in order.

    ``$PARTITIONER_PRESETS`` (``os.pathsep``-separated), the copy shipped in
    the installed package (``partitioner/_presets``), then the source
    tree's ``models/`` folder (running from a checkout).
    """
    dirs: list[Path] = []
    env = os.environ.get(PRESET_ENV)
    if env:
        dirs.extend(Path(p) for p in env.split(os.pathsep) if p)
    here = Path(__file__).resolve().parent.parent  # the partitioner package
    dirs.append(here / "_presets")
    dirs.append(here.parent / "models")
    return [d for d in dirs if d.is_dir()]


def _preset_files(sub: str | None) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in preset_dirs():
        folder = d / sub if sub else d
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.y*ml")):
            found.setdefault(path.stem, path)
    return found


def list_models() -> list[str]:
    """Names of the model presets."""
    return sorted(_preset_files(None))


def list_clusters() -> list[str]:
    """Names of the cluster presets."""
    return sorted(_preset_files("clusters"))


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _resolve(name_or_path: str | os.PathLike, sub: str | None, what: str) -> Path:
    text = os.fspath(name_or_path)
    path = Path(text)
    if sub is None and path.is_dir() and (path / "config.json").is_file():
        return path / "config.json"  # a folder holding a Hugging Face config.json
    if sub is None and not path.exists() and _HUB_ID.match(text) and path.suffix.lower() not in (".yaml", ".yml", ".json"):
        raise ProblemError(f"looks like a Hugging Face Hub id: download its config.json first "
                           f"(e.g. `huggingface-cli download {text} config.json --local-dir {path.name}`) "
                           f"and give the file or its folder", source=text)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or os.sep in text or path.is_file():
        if not path.is_file():
            raise ProblemError("file not found", source=text)
        return path
    files = _preset_files(sub)
    if text not in files:
        known = ", ".join(sorted(files)) or "none found"
        raise ProblemError(f"unknown {what} {text!r} (presets: {known}; or give a path to a YAML file)")
    return files[text]


def load_model(name_or_path: str | os.PathLike | ModelSpec, workload: Workload | None = None) -> ModelSpec:
    """A model spec from a preset name, a preset YAML file or a Hugging Face ``config.json`` (or its folder).

    ``workload`` (images, image size or tiles, frames, text tokens) is
    tokenised by the importer of a ``config.json``'s family, and applied
    to a preset by :func:`~.workload.apply_workload`. A spec object is
    checked like a file (:func:`.checks.check_model`: its fields named
    ``modules[i].field``) and returned as it is (with the workload applied).
    """
    if isinstance(name_or_path, ModelSpec):
        return check_model(apply_workload(name_or_path, workload) if workload is not None else name_or_path)
    path = _resolve(name_or_path, None, "model")
    data = read_document(path)
    if path.suffix.lower() == ".json" and isinstance(data, Mapping) and "model_type" in data:
        return model_from_hf_config(data, source=str(path), workload=workload)
    spec = model_from_dict(data, source=str(path))
    return check_model(apply_workload(spec, workload), source=str(path)) if workload is not None else spec


def load_cluster(name_or_path: str | os.PathLike | ClusterSpec) -> ClusterSpec:
    """A cluster spec from a preset name or a YAML file (a spec object is checked and returned)."""
    if isinstance(name_or_path, ClusterSpec):
        return check_cluster(name_or_path)
    path = _resolve(name_or_path, "clusters", "cluster")
    return cluster_from_dict(read_document(path), source=str(path))



# --------------------------------------------------------------------------- validation

_REQUIRED = {
    "vit": ("layers", "hidden", "heads", "ffn", "patch", "image_size"),
    "projector": ("in_dim", "dims", "tokens"),
    "llm": ("layers", "hidden", "heads", "ffn", "vocab", "text_tokens"),
    "action_expert": ("layers", "hidden", "heads", "ffn", "tokens", "action_dim"),
    "action_head": ("layers", "hidden", "heads", "ffn", "tokens", "action_dim", "cond_dim"),
}
_MODULE_FIELDS = {f.name for f in fields(ModuleSpec)}


def _fail(reason: str, path: str, source: str | None) -> ProblemError:
    return ProblemError(reason, path=path, source=source)


def _module_from_dict(data: Any, path: str, source: str | None) -> ModuleSpec:
    """One module of a preset: known fields, the kind's required ones, then :func:`.checks.module_problem`."""
    if not isinstance(data, Mapping):
        raise _fail("must be an object", path, source)
    for key in ("name", "kind"):
        if key not in data:
            raise _fail("is missing", f"{path}.{key}", source)
    kind = data["kind"]
    if kind not in MODULE_KINDS:
        raise _fail(f"must be one of {', '.join(MODULE_KINDS)}, got {kind!r}", f"{path}.kind", source)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _MODULE_FIELDS:
            raise _fail(f"unknown field {key!r}", f"{path}.{key}", source)
        if key in ("dims", *LAYER_LIST_FIELDS) and isinstance(value, list):
            value = tuple(value)
        if key == "fqn":
            if not isinstance(value, Mapping):
                raise _fail("must be an object (pre, block, post: module names)", f"{path}.{key}", source)
            value = dict(value)
        else:
            why = field_problem(key, value, kind)  # in the document's order, before the kind's required fields
            if why is not None:
                raise _fail(why, f"{path}.{key}", source)
        values[key] = value
    for key in _REQUIRED[kind]:
        if key not in values:
            raise _fail(f"is missing (a {kind} module needs {', '.join(_REQUIRED[kind])})", f"{path}.{key}", source)
    spec = ModuleSpec(**values)
    found = module_problem(spec)
    if found is not None:
        raise _fail(found[1], ".".join(filter(None, (path, found[0]))), source)
    if kind == "vit" and spec.image_size % spec.patch:  # a preset states whole patches (transformers floors)
        raise _fail(f"image_size {spec.image_size} is not a multiple of patch {spec.patch}", f"{path}.image_size", source)
    return spec


def model_from_dict(data: Any, *, source: str | None = None) -> ModelSpec:
    """Validate a model preset document (see ``models/*.yaml``)."""
    if not isinstance(data, Mapping):
        raise ProblemError("a model preset must be an object", source=source)
    allowed = {"name", "title", "published_params", "references", "notes", "modules"}
    for key in data:
        if key not in allowed:
            raise _fail(f"unknown field {key!r} (allowed: {', '.join(sorted(allowed))})", key, source)
    if "name" not in data or not isinstance(data["name"], str):
        raise _fail("is missing (a string)", "name", source)
    mods = data.get("modules")
    if not isinstance(mods, list) or not mods:
        raise _fail("must be a non-empty list", "modules", source)
    if len(mods) > MAX_MODULES:
        raise _fail(f"must hold 1..{MAX_MODULES} modules, got {len(mods)}", "modules", source)
    modules = tuple(_module_from_dict(m, f"modules[{i}]", source) for i, m in enumerate(mods))
    published = data.get("published_params")
    if published is not None and (isinstance(published, bool) or not isinstance(published, (int, float)) or published <= 0):
        raise _fail("must be a positive number", "published_params", source)
    refs = data.get("references") or {}
    if not isinstance(refs, Mapping):
        raise _fail("must be an object (key: citation)", "references", source)
    spec = ModelSpec(
        name=data["name"],
        modules=modules,
        title=str(data.get("title") or ""),
        published_params=float(published) if published is not None else None,
        references=dict(refs),
        notes=str(data.get("notes") or ""),
        source=source,
    )
    return check_model(spec, source=source)


def _stage_sizes(value: Any, source: str | None) -> tuple[int, ...] | None:
    """A preset's ``stage_sizes``: a list of integers (their range is :func:`.checks.cluster_problem`'s)."""
    if value is None:
        return None
    if not isinstance(value, list) or not value or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise _fail(f"must be a non-empty list of integers (GPUs per stage inside a node), got {value!r}", "stage_sizes", source)
    return tuple(value)


def cluster_from_dict(data: Any, *, source: str | None = None) -> ClusterSpec:
    """Validate a cluster preset document (see ``models/clusters/*.yaml``)."""
    if not isinstance(data, Mapping):
        raise ProblemError("a cluster preset must be an object", source=source)
    required = ("name", "gpus_per_node", "gpu_memory_bytes", "peak_tflops", "intra_node_GBps", "inter_node_GBps")
    optional = ("gpu", "title", "references", "hbm_GBps", "peak_tflops_fp8", "generation", "stage_sizes", "levels")
    for key in data:
        if key not in required + optional:
            raise _fail(f"unknown field {key!r} (allowed: {', '.join(required + optional)})", key, source)
    for key in required:
        if key not in data:
            raise _fail("is missing", key, source)
    for key in required[1:]:
        v = data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise _fail(f"must be a positive number, got {v!r}", key, source)
    for key in ("hbm_GBps", "peak_tflops_fp8"):
        v = data.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0):
            raise _fail(f"must be a positive number, got {v!r}", key, source)
    for key in ("gpus_per_node", "gpu_memory_bytes"):
        if not float(data[key]).is_integer():
            raise _fail(f"must be an integer, got {data[key]!r}", key, source)
    if not isinstance(data.get("references") or {}, Mapping):
        raise _fail("must be an object (key: citation)", "references", source)
    spec = ClusterSpec(
        name=str(data["name"]),
        gpus_per_node=int(data["gpus_per_node"]),
        gpu_memory_bytes=int(data["gpu_memory_bytes"]),
        peak_tflops=float(data["peak_tflops"]),
        intra_node_GBps=float(data["intra_node_GBps"]),
        inter_node_GBps=float(data["inter_node_GBps"]),
        hbm_GBps=float(data["hbm_GBps"]) if data.get("hbm_GBps") is not None else None,
        peak_tflops_fp8=float(data["peak_tflops_fp8"]) if data.get("peak_tflops_fp8") is not None else None,
        stage_sizes=_stage_sizes(data.get("stage_sizes"), source),
        gpu=str(data.get("gpu") or ""),
        title=str(data.get("title") or ""),
        references=dict(data.get("references") or {}),
        source=source,
        generation=data.get("generation") or "",
        levels=_levels(data.get("levels"), source),
    )
    return check_cluster(spec, source=source)


def _levels(value: Any, source: str | None) -> tuple[Level, ...] | None:
    """A preset's ``levels`` (DESIGN.md "Network levels"), checked as a problem's are; None when absent."""
    if value is None:
        return None
    try:
        return parse_levels(value, "levels")
    except ProblemError as err:
        raise err.with_source(source) if source else err


