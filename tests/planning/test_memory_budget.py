"""``plan --memory-budget GB`` / ``plan_model(memory_budget_gb=...)``: the budget reaches every dp solve of the run,
and anything but a positive finite number is bad input (exit 2, the field named)."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from partitioner import plan_model, solve
from partitioner.planning.options import PlanOptions, solver_options
from partitioner.problem import ProblemError

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("budget", [0, -1, math.nan, math.inf, True, "3"])
def test_a_budget_that_is_not_a_positive_finite_number_is_refused_before_any_work(budget):
    with pytest.raises(ProblemError, match="memory_budget_gb"):
        plan_model("pi0", "dgx-h100", nodes=2, global_batch=1024, memory_budget_gb=budget)


def test_the_cli_refuses_a_negative_budget_with_exit_2():
    proc = subprocess.run([sys.executable, "-m", "partitioner", "plan", "--model", "pi0", "--cluster", "dgx-h100",
                           "--nodes", "2", "--global-batch", "1024", "--memory-budget", "-1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2 and "--memory-budget" in proc.stderr and "Traceback" not in proc.stderr


def test_the_budget_goes_to_the_methods_that_have_it_only():
    assert solver_options(PlanOptions(nodes=1, global_batch=8, memory_budget_gb=8.0)) == {"memory_budget_gb": 8.0}
    assert solver_options(PlanOptions(nodes=1, global_batch=8, method="greedy", memory_budget_gb=8.0)) is None
    assert solver_options(PlanOptions(nodes=1, global_batch=8)) is None


def test_a_budget_too_small_for_the_tables_reaches_the_exact_solve_which_says_so():
    r = plan_model("pi0", "dgx-h100", nodes=2, global_batch=1024, memory_budget_gb=1e-6, time_limit=60)
    assert r.status == "feasible" and r.plan is not None
    assert "memory_budget_gb" in r.message


@pytest.mark.parametrize("budget", [0, -2.5, math.nan, math.inf, "lots"])
def test_dp_refuses_a_budget_option_that_is_not_a_positive_finite_number(budget):
    # the solver contract: a bad option is bad input (ProblemError naming it), before the method runs
    with pytest.raises(ProblemError, match="options.memory_budget_gb"):
        solve(str(ROOT / "examples" / "vla_toy_2x4.json"), "dp", options={"memory_budget_gb": budget})
