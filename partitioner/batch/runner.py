"""Running a sweep: the jobs not yet in the results file, on a pool, each record on disk as it ends.

:func:`run_jobs` opens the results store (:mod:`.store`), skips every job
whose key already has a record (unless ``retry_failed`` and that record's
status is ``error`` or ``timeout``), writes the records of grid points the
cost model could not build, sizes the pool (``workers``, default: the cores
of the backend) and the solver threads per job, and appends each record the
scheduler (:mod:`.scheduler`) yields, then calls ``on_record``. It returns a
:class:`SweepSummary`. :func:`run_sweep` is the same from a sweep
(:func:`~.sweep.load_sweep`, :func:`~.sweep.expand`). Running the same sweep
again resumes it.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .errors import SweepError
from .jobs import Job
from .local_pool import ProcessPool
from .ray_pool import RayPool
from .records import FAILED
from .scheduler import Pool, schedule
from .store import ResultsFile
from .sweep import Sweep, expand, load_sweep

__all__ = ["BACKENDS", "SweepSummary", "run_jobs", "run_sweep"]

BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class SweepSummary:
    """What one run of a sweep did."""

    out: str
    total: int  # distinct jobs in the sweep
    skipped: int  # already in the results file
    ran: int  # records written by this run
    statuses: Mapping[str, int]  # of the records written by this run
    seconds: float
    backend: str
    workers: int
    threads: int
    dropped_bytes: int = 0  # a half-written tail cut from the results file
    duplicates: int = 0  # jobs listed twice (same problem content, method and settings)


def _make_pool(backend: str, address: str | None) -> Pool:
    if backend == "local":
        if address:
            raise SweepError("--address is for the ray backend")
        return ProcessPool()
    if backend == "ray":
        return RayPool(address)
    raise SweepError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")


def run_jobs(
    jobs: Sequence[Job],
    out: str | Path,
    *,
    workers: int | None = None,
    backend: str = "local",
    address: str | None = None,
    grace: float | None = None,
    retry_failed: bool = False,
    imports: Sequence[str] = (),
    prefailed: Sequence[Mapping[str, Any]] = (),
    on_start: Callable[[int, int], None] | None = None,
    on_record: Callable[[Mapping[str, Any]], None] | None = None,
    duplicates: int = 0,
) -> SweepSummary:
    """Run ``jobs`` not yet finished in ``out``, appending a record for each.

    Parameters
    ----------
    jobs : sequence of Job
    out : path
        The JSON-lines results file (created if missing).
    workers : int, optional
        Concurrent jobs; default: the cores (local) or the cluster's CPUs (ray).
    backend : {"local", "ray"}
    address : str, optional
        A Ray cluster address (``ray`` backend); default: start a local instance.
    grace : float, optional
        Seconds past its time limit before a job is killed; default 5 + 10 % of the limit.
    retry_failed : bool
        Also run jobs whose latest record is ``error`` or ``timeout``.
    imports : sequence of str
        Modules every worker imports first (methods registered outside the package).
    prefailed : sequence of dict
        Records to write without running anything (grid points that could not be built).
    on_start : callable(total, done), optional
    on_record : callable(record), optional
        Progress hooks; ``on_record`` is called after each record is on disk.
    """
    if workers is not None and workers < 1:
        raise SweepError(f"--workers must be >= 1, got {workers}")
    if grace is not None and grace < 0:
        raise SweepError(f"--grace must be >= 0 seconds, got {grace}")
    if backend not in BACKENDS:
        raise SweepError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    start = time.monotonic()
    statuses: Counter[str] = Counter()
    with ResultsFile(out) as store:
        finished = store.latest()

        def done(key: str) -> bool:
            record = finished.get(key)
            return record is not None and not (retry_failed and record.get("status") in FAILED)

        todo = [job for job in jobs if not done(job.key)]
        late = [r for r in prefailed if r["key"] not in finished]
        total = len(jobs) + len(prefailed)
        skipped = total - len(todo) - len(late)
        if on_start:
            on_start(total, skipped)

        def write(record: Mapping[str, Any]) -> None:
            store.append(record)
            statuses[record["status"]] += 1
            if on_record:
                on_record(record)

        for record in late:
            write(record)
        size, threads = 0, 1
        if todo:
            pool = _make_pool(backend, address)
            try:
                cores = pool.cores()
                size = min(workers or cores, len(todo))
                threads = max(1, cores // size)
                pool.configure(imports, threads)
                for record in schedule(pool, todo, size, threads, grace):
                    write(record)
            finally:
                pool.close()
        dropped = store.dropped_bytes
    return SweepSummary(
        out=str(out),
        total=total,
        skipped=skipped,
        ran=sum(statuses.values()),
        statuses=dict(statuses),
        seconds=time.monotonic() - start,
        backend=backend,
        workers=size,
        threads=threads,
        dropped_bytes=dropped,
        duplicates=duplicates,
    )


def run_sweep(sweep: Sweep | str | Path, out: str | Path, **kwargs: Any) -> SweepSummary:
    """Expand ``sweep`` (a :class:`Sweep` or a sweep file) and run it into ``out``; see :func:`run_jobs`."""
    if not isinstance(sweep, Sweep):
        sweep = load_sweep(sweep)
    expansion = expand(sweep)
    return run_jobs(
        expansion.jobs,
        out,
        imports=sweep.imports,
        prefailed=expansion.failed,
        duplicates=expansion.duplicates,
        **kwargs,
    )
