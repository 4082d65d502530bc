"""What every test that gets a plan from a solver checks: evaluation and a 1F1B replay."""
from __future__ import annotations

import pytest

from partitioner import evaluate, simulate
from partitioner.plan import SolveResult
from partitioner.problem import Problem


def check_plan(problem: Problem, result: SolveResult) -> None:
    """The plan is valid, its value is what ``evaluate`` says, and the simulator replays it within memory.

    The replay checks DESIGN's simulator facts: stage p holds min(m, P - p)
    microbatches at its peak, every peak fits in the GPU, and the makespan
    lies between m times the slowest stage and m times the sum of stages.
    """
    assert result.plan is not None, result.message
    ev = evaluate(problem, result.plan, result.objective)
    assert ev.value == pytest.approx(result.value, rel=1e-12)
    sim = simulate(problem, result.plan, "1f1b")
    m, P = problem.microbatches, result.plan.num_stages
    assert list(sim.peak_inflight) == [min(m, P - p) for p in range(P)]
    assert all(peak <= problem.cluster.gpu_memory_bytes for peak in sim.peak_memory_bytes)
    times = ev.times_ms
    assert m * max(times) * (1 - 1e-9) <= sim.makespan_ms <= m * sum(times) * (1 + 1e-9)
