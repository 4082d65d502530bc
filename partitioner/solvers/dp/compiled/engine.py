"""Which dp kernels run: the Python functions themselves, or their numba-compiled twins.

The kernels of :mod:`.kernels` (the recursion's levels) and :mod:`.stage_kernels`
(the stage tables) are plain Python functions marked with :func:`.marks.kernel`.
They run either

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.compiled.engine``.
"""
from __future__ import annotations

import math
import os
import threading
import time
import types
from dataclasses import dataclass
from typing import Callable, Literal, overload

from ....core.deadline import load_slowdown as slowdown
from ...errors import OutOfTime
from . import aot
from . import kernels as _py_levels
from . import stage_kernels as _py_stages
from .marks import twin

__all__ = ["Kernels", "SIGNATURES", "RETURNS", "PYTHON", "pick", "compiled_kernels", "load_cached", "warmup", "set_reporter",
           "take_note", "account", "python_seconds", "recursion_work", "stage_work", "mode", "reset"]

# measured on the shared 2-core machine at a load of 6-8 (docs/decisions.md, "The first run"): the Python path's
# seconds per unit of work (45-160 ns on solves of 1e7-2e9 units), the wall time of compiling every
# signature (68 and 83 s; 26 s of CPU), and the Python cost below which loading numba and its cache
# (about 1.2 s) takes longer than running Python
PYTHON_SECONDS_PER_UNIT = 1.0e-7
COMPILE_SECONDS = 70.0
SMALL_SECONDS = 0.5
# about what importing numba and loading every cached signature takes (the same measurement): once the Python
# path has cost the process this much, a further small call loads the cache instead (rule 2)
LOAD_SECONDS = 1.2


@dataclass(frozen=True)
class Kernels:
    """One set of kernels: ``levels`` (:mod:`.kernels`' functions), ``stages`` (:mod:`.stage_kernels`'): the
    modules themselves, their just-in-time twins, or namespaces of the ahead-of-time module's entry points."""

    levels: types.ModuleType | types.SimpleNamespace
    stages: types.ModuleType | types.SimpleNamespace
    compiled: bool


PYTHON = Kernels(_py_levels, _py_stages, False)

# the argument types of every kernel entry point as the dp calls it (numba's signature strings; every array
# is C-contiguous, as the call sites make it): compiled at once by compiled_kernels(compile=True)
_I1, _F1, _F2, _F3, _I2 = "int64[::1]", "float64[::1]", "float64[:, ::1]", "float64[:, :, ::1]", "int64[:, ::1]"
_GRP = f"UniTuple({_I1}, 11)"
_RUNS = f"UniTuple({_I1}, 6)"
_ROWS = f"{_F1}, int64, {_F2}, {_I2}, {_I2}, {_F2}, {_I2}, {_I2}, {_F1}"  # out, a_stride, keys in, keys out, first
SIGNATURES: dict[tuple[str, str], tuple[str, ...]] = {
    ("levels", "last_level"): (f"({_F1}, int64, int64, int64, {_I1}, {_F2}, {_RUNS}, {_F2}, {_I2}, {_I2}, {_F1})",),
    ("levels", "plain_level"): (
        f"({_ROWS}, int64, int64, int64, int64, float64, boolean, int64, boolean, {_GRP}, "
        f"{_F2}, {_F2}, {_I2}, {_F3}, {_F2}, boolean, {_I1}, boolean, boolean, {_RUNS}, {_I1}, {_F2})",),
    ("levels", "options_level"): (
        f"({_ROWS}, int64, int64, int64, int64, int64, float64, boolean, boolean, {_GRP}, "
        f"{_F2}, {_F2}, {_I2}, {_I1}, {_I1}, {_F1}, {_F1}, int64, float64, float64, float64, {_F2}, boolean, "
        f"{_RUNS}, {_I1}, {_F2})",),
    ("levels", "prefix_devices"): (f"({_F3}, {_I1}, float64, int64)",),
    ("stages", "single_segment"): (f"({_F2}, {_F2}, {_I1}, {_I2}, {_I2})",),
    ("stages", "spanning_one"): (f"({_F2}, {_F1}, {_I1}, {_I1})",),
    ("stages", "spanning"): (
        f"({_F2}, {_F2}, {_I1}, {_I1}, int64, {_I2}, {_I2}, {_I2}, int64, int64, {_I2}, {_F3}, int64, int64)",),
    ("stages", "options_single"): (f"({_F3}, {_F3}, {_I2}, {_F2}, {_F2}, {_I1}, {_I2}, {_I2})",),
    ("stages", "options_spanning_one"): (f"({_F3}, {_F3}, {_I2}, {_F1}, {_F1}, {_I1}, {_I1})",),
    ("stages", "options_spanning"): (
        f"({_F3}, {_F3}, {_I2}, {_F2}, {_F2}, {_I1}, {_I1}, int64, {_I2}, {_I2}, {_I2}, int64, int64, {_I2}, "
        f"{_F3}, {_F3}, int64, int64)",),
}
# what an entry point returns (the ahead-of-time module declares it; the others return nothing)
RETURNS: dict[tuple[str, str], str] = {
    ("levels", "prefix_devices"): _I1,
    ("stages", "options_single"): "boolean",
    ("stages", "options_spanning_one"): "boolean",
    ("stages", "options_spanning"): "boolean",
}


