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

More (the detail of this module): ``docs/internals/batch.md``, section ``partitioner.batch``.
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
