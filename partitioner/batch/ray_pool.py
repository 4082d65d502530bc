"""The ``ray`` backend: one Ray actor per worker slot, on a local Ray instance or a cluster.

Ray is optional (``pip install 'partitioner[ray]'``); without it, or when the
cluster cannot be reached, :class:`RayPool` raises
:class:`~.errors.SweepError`. Each actor reserves the CPUs its jobs may use
(the scheduler's thread count), so Ray does not oversubscribe a node; an actor
that dies is reported as a death and never restarted by Ray (the scheduler
replaces it). A local instance gets this checkout and the driver's import
paths on its workers' ``PYTHONPATH``; a remote cluster gets the package
uploaded. The pool follows the interface the scheduler drives
(:class:`~.scheduler.Pool`).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from .errors import SweepError
from .records import local_info
from .worker import prepare_worker, run_job

__all__ = ["RayPool", "RayWorker"]


class RayWorker:
    """The Ray actor behind one worker slot (decorated with ``ray.remote`` at run time)."""

    def __init__(self, imports: Sequence[str]):
        try:
            prepare_worker(imports)
            self._setup_error = None
        except BaseException as err:
            self._setup_error = f"worker setup failed: {type(err).__name__}: {err}"

    def ready(self) -> tuple[str, Any]:
        if self._setup_error:
            return ("fatal", self._setup_error)
        return ("ready", local_info())

    def run(self, payload: Mapping[str, Any]) -> tuple[str, Any]:
        return ("done", run_job(payload))


class RayPool:
    """One Ray actor per worker slot, on a local Ray instance or a cluster at ``address``."""

    backend = "ray"

    def __init__(self, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise SweepError("the ray backend needs Ray: pip install 'partitioner[ray]'") from None
        self._ray = ray
        self._owns = False
        if not ray.is_initialized():
            import logging

            try:
                ray.init(
                    address=address,
                    runtime_env=_ray_runtime_env(address),
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                )
            except Exception as err:  # unreachable address, refused authentication, ...
                where = f"the Ray cluster at {address}" if address else "a local Ray instance"
                raise SweepError(f"cannot connect to {where}: {type(err).__name__}: {_first_line(err)}") from None
            self._owns = True
        self._actors: dict[int, Any] = {}
        self._refs: dict[Any, int] = {}

    def cores(self) -> int:
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def configure(self, imports: Sequence[str], threads: int) -> None:
        # each actor reserves the CPUs its jobs may use, so Ray does not oversubscribe a node
        self._cls: Any = self._ray.remote(num_cpus=threads, max_restarts=0, max_task_retries=0)(RayWorker)
        self._imports = tuple(imports)

    def start(self, slot: int) -> None:
        actor = self._cls.remote(self._imports)
        self._actors[slot] = actor
        self._refs[actor.ready.remote()] = slot

    def send(self, slot: int, payload: Mapping[str, Any]) -> None:
        self._refs[self._actors[slot].run.remote(dict(payload))] = slot

    def wait(self, timeout: float) -> list[tuple[int, str, Any]]:
        if not self._refs:
            time.sleep(timeout)
            return []
        done, _ = self._ray.wait(list(self._refs), num_returns=1, timeout=timeout)
        if done:
            more, _ = self._ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
            done = list(dict.fromkeys(done + more))
        events = []
        for ref in done:
            slot = self._refs.pop(ref)
            try:
                kind, data = self._ray.get(ref)
                events.append((slot, kind, data))
            except self._ray.exceptions.RayActorError as err:
                events.append((slot, "died", f"Ray worker died: {_first_line(err)}"))
            except self._ray.exceptions.RayError as err:
                events.append((slot, "died", f"Ray task failed: {_first_line(err)}"))
        return events

    def kill(self, slot: int) -> None:
        actor = self._actors.pop(slot)
        self._refs = {ref: s for ref, s in self._refs.items() if s != slot}
        self._ray.kill(actor, no_restart=True)

    def forget(self, slot: int) -> None:
        self.kill(slot)

    def close(self) -> None:
        for slot in list(self._actors):
            self.kill(slot)
        if self._owns:
            self._ray.shutdown()


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _ray_runtime_env(address: str | None) -> dict[str, Any]:
    """Make the driver's code importable by Ray workers.

    A local instance shares the file system: put this checkout and the
    driver's extra import paths on the workers' PYTHONPATH. A remote cluster
    gets this ``partitioner`` package uploaded (its dependencies must be
    installed there).
    """
    if address not in (None, "local"):
        import partitioner

        return {"py_modules": [partitioner]}
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    paths = [str(Path(__file__).resolve().parents[2])]  # the folder holding the partitioner package
    for entry in sys.path:
        real = os.path.realpath(entry or os.getcwd())
        if os.path.isdir(real) and not any(real == p or real.startswith(p + os.sep) for p in prefixes):
            paths.append(real)
    extra = os.environ.get("PYTHONPATH")
    if extra:
        paths.append(extra)
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}}
