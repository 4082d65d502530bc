"""What runs inside a worker: solve one job's payload, never raising.

A *payload* is the plain dict a pool sends a worker: ``problem``
(``Problem.to_dict()``), ``method``, ``objective``, ``time_limit``, ``seed``
and ``options``. :func:`run_job` solves it and returns the result document or
the error message with the last frames of its traceback, with the wall and
CPU time and :func:`~.records.local_info`. :func:`process_worker` is the loop
of a local worker process (:mod:`.local_pool`): it announces ``ready`` (or a
``fatal`` setup error), then answers each payload with ``done`` until it
receives ``None``, and exits when its parent is gone. :func:`prepare_worker`
registers the methods and imports the sweep's extra modules.
"""
from __future__ import annotations

import importlib
import os
import signal
import threading
import time
import traceback
from typing import Any, Mapping, Sequence

from ..problem import Problem
from ..solvers import methods as registered_methods
from ..solvers import solve
from .records import local_info

__all__ = ["run_job", "prepare_worker", "process_worker"]


def run_job(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Solve one job's payload; never raises (an exception becomes an ``error`` result).

    Returns ``{"result": SolveResult.to_dict() or None, "error": message or None,
    "traceback": ..., "wall_seconds", "cpu_seconds", "version", "host", "worker"}``.
    """
    start, cpu_start = time.perf_counter(), time.process_time()
    out: dict[str, Any] = {"result": None, "error": None}
    try:
        problem = Problem.from_dict(payload["problem"])
        result = solve(
            problem,
            payload["method"],
            objective=payload["objective"],
            time_limit=payload["time_limit"],
            seed=payload["seed"],
            options=payload["options"],
        )
        out["result"] = result.to_dict()
    except Exception as err:  # the job failed, not the sweep: record it
        out["error"] = f"{type(err).__name__}: {err}"
        out["traceback"] = "".join(traceback.format_exception(type(err), err, err.__traceback__)[-8:])
    out["wall_seconds"] = time.perf_counter() - start
    out["cpu_seconds"] = time.process_time() - cpu_start  # every thread of the worker: load-independent cost
    out.update(local_info())
    return out


def prepare_worker(imports: Sequence[str]) -> None:
    """Register the built-in methods and import the modules that register a sweep's extra ones."""
    registered_methods()
    for module in imports:
        importlib.import_module(module)


def _watch_parent() -> None:
    """Exit when the sweep process is gone (it was killed, so nobody will read our results)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def process_worker(conn: Any, imports: Sequence[str]) -> None:
    """A local worker: announce readiness, then solve jobs until told to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _watch_parent()
    try:
        prepare_worker(imports)
    except BaseException as err:
        conn.send(("fatal", f"worker setup failed: {type(err).__name__}: {err}"))
        return
    conn.send(("ready", local_info()))
    while True:
        try:
            payload = conn.recv()
        except (EOFError, OSError):
            return
        if payload is None:
            return
        out = run_job(payload)
        try:
            conn.send(("done", out))
        except (OSError, ValueError):
            return
