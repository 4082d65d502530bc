"""Jobs and their keys: one (problem, method) pair with the settings it is solved with.

A job's key is its stable identity across runs: the first 32 hex digits of the
SHA-256 of the canonical JSON (sorted keys, no spaces, ASCII) of
``{problem, method, objective, time_limit, seed, options}``, where ``problem``
is :func:`problem_hash` -- the SHA-256 of the canonical JSON of
``Problem.to_dict()``, so a problem file renamed or moved keeps its jobs'
keys. ``options`` are the method options the sweep gives; options added at
run time (the thread count, :mod:`.scheduler`) are not part of the key. The
results file (:mod:`.store`) is resumed by these keys.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..problem import Problem

__all__ = ["Job", "canonical_json", "problem_hash", "job_key", "method_label", "make_jobs"]


def canonical_json(doc: Any) -> bytes:
    """The bytes every hash here is taken of: JSON with sorted keys, no spaces, ASCII only."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def problem_hash(problem: Problem | Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON (sorted keys) of ``Problem.to_dict()``."""
    doc = problem.to_dict() if isinstance(problem, Problem) else problem
    return hashlib.sha256(canonical_json(doc)).hexdigest()


def job_key(
    problem_digest: str,
    method: str,
    objective: str,
    time_limit: float | None,
    seed: int,
    options: Mapping[str, Any] | None = None,
) -> str:
    """The stable identity of a job: what was solved, how, and with which settings."""
    doc = {
        "problem": problem_digest,
        "method": method,
        "objective": objective,
        "time_limit": time_limit,
        "seed": seed,
        "options": dict(options or {}),
    }
    return hashlib.sha256(canonical_json(doc)).hexdigest()[:32]


def method_label(method: str, options: Mapping[str, Any]) -> str:
    """``method`` with its options in sorted order, e.g. ``brute(max_combinations=1000)``."""
    if not options:
        return method
    return method + "(" + ",".join(f"{k}={json.dumps(options[k], sort_keys=True)}" for k in sorted(options)) + ")"


@dataclass(frozen=True)
class Job:
    """One (problem, method) pair to solve, with everything a worker needs."""

    key: str
    problem: str  # the file path as the sweep wrote it, or the grid point's name
    problem_hash: str
    method: str
    objective: str
    time_limit: float | None
    seed: int
    options: Mapping[str, Any]
    document: Mapping[str, Any] = field(repr=False, compare=False)  # Problem.to_dict()
    grid: Mapping[str, Any] | None = None  # the preset grid point it was built from, if any

    @property
    def label(self) -> str:
        """The method with its sweep options, e.g. ``brute(max_combinations=1000)``."""
        return method_label(self.method, self.options)


def make_jobs(
    problem: Problem,
    name: str,
    methods: Sequence[str],
    *,
    objective: str | None = None,
    time_limit: float | None = None,
    seed: int = 0,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    grid: Mapping[str, Any] | None = None,
) -> list[Job]:
    """The jobs for one problem, one per method (the problem's own objective by default)."""
    document = problem.to_dict()
    digest = problem_hash(document)
    objective = objective or problem.objective
    jobs = []
    for method in methods:
        opts = dict((options or {}).get(method, {}))
        key = job_key(digest, method, objective, time_limit, seed, opts)
        jobs.append(Job(key, name, digest, method, objective, time_limit, seed, opts, document, grid))
    return jobs
