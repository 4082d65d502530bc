"""The scheduler: jobs onto worker slots, one record per job as it ends, whatever happens to the worker.

:func:`schedule` keeps every slot of a pool busy while jobs are pending and
yields one record (:mod:`.records`) per job: the job's result; ``error``
when it raised or its worker died (the worker is replaced; a worker that dies
three times before taking a job stops the sweep); ``timeout`` when it is
still running ``time_limit + grace`` seconds after it started (the worker is
killed and replaced). The default grace is ``5 s + 10 %`` of the limit,
since solvers stop between steps. No worker ready within 300 s stops the
sweep.

More (the detail of this module): ``docs/internals/batch.md``, section ``partitioner.batch.scheduler``.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Protocol, Sequence

from ..solvers.base import method_options
from .errors import SweepError
from .jobs import Job
from .records import failure_record, result_record

__all__ = ["THREAD_OPTIONS", "Pool", "schedule"]

# Options through which a method takes its thread count: CP-SAT's num_workers, the MILP's threads.
THREAD_OPTIONS = ("num_workers", "threads")


class Pool(Protocol):
    """What the scheduler needs of a backend (:mod:`.local_pool`, :mod:`.ray_pool`).

    Workers live in numbered *slots*. :meth:`wait` returns events
    ``(slot, kind, data)``: ``ready`` (data: the worker's
    :func:`~.records.local_info`), ``done`` (data: :func:`~.worker.run_job`'s
    output), ``fatal`` (data: why the worker could not be set up) and
    ``died`` (data: how it died).
    """

    backend: str

    def cores(self) -> int: ...
    def configure(self, imports: Sequence[str], threads: int) -> None: ...
    def start(self, slot: int) -> None: ...
    def send(self, slot: int, payload: Mapping[str, Any]) -> None: ...
    def wait(self, timeout: float) -> list[tuple[int, str, Any]]: ...
    def kill(self, slot: int) -> None: ...
    def forget(self, slot: int) -> None: ...
    def close(self) -> None: ...


def _runtime_options(job: Job, threads: int) -> dict[str, Any]:
    """The job's options plus ``threads`` for each thread option its method declares and the sweep left unset."""
    options = dict(job.options)
    declared = method_options(job.method)
    for name in THREAD_OPTIONS:
        if name in declared and name not in options:
            options[name] = threads
    return options


@dataclass
class _Slot:
    ready: bool = False
    job: Job | None = None
    options: Mapping[str, Any] | None = None
    started: float = 0.0
    deadline: float | None = None
    info: Mapping[str, Any] = field(default_factory=dict)
    idle_deaths: int = 0


def _default_grace(time_limit: float) -> float:
    """Seconds a job may run past its time limit before it is killed: solvers stop between steps."""
    return 5.0 + 0.1 * time_limit


def schedule(
    pool: Pool, jobs: Sequence[Job], size: int, threads: int, grace: float | None
) -> Iterator[dict[str, Any]]:
    """Run ``jobs`` on ``size`` worker slots of ``pool``; yield one record per job as it ends."""
    pending = deque(jobs)
    slots = {i: _Slot() for i in range(size)}
    for i in slots:
        pool.start(i)
    started_any = time.monotonic()
    ever_ready = False

    def restart(i: int) -> None:
        slots[i] = _Slot(idle_deaths=slots[i].idle_deaths)
        pool.start(i)

    def release(i: int) -> None:
        slot = slots[i]
        slot.job, slot.options, slot.deadline = None, None, None

    while pending or any(s.job is not None for s in slots.values()):
        now = time.monotonic()
        for i, slot in slots.items():
            if slot.ready and slot.job is None and pending:
                job = pending.popleft()
                slot.job, slot.options, slot.started = job, _runtime_options(job, threads), now
                if job.time_limit is not None:
                    slot.deadline = now + job.time_limit + (_default_grace(job.time_limit) if grace is None else grace)
                try:
                    pool.send(i, _payload(job, slot.options))
                except (OSError, ValueError):  # the worker died while idle: its death event restarts it
                    pending.appendleft(job)
                    release(i)
                    slot.ready = False
        deadlines = [s.deadline for s in slots.values() if s.deadline is not None]
        timeout = min([1.0] + [max(0.0, d - now) for d in deadlines])
        for i, kind, data in pool.wait(timeout):
            slot = slots[i]
            if kind == "ready":
                slot.ready, slot.info, slot.idle_deaths = True, data, 0
                ever_ready = True
            elif kind == "done":
                if slot.job is not None:
                    yield result_record(slot.job, slot.options or {}, data)
                    release(i)
            elif kind == "fatal":
                raise SweepError(str(data))
            elif kind == "died":
                pool.forget(i)
                if slot.job is not None:
                    wall = time.monotonic() - slot.started
                    yield failure_record(slot.job, slot.options or {}, "error", f"{data} while solving", wall, slot.info)
                    release(i)
                else:
                    slot.idle_deaths += 1
                    if slot.idle_deaths >= 3:
                        raise SweepError(f"a {pool.backend} worker keeps dying before it takes a job: {data}")
                restart(i)
        now = time.monotonic()
        for i, slot in slots.items():
            if slot.job is not None and slot.deadline is not None and now > slot.deadline:
                wall = now - slot.started
                limit = slot.job.time_limit
                assert limit is not None, "a deadline is set only under a time limit"
                message = f"killed after {wall:.1f} s: it overran its time limit of {limit:g} s (+ {slot.deadline - slot.started - limit:g} s grace)"
                pool.kill(i)
                yield failure_record(slot.job, slot.options or {}, "timeout", message, wall, slot.info)
                restart(i)
        if not ever_ready and time.monotonic() - started_any > 300:
            raise SweepError(f"no {pool.backend} worker started within 300 s")


def _payload(job: Job, options: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "problem": job.document,
        "method": job.method,
        "objective": job.objective,
        "time_limit": job.time_limit,
        "seed": job.seed,
        "options": dict(options),
    }
