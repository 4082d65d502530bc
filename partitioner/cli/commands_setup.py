"""``warmup``: compile dp's kernels once, ahead of the first solve; and the notice of a compile that a
command must wait for.

``partitioner warmup`` (and ``python -m partitioner warmup``) compiles every
kernel signature of :mod:`partitioner.solvers.dp.compiled.engine` into numba's disk
cache with a progress bar on stderr, or says the cache is warm already; the
README's install command runs it after ``pip install``. Every command also
installs a reporter: when a solve must compile the kernels itself (a cold
cache and work too large for the Python path, see the engine's rule), a line
on stderr says so before the wait and another after it -- never on stdout,
so ``--json`` output stays pure.
"""
from __future__ import annotations

import time

import typer

from ..solvers.dp.compiled import engine
from .common import EXIT_OK, app, err, guarded, say

__all__ = ["warmup_cmd", "report_compile"]


class _CompileNotice:
    """The engine's reporter during a user's command: one line when a compile starts, one per kernel
    on a terminal, one when it is over (stderr)."""

    def __init__(self) -> None:
        self.start = 0.0

    def __call__(self, done: int, total: int, kernel: str) -> None:
        if done == 0:
            self.start = time.perf_counter()
            say(f"compiling the dp kernels once (first run; `partitioner warmup` does it ahead): {total} kernels ...")
        if done < total:
            if err.is_terminal:
                say(f"  [{done + 1}/{total}] {kernel}")
            return
        say(f"compiled the dp kernels in {time.perf_counter() - self.start:.1f} s; later runs load them from the cache")


report_compile = _CompileNotice()


@app.callback()
def _setup() -> None:
    """Optimal pipeline and mesh parallelism plans for heterogeneous multimodal training."""
    engine.set_reporter(report_compile)


@app.command("warmup")
@guarded
def warmup_cmd() -> None:
    """Compile dp's kernels once (every signature, with progress), so no solve waits for it."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=err, transient=not err.is_terminal) as bar:
        task = bar.add_task("loading the dp kernels", total=None)

        def report(done: int, total: int, kernel: str) -> None:
            label = f"compiling {kernel}" if kernel else "compiled"
            bar.update(task, description=label, completed=done, total=total)

        compiled, seconds = engine.warmup(report)
    if compiled:
        say(f"compiled the dp kernels in {seconds:.1f} s (cached for every later run)")
    else:
        say(f"the dp kernels are compiled already (loaded from the cache in {seconds:.1f} s)")
    raise typer.Exit(EXIT_OK)