class _State:
    """What the process knows: the compiled kernels (once loaded), whether the cache was found cold,
    the Python seconds spent, and the note of the solve running now."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.compiled: Kernels | None = None
        self.cold = False  # the disk cache was probed and lacks a signature
        self.compiled_here = False  # this process compiled the kernels (rather than loading them)
        self.aot_failed: str | None = None  # why the ahead-of-time module could not be built here
        self.python_seconds = 0.0
        self.note: str | None = None
        self.reporter: Callable[[int, int, str], None] | None = None


_STATE = _State()


def reset() -> None:
    """Forget the compiled kernels, the probe and the Python seconds (tests; a process's next solve
    starts as the process's first did)."""
    global _STATE
    reporter = _STATE.reporter
    _STATE = _State()
    _STATE.reporter = reporter


def mode() -> str:
    """``PARTITIONER_DP_KERNELS``: ``auto`` (default), ``python``, ``compiled`` or ``jit``."""
    wanted = os.environ.get("PARTITIONER_DP_KERNELS", "auto").strip().lower()
    return wanted if wanted in ("python", "compiled", "jit") else "auto"


def set_reporter(reporter: Callable[[int, int, str], None] | None) -> None:
    """``reporter(done, total, kernel)`` is called before each signature compiles and once at the end
    (``done == total``); the CLI shows it on stderr. None: silent."""
    _STATE.reporter = reporter


def take_note() -> str | None:
    """What the kernels' choice says about the solve that just ran (then forgotten), or None."""
    note, _STATE.note = _STATE.note, None
    return note


def python_seconds() -> float:
    """The seconds this process has spent in the Python path's kernels so far (:func:`account`)."""
    return _STATE.python_seconds


def account(kernels: Kernels, seconds: float) -> None:
    """Count ``seconds`` spent in ``kernels`` (the Python path's, for the rule of :func:`pick`)."""
    if not kernels.compiled:
        with _STATE.lock:
            _STATE.python_seconds += seconds


# --------------------------------------------------------------------------- work estimates


def recursion_work(levels: int, layers: int, pair_columns: float) -> float:
    """Units of work of a fill: per level, first layers x last layers (``L^2 / 2``) x the pairs' device
    columns (``sum_g pairs_g (N + 1 - d_g)``)."""
    return float(levels) * layers * (layers + 1) / 2.0 * max(pair_columns, 1.0)


def stage_work(layers: int, configs: int) -> float:
    """Units of work of one stage table: ``L^2 / 2`` stages x configs."""
    return layers * (layers + 1) / 2.0 * max(configs, 1)


# --------------------------------------------------------------------------- the compiled twins


def _entries(kernels: Kernels):
    """(label, dispatcher, signature) of every entry point of :data:`SIGNATURES`."""
    for (part, name), sigs in SIGNATURES.items():
        for sig in sigs:
            yield f"{part}.{name}", getattr(getattr(kernels, part), name), sig


class _Refused(Exception):
    """Raised by the probe's listener: the signature is not in the cache."""


def _build() -> Kernels:
    """The just-in-time twins, nothing compiled or loaded yet."""
    from numba import njit  # heavy: only the just-in-time path imports numba

    def jit(options: dict):
        return njit(cache=True, nogil=True, **options)

    return Kernels(twin(_py_levels, jit), twin(_py_stages, jit), True)


def ahead_of_time() -> Kernels | None:
    """The ahead-of-time module's kernels (:mod:`.aot`), imported now, or None when it is not built
    (or ``PARTITIONER_DP_KERNELS=jit``)."""
    if mode() == "jit":
        return None
    found = aot.load(SIGNATURES, RETURNS)
    return None if found is None else Kernels(found[0], found[1], True)


def _build_ahead_of_time() -> Kernels | None:
    """Build the ahead-of-time module and import it; None (and the reason kept) when it cannot be built."""
    if mode() == "jit":
        return None
    why = aot.build(SIGNATURES, RETURNS)
    if why is not None:
        _STATE.aot_failed = why
        return None
    return ahead_of_time()


def load_cached(kernels: Kernels | None = None) -> Kernels | None:
    """The compiled kernels if numba's disk cache holds every signature (loaded now), else None.

    Uses numba's own lookup (``Dispatcher.compile`` tries the cache first); a listener on the
    ``numba:compile`` event refuses the compile a miss would start, so probing compiles nothing."""
    from numba.core import event

    kernels = kernels or _build()
    mine = {id(disp) for _, disp, _ in _entries(kernels)}

    class Refuse(event.Listener):
        def on_start(self, ev):
            if id(ev.data.get("dispatcher")) in mine:
                raise _Refused

        def on_end(self, ev):
            pass

    with event.install_listener("numba:compile", Refuse()):
        for _, disp, sig in _entries(kernels):
            try:
                disp.compile(sig)
            except _Refused:
                return None
    return kernels


@overload
def compiled_kernels(compile: Literal[True] = ...) -> Kernels: ...


@overload
def compiled_kernels(compile: bool) -> Kernels | None: ...


def compiled_kernels(compile: bool = True) -> Kernels | None:
    """The compiled kernels of this process: the ahead-of-time module, else numba's disk cache, or
    (``compile``) compiled now, every signature at once (the module where it can be built); None when
    not compiled and the cache is cold."""
    with _STATE.lock:
        if _STATE.compiled is not None:
            return _STATE.compiled
        found = ahead_of_time()
        if found is not None:
            _STATE.compiled = found
            return found
        kernels = _build()
        if load_cached(kernels) is not None:
            _STATE.compiled = kernels
            return kernels
        _STATE.cold = True
        if not compile:
            return None
        report = _STATE.reporter
        if mode() != "jit" and _STATE.aot_failed is None:
            if report:
                report(0, 1, "every kernel, ahead of time")
            found = _build_ahead_of_time()
            if found is not None:
                if report:
                    report(1, 1, "")
                _STATE.compiled, _STATE.compiled_here = found, True
                return found
        entries = list(_entries(kernels))
        for done, (label, disp, sig) in enumerate(entries):
            if report:
                report(done, len(entries), label)
            disp.compile(sig)
        if report:
            report(len(entries), len(entries), "")
        _STATE.compiled, _STATE.compiled_here = kernels, True
        return kernels


def warmup(reporter: Callable[[int, int, str], None] | None = None) -> tuple[bool, float]:
    """Compile (or load) every kernel signature: (whether it was compiled now, seconds taken). The
    ahead-of-time module is built where it can be, even when numba's cache is warm already."""
    start = time.perf_counter()
    with _STATE.lock:
        saved = _STATE.reporter
        _STATE.reporter = reporter
        try:
            found = ahead_of_time()
            if found is not None:
                _STATE.compiled = found
                return False, time.perf_counter() - start
            if mode() != "jit" and _STATE.aot_failed is None:
                if reporter:
                    reporter(0, 1, "every kernel, ahead of time")
                found = _build_ahead_of_time()
                if found is not None:
                    if reporter:
                        reporter(1, 1, "")
                    _STATE.compiled, _STATE.compiled_here = found, True
                    return True, time.perf_counter() - start
            before = _STATE.compiled  # the just-in-time kernels, if this process loaded them
            compiled_kernels(compile=True)
        finally:
            _STATE.reporter = saved
        compiled_now = before is None and _STATE.compiled_here
    return compiled_now, time.perf_counter() - start


# --------------------------------------------------------------------------- the choice


def pick(work: float, deadline: float | None) -> Kernels:
    """The kernels for a call of ``work`` units under ``deadline`` (see the module docstring)."""
    forced = mode()
    if forced == "python":
        return PYTHON
    if forced in ("compiled", "jit"):
        return compiled_kernels(compile=True)
    state = _STATE
    if state.compiled is not None:
        return state.compiled
    found = ahead_of_time()  # a stat when not built; an import of a millisecond when built
    if found is not None:
        with state.lock:
            state.compiled = state.compiled or found
            return state.compiled
    estimate = work * PYTHON_SECONDS_PER_UNIT
    if estimate <= SMALL_SECONDS and (state.cold or state.python_seconds + estimate <= LOAD_SECONDS):
        return PYTHON
    with state.lock:
        if state.compiled is not None:
            return state.compiled
        left = math.inf if deadline is None else deadline - time.perf_counter()
        # loading numba and the cache cannot be interrupted: start it only with time to finish it twice over,
        # at the machine's present load (its wall time grows with the runnable tasks per core)
        if not state.cold and left >= 2 * LOAD_SECONDS * slowdown():
            loaded = compiled_kernels(compile=False)  # the disk cache, now state.compiled
            if loaded is not None:
                return loaded
        if state.python_seconds + estimate > COMPILE_SECONDS and left >= 2 * COMPILE_SECONDS:
            start = time.perf_counter()
            found = compiled_kernels(compile=True)
            state.note = (f"compiled the dp kernels (first run, {time.perf_counter() - start:.1f} s, once; "
                          "`partitioner warmup` compiles them ahead)")
            return found
        if estimate * slowdown() <= left:  # a Python kernel call cannot be interrupted either
            state.note = state.note or (
                "ran the dp kernels in Python (not compiled yet; `partitioner warmup` compiles them once)" if state.cold
                else "ran the dp kernels in Python (the time left was too short to load them at this load)")
            return PYTHON
        state.note = ("the dp kernels are not compiled yet and the time left allows neither compiling them nor "
                      "running them in Python (`partitioner warmup` compiles them once)" if state.cold else
                      "the dp kernels are not compiled or loaded in this process, and the time left allows neither "
                      "loading them (seconds, uninterruptible) nor running them in Python at this load (the "
                      f"1-minute load average is {slowdown():.1f} per core; `partitioner warmup` compiles them once)")
    raise OutOfTime
