"""dp's kernels compiled ahead of time into one extension module, which a process imports without numba.

Loading numba's on-disk cache costs every process the import of numba and
the load of each cached signature (about 1.4 s on the shared 2-core machine,
where a 64-layer solve then takes 0.05 s). So :func:`build` compiles every
signature of :data:`.engine.SIGNATURES` once, with numba's ahead-of-time
compiler (``numba.pycc`` [1]; it needs a C compiler to link), into one
extension module in the cache directory, and :func:`load` imports it: a
shared library and numpy, about a millisecond, no numba.

The detail, and the references cited above: ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.compiled.aot``.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import sys
import tempfile
import types
import warnings
from pathlib import Path

import numpy as np

from . import kernels as _py_levels
from . import marks as _marks
from . import stage_kernels as _py_stages

__all__ = ["fingerprint", "module_path", "load", "build", "ENTRY_SEPARATOR"]

ENTRY_SEPARATOR = "__"  # an entry point is exported as ``{part}__{name}`` (part: levels or stages)
_HERE = Path(__file__).resolve().parent


_PRINTS: dict[str, str] = {}  # the fingerprint of each (signatures, returns), once per process


def fingerprint(signatures: dict, returns: dict) -> str:
    """16 hex digits of a hash over the kernels' sources, the signatures, numpy, Python and the platform."""
    key = repr((sorted(signatures.items()), sorted(returns.items())))
    found = _PRINTS.get(key)
    if found is None:
        found = _PRINTS[key] = _hash(signatures, returns)
    return found


def _hash(signatures: dict, returns: dict) -> str:
    h = hashlib.sha256()
    for module in (_py_levels, _py_stages, _marks):
        h.update(Path(module.__file__ or "").read_bytes())
    h.update(repr(sorted(signatures.items())).encode())
    h.update(repr(sorted(returns.items())).encode())
    # the module is native code against numpy's C API, built for this interpreter and machine (numba only
    # builds it): numpy's version, the interpreter's and the extension suffix (ABI, platform) name it
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    h.update(f"{np.__version__}|{sys.version}|{platform.machine()}|{suffix}".encode())
    return h.hexdigest()[:16]


def _directory() -> Path:
    """Where the module lives (see the module docstring)."""
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    if chosen:
        return Path(chosen) / "partitioner-dp"
    local = _HERE / "__pycache__"
    try:
        local.mkdir(exist_ok=True)
        if os.access(local, os.W_OK):
            return local
    except OSError:
        pass
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "partitioner"


def _module_name(signatures: dict, returns: dict) -> str:
    return f"_dp_kernels_{fingerprint(signatures, returns)}"


def module_path(signatures: dict, returns: dict) -> Path:
    """The file the module of these signatures is (or would be) in."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return _directory() / f"{_module_name(signatures, returns)}{suffix}"


def load(signatures: dict, returns: dict) -> tuple[types.SimpleNamespace, types.SimpleNamespace] | None:
    """The (levels, stages) entry points of the built module, imported now; None when it is not built."""
    path = module_path(signatures, returns)
    if not path.is_file():
        return None
    name = _module_name(signatures, returns)
    found = sys.modules.get(name)
    if found is None:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            return None
        found = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(found)
        sys.modules[name] = found
    # each part: its module's constants (e.g. the spec codes of the level kernels), its entry points compiled
    parts: dict[str, dict] = {name: {k: v for k, v in vars(module).items() if not k.startswith("__")}
                              for name, module in (("levels", _py_levels), ("stages", _py_stages))}
    for part, entry in signatures:
        parts[part][entry] = getattr(found, f"{part}{ENTRY_SEPARATOR}{entry}")
    return types.SimpleNamespace(**parts["levels"]), types.SimpleNamespace(**parts["stages"])


def build(signatures: dict, returns: dict) -> str | None:
    """Compile every entry point into the module (see the module docstring); None when built, else why not."""
    path = module_path(signatures, returns)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numba.pycc announces its pending deprecation
            from numba import njit
            from numba.core.compiler import Flags
            from numba.pycc import CC
            from numba.pycc import compiler as pycc_compiler
    except Exception as exc:  # noqa: BLE001 -- any failure to import means: no ahead-of-time path here
        return f"numba's ahead-of-time compiler is not available ({type(exc).__name__}: {exc})"

    class GilFree(Flags):  # the entry points' wrappers release the GIL, as nogil=True does for the JIT
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.release_gil = True

    def jit(options: dict):
        return njit(nogil=True, **options)

    twins = {"levels": _marks.twin(_py_levels, jit), "stages": _marks.twin(_py_stages, jit)}
    name = _module_name(signatures, returns)
    saved = pycc_compiler.Flags
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as scratch, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            setattr(pycc_compiler, "Flags", GilFree)  # the module builds its flags from this name
            cc = CC(name)
            cc.output_dir = scratch
            cc.target_cpu = "host"  # built on the machine that runs it, as the JIT compiles
            cc.verbose = False
            for (part, entry), sigs in signatures.items():
                for sig in sigs:
                    cc.export(f"{part}{ENTRY_SEPARATOR}{entry}", returns.get((part, entry), "none") + sig)(
                        twins[part].__dict__[entry].py_func)
            cc.compile()
            built = Path(scratch) / path.name
            if not built.is_file():
                return f"numba's ahead-of-time compiler wrote no {path.name}"
            shutil.move(str(built), str(path.with_suffix(".partial")))
            os.replace(path.with_suffix(".partial"), path)
    except Exception as exc:  # noqa: BLE001 -- a failed build (no C compiler, ...) leaves the JIT path
        return f"building the ahead-of-time kernels failed ({type(exc).__name__}: {str(exc)[:200]})"
    finally:
        setattr(pycc_compiler, "Flags", saved)
    return None
