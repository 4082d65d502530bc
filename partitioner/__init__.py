"""partitioner: optimal pipeline and mesh parallelism plans for heterogeneous multimodal training.

The Python API::

    from partitioner import load_problem, solve, evaluate
    problem = load_problem("examples/vla_toy_2x4.json")
    result = solve(problem, method="dp")
    print(result.value, result.plan)
    evaluate(problem, result.plan).stages

    from partitioner import Workload, plan_model
    plan = plan_model("qwen2-vl-7b", "dgx-h100", nodes=2, global_batch=128, workload=Workload(images=2))

docs/api.md shows both, run as a doctest.
"""
from __future__ import annotations

from .frameworks.recipe import Recipe
from .plan import Evaluation, Plan, PlanError, SolveResult, Stage, evaluate, load_plan
from .planning import ModelPlan, PlanOptions, plan_model, run_plan
from .planning.estimate import Estimate, estimate
from .presets import ClusterSpec, ModelSpec, Workload, load_cluster, load_model
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
    "ModelPlan",
    "ModelSpec",
    "ClusterSpec",
    "PlanOptions",
    "Workload",
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
    "load_model",
    "load_cluster",
    "methods",
    "plan_model",
    "run_plan",
    "simulate",
    "solve",
]
