"""The result record: one JSON object per finished job, as the results file stores it.

Every record has the job's identity (``key``, ``problem``, ``method``,
``label``, ``options`` -- the options the job ran with, thread count included
--, ``objective``, ``time_limit``, ``seed``, and ``grid`` for a grid point),
the outcome (``status``, ``value``, ``bound``, ``gap``, ``solve_seconds``,
``message``, ``plan`` and any further fields of ``SolveResult.to_dict()``;
the result format's ``version``, 2 for a format-v2 problem, is kept as
``format_version`` since ``version`` names the package),
and where and how long it ran (``version``, ``host``, ``worker``,
``wall_seconds``, ``cpu_seconds``, ``finished_at``, ``problem_hash``).

More (the detail of this module): ``docs/internals/batch.md``, section ``partitioner.batch.records``.
"""
from __future__ import annotations

import os
import socket
from datetime import datetime, timezone
from typing import Any, Mapping

from .jobs import Job

__all__ = ["FAILED", "local_info", "failure_record", "result_record"]

FAILED = ("error", "timeout")  # statuses a job ends with when it produced no answer of its own


def local_info() -> dict[str, Any]:
    """Who writes a record: the package version, the host name and the process id."""
    from .. import __version__

    return {"version": __version__, "host": socket.gethostname(), "worker": os.getpid()}


def _base_record(job: Job, options: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "key": job.key,
        "problem": job.problem,
        "method": job.method,
        "label": job.label,
        "options": dict(options),
        "objective": job.objective,
        "time_limit": job.time_limit,
        "seed": job.seed,
        **({"grid": dict(job.grid)} if job.grid is not None else {}),
    }


def _finish_record(record: dict[str, Any], job: Job, info: Mapping[str, Any], wall: float) -> dict[str, Any]:
    record.update(
        version=info.get("version"),
        host=info.get("host"),
        worker=info.get("worker"),
        wall_seconds=wall,
        cpu_seconds=info.get("cpu_seconds"),
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        problem_hash=job.problem_hash,
    )
    return record


def failure_record(
    job: Job, options: Mapping[str, Any], status: str, message: str, wall: float, info: Mapping[str, Any]
) -> dict[str, Any]:
    """The record of a job with no answer of its own (``status`` in :data:`FAILED`), written by ``info``."""
    record = _base_record(job, options)
    record.update(status=status, value=None, bound=None, gap=None, solve_seconds=wall, message=message, plan=None)
    return _finish_record(record, job, info, wall)


def result_record(job: Job, options: Mapping[str, Any], out: Mapping[str, Any]) -> dict[str, Any]:
    """The record of a job from :func:`~.worker.run_job`'s output ``out`` (an ``error`` record if it raised)."""
    wall = float(out.get("wall_seconds") or 0.0)
    if out.get("result") is None:
        record = failure_record(job, options, "error", out.get("error") or "the job returned nothing", wall, out)
        if out.get("traceback"):
            record["traceback"] = out["traceback"]
        return record
    record = _base_record(job, options)
    result = dict(out["result"])
    for name in ("status", "value", "bound", "gap", "solve_seconds", "message", "plan"):
        record[name] = result.pop(name, None)
    if "version" in result:  # the result format (v2 results say so); "version" of a record is the package's
        record["format_version"] = result.pop("version")
    for name, value in result.items():
        record.setdefault(name, value)
    return _finish_record(record, job, out, wall)
