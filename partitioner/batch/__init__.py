"""Batch solve: sweeps over many problems x methods, resumable, on one machine or a Ray cluster.

A *sweep* file names problem files and/or a grid over the cost model's
presets, and the methods to run on each (:mod:`.sweep`). Every
(problem, method) pair is a :class:`Job` with a stable key: a hash of the
problem's content, the method and the settings (:mod:`.jobs`). Each finished
job is appended to a JSON-lines results file as one record (:mod:`.records`),
flushed and fsynced, by the parent process only (:mod:`.store`). Running the
same sweep again resumes: keys already in the file are skipped, and a
half-written last line (the previous run was killed while writing it) is cut
away first.

Jobs run in worker processes that can be killed one by one (``local``
backend, :mod:`.local_pool`: a pool of spawned processes; ``ray`` backend,
:mod:`.ray_pool`: one Ray actor per worker; the code a worker runs is
:mod:`.worker`). A job that raises is recorded as ``error`` with the message;
a worker that dies is recorded as ``error`` and replaced; a job still running
``time_limit + grace`` seconds after it started is killed, recorded as
``timeout``, and its worker replaced (:mod:`.scheduler`, which also gives
each job its share of the cores as solver threads). The sweep always goes on.
:func:`run_sweep` / :func:`run_jobs` tie it together (:mod:`.runner`).

Modules, bottom-up: ``errors`` -> ``jobs`` -> ``records`` -> ``sweep``,
``store``, ``worker`` -> ``local_pool``, ``ray_pool``, ``scheduler`` ->
``runner``; each names its contract in its docstring.
"""
from __future__ import annotations

from .errors import SweepError
from .jobs import Job, job_key, make_jobs, problem_hash
from .local_pool import available_cores
from .records import FAILED
from .runner import BACKENDS, SweepSummary, run_jobs, run_sweep
from .scheduler import THREAD_OPTIONS
from .store import ResultsFile, latest_records, read_results
from .sweep import GRID_KEYS, Expansion, GridPoint, Sweep, expand, load_sweep
from .worker import run_job

__all__ = [
    "BACKENDS",
    "FAILED",
    "GRID_KEYS",
    "THREAD_OPTIONS",
    "SweepError",
    "GridPoint",
    "Sweep",
    "Job",
    "Expansion",
    "SweepSummary",
    "ResultsFile",
    "load_sweep",
    "expand",
    "make_jobs",
    "problem_hash",
    "job_key",
    "read_results",
    "latest_records",
    "run_job",
    "run_jobs",
    "run_sweep",
    "available_cores",
]
