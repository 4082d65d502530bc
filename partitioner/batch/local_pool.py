"""The ``local`` backend: worker processes on this machine, one per slot, killable one by one.

Processes are *spawned* (not forked), so the parent's threads and solver
state are not inherited; each talks to the parent over a duplex pipe
(:func:`~.worker.process_worker`). :meth:`ProcessPool.wait` drains every
message of a worker before it believes the worker's death, and reports a
death with its signal or exit code. The pool follows the interface the
scheduler drives (:class:`~.scheduler.Pool`).
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import time
from multiprocessing.connection import wait as wait_objects
from typing import Any, Mapping, Sequence

from .worker import process_worker

__all__ = ["ProcessPool", "available_cores"]


class ProcessPool:
    """Worker processes (spawned, so the parent's threads and solver state are not inherited)."""

    backend = "local"

    def __init__(self) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._procs: dict[int, Any] = {}
        self._conns: dict[int, Any] = {}

    def cores(self) -> int:
        return available_cores()

    def configure(self, imports: Sequence[str], threads: int) -> None:
        self._imports = tuple(imports)  # threads reach the jobs as a method option, not a process setting

    def start(self, slot: int) -> None:
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(
            target=process_worker, args=(child_end, self._imports), name=f"partitioner-batch-{slot}",
            daemon=True,
        )
        proc.start()
        child_end.close()
        self._procs[slot], self._conns[slot] = proc, parent_end

    def send(self, slot: int, payload: Mapping[str, Any]) -> None:
        self._conns[slot].send(dict(payload))

    def wait(self, timeout: float) -> list[tuple[int, str, Any]]:
        by_object: dict[Any, tuple[int, str]] = {}
        for slot, conn in self._conns.items():
            by_object[conn] = (slot, "conn")
            by_object[self._procs[slot].sentinel] = (slot, "sentinel")
        events: list[tuple[int, str, Any]] = []
        dead: set[int] = set()
        for obj in wait_objects(list(by_object), timeout):
            slot, kind = by_object[obj]
            if slot in dead:
                continue
            conn = self._conns[slot]
            try:
                while conn.poll():  # drain messages before believing a death
                    kind_msg, data = conn.recv()
                    events.append((slot, kind_msg, data))
            except (EOFError, OSError):
                pass
            proc = self._procs[slot]
            if kind == "sentinel" or not proc.is_alive():
                proc.join(timeout=1.0)
                if not proc.is_alive():
                    dead.add(slot)
                    events.append((slot, "died", _exit_description(proc.exitcode)))
        return events

    def kill(self, slot: int) -> None:
        proc = self._procs.pop(slot)
        conn = self._conns.pop(slot)
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5.0)
        conn.close()

    def forget(self, slot: int) -> None:
        """Drop a slot whose process already ended."""
        self.kill(slot)

    def close(self) -> None:
        for slot, conn in list(self._conns.items()):
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 2.0
        for slot in list(self._procs):
            proc = self._procs[slot]
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
            self.kill(slot)


def _exit_description(code: int | None) -> str:
    if code is None:
        return "worker process ended"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker process died ({name})"
    return f"worker process died (exit code {code})"


def available_cores() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
