"""The commands on sweeps: ``batch`` runs one (:mod:`partitioner.batch`), ``compare`` reads its results.

``batch`` exits 0 once every job has a record (whatever the jobs' statuses), 2
for a bad sweep file; ``compare`` exits 0 with a comparison, 2 for a missing or
unreadable results file or an unwritable output. Output through :mod:`.render`.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from ..problem import ProblemError
from ..solvers import SolverError
from .common import app, check_choice, guarded, stdout_to_stderr
from .render import SweepProgress, print_batch_summary, print_comparison, print_json

__all__ = ["batch_cmd", "compare_cmd"]


@app.command("batch")
@guarded
def batch_cmd(
    sweep_path: Path = typer.Argument(..., metavar="SWEEP", help="Sweep file (YAML or JSON): problems/grid, methods, ..."),
    out_path: Path = typer.Option(..., "--out", help="Results file (JSON lines); an existing one is resumed."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", help="Concurrent jobs (default: the cores)."),
    backend: str = typer.Option("local", "--backend", help="local | ray"),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: a local Ray instance)."),
    grace: Optional[float] = typer.Option(
        None, "--grace", help="Seconds a job may overrun its time limit before it is killed (default 5 + 10 %)."
    ),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run again the jobs recorded as error or timeout."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr."),
    as_json: bool = typer.Option(False, "--json", help="Print the run summary as JSON."),
) -> None:
    """Solve every problem of SWEEP with every method, appending one JSON line per job to --out."""
    from ..batch import BACKENDS, load_sweep, run_sweep

    check_choice(backend, BACKENDS, "--backend")
    sweep = load_sweep(sweep_path)
    bar = SweepProgress(enabled=progress)
    # with --json, stdout holds only the summary: whatever the backend (a dying Ray worker) prints goes to stderr
    with stdout_to_stderr() if as_json else contextlib.nullcontext(), bar:
        summary = run_sweep(
            sweep,
            out_path,
            workers=workers,
            backend=backend,
            address=address,
            grace=grace,
            retry_failed=retry_failed,
            on_start=bar.start,
            on_record=bar.advance,
        )
    if as_json:
        print_json({name: getattr(summary, name) for name in summary.__dataclass_fields__})
        return
    print_batch_summary(summary)


@app.command("compare")
@guarded
def compare_cmd(
    results_path: Path = typer.Argument(..., metavar="RESULTS", help="A batch results file (JSON lines)."),
    as_json: bool = typer.Option(False, "--json", help="Print {methods: {...}, problems: [...]} as JSON."),
    markdown: Optional[Path] = typer.Option(None, "--markdown", help="Write the tables as Markdown to FILE."),
    profile: Optional[Path] = typer.Option(None, "--profile", help="Draw the performance profile to FILE.png."),
    tol: float = typer.Option(1e-9, "--tol", help="Relative tolerance under which two values are equal."),
    per_problem: bool = typer.Option(True, "--per-problem/--no-per-problem", help="Print the per-problem table."),
) -> None:
    """Compare the methods of a batch: solved, optimal, gaps, times, wins, performance profile."""
    import os

    from ..batch.compare import compare_file, plot_profile, to_markdown

    if not tol >= 0:
        raise SolverError(f"--tol must be >= 0, got {tol}")
    comparison = compare_file(results_path, tol=tol)
    if profile is not None:
        try:
            profile.parent.mkdir(parents=True, exist_ok=True)
            plot_profile(comparison, profile)
        except OSError as e:
            raise ProblemError(f"cannot write the profile: {e.strerror or e}", source=str(profile)) from None
    if markdown is not None:
        image = os.path.relpath(profile, markdown.parent) if profile is not None else None
        try:
            markdown.parent.mkdir(parents=True, exist_ok=True)
            markdown.write_text(to_markdown(comparison, profile_image=image), encoding="utf-8")
        except OSError as e:
            raise ProblemError(f"cannot write: {e.strerror or e}", source=str(markdown)) from None
    if as_json:
        print_json(comparison.to_dict())
        return
    print_comparison(comparison, results_path, per_problem)
