"""partitioner: optimal pipeline and mesh parallelism plans for heterogeneous multimodal training.

The Python API::

    from partitioner import load_problem, solve, evaluate
    problem = load_problem("examples/vla_toy_2x4.json")
    result = solve(problem, method="dp")
    print(result.value, result.plan)
    evaluate(problem, result.plan).stages
"""
from __future__ import annotations

from .frameworks.recipe import Recipe
from .plan import Evaluation, Plan, PlanError, SolveResult, Stage, evaluate, load_plan
from .planning import plan_model
from .planning.estimate import Estimate, estimate
from .problem import Cluster, Layer, LayerCost, Layout, Problem, ProblemError, StageBounds, Training, dump_problem, load_problem
from .simulate.engine import simulate
from .solvers import SolverError, methods, solve

__version__ = "0.1.0"

__all__ = [
    "Cluster",
    "Estimate",
    "Evaluation",
    "Layer",
    "LayerCost",
    "Layout",
    "Plan",
    "PlanError",
    "Problem",
    "ProblemError",
    "Recipe",
    "SolveResult",
    "SolverError",
    "Stage",
    "StageBounds",
    "Training",
    "dump_problem",
    "estimate",
    "evaluate",
    "load_plan",
    "load_problem",
    "methods",
    "plan_model",
    "simulate",
    "solve",
]
