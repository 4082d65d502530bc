"""partitioner: optimal pipeline and mesh parallelism plans for heterogeneous multimodal training.

The Python API::

    from partitioner import load_problem, solve, evaluate
    problem = load_problem("examples/vla_toy_2x4.json")
    result = solve(problem, method="dp")
    print(result.value, result.plan)
    evaluate(problem, result.plan).stages

    from partitioner import Workload, plan_model
    plan = plan_model("qwen2-vl-7b", "dgx-h100", nodes=2, global_batch=128, workload=Workload(images=2))

More (the detail of this module): ``docs/internals/partitioner.md``, section ``partitioner``.
"""
from __future__ import annotations

import importlib
import sys
import types

# Not typing.TYPE_CHECKING: importing typing is itself work an interrupt can land in (type checkers take this one too).
TYPE_CHECKING = False
if TYPE_CHECKING:  # what the names are, for type checkers; at run time __getattr__ loads them
    from typing import Any

    from .frameworks.recipe import Recipe
    from .plan import Evaluation, Plan, PlanError, SolveResult, Stage, evaluate, load_plan
    from .planning import ModelPlan, PlanOptions, plan_model, run_plan
    from .planning.recipes.estimate import Estimate, estimate
    from .presets import ClusterSpec, ModelSpec, Workload, load_cluster, load_model
    from .problem import (
        Cluster,
        Layer,
        LayerCost,
        Layout,
        Problem,
        ProblemError,
        StageBounds,
        Training,
        dump_problem,
        load_problem,
    )
    from .simulate.engine import simulate
    from .solvers import SolverError, methods, solve

__version__ = "0.1.0"

# every public name, with the module that defines it
_HOMES = {
    **dict.fromkeys(("Evaluation", "Plan", "PlanError", "SolveResult", "Stage", "evaluate", "load_plan"), ".plan"),
    "Recipe": ".frameworks.recipe",
    **dict.fromkeys(("ModelPlan", "PlanOptions", "plan_model", "run_plan"), ".planning"),
    **dict.fromkeys(("Estimate", "estimate"), ".planning.recipes.estimate"),
    **dict.fromkeys(("ClusterSpec", "ModelSpec", "Workload", "load_cluster", "load_model"), ".presets"),
    **dict.fromkeys(("Cluster", "Layer", "LayerCost", "Layout", "Problem", "ProblemError", "StageBounds", "Training",
                     "dump_problem", "load_problem"), ".problem"),
    "simulate": ".simulate.engine",
    **dict.fromkeys(("SolverError", "methods", "solve"), ".solvers"),
}

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


class _Package(types.ModuleType):
    """This package, whose public names stay theirs when a subpackage of the same name loads.

    The import system sets every loaded subpackage as an attribute of its parent; ``simulate`` is both a
    subpackage and the function exported here, and the name means the function (as it did when this module
    imported it eagerly). The subpackage stays ``sys.modules["partitioner.simulate"]``.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name in _HOMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    """Load public name ``name`` from its module on first use (then it is an ordinary attribute)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
