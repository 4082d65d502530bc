"""The commands on one problem file: ``solve``, ``validate``, ``evaluate`` and ``simulate``.

Each parses its options, loads the problem (and plan), calls the library and
picks the exit code: 0 with a plan (or a valid problem), 1 when there is no
plan or the given plan breaks a validity rule, 2 for bad input (through
:func:`~partitioner.cli.common.guarded`). Output goes through :mod:`.render`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from ..plan import PlanError, evaluate, load_plan
from ..problem import OBJECTIVES, load_problem
from ..solvers import DEFAULT_METHOD, methods, solve
from ..solvers.base import method_options_from_text
from .common import EXIT_BAD_INPUT, EXIT_NO_PLAN, EXIT_OK, app, check_choice, err, guarded, option_pairs, out, working
from .render import print_evaluation, print_json, print_result, print_simulation, print_validation

__all__ = ["solve_cmd", "validate_cmd", "evaluate_cmd", "simulate_cmd"]


@app.command("solve")
@guarded
def solve_cmd(
    problem_path: Path = typer.Argument(..., metavar="PROBLEM", help="Problem file (JSON or YAML, format v1 or v2)."),
    method: str = typer.Option(
        DEFAULT_METHOD, "--method", "-m", help="dp (exact, the default) | cpsat | milp | brute | greedy | uniform | balanced"
    ),
    objective: Optional[str] = typer.Option(None, "--objective", help="bottleneck | iteration (default: the problem's)"),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Seconds for the search."),
    seed: int = typer.Option(0, "--seed", help="Random seed (CP-SAT)."),
    option: Optional[List[str]] = typer.Option(
        None, "--option", "-o", help="Method option key=value (repeatable; docs/methods.md lists each method's)."
    ),
    validate: bool = typer.Option(True, "--validate/--no-validate", help="Replay the plan in the 1F1B simulator."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (result format v1, or v2 for a v2 problem)."),
) -> None:
    """Find the best plan for PROBLEM."""
    check_choice(method, methods(), "--method")
    check_choice(objective, OBJECTIVES, "--objective")
    options = method_options_from_text(method, option_pairs(option))
    problem = load_problem(problem_path)
    with working(f"solving {problem.name} with {method}"):
        result = solve(problem, method, objective=objective, time_limit=time_limit, seed=seed, options=options, validate=validate)
    if as_json:
        print_json(result.to_dict())
        if result.plan is None and result.message:
            err.print(result.message, markup=False)
    else:
        print_result(problem, result)
    raise typer.Exit(EXIT_OK if result.plan is not None else EXIT_NO_PLAN)


@app.command("validate")
@guarded
def validate_cmd(
    problem_path: Path = typer.Argument(..., metavar="PROBLEM"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Check that PROBLEM follows format v1 or v2 (exit 0) or say which field is wrong (exit 2)."""
    problem = load_problem(problem_path)
    summary: dict[str, Any] = {
        "valid": True,
        "version": problem.version,
        "name": problem.name,
        "layers": problem.num_layers,
        "devices": problem.num_devices,
        "nodes": problem.cluster.nodes,
        "gpus_per_node": problem.cluster.gpus_per_node,
        "layouts": [lay.key for lay in problem.layouts()],
        "stages": {"min": problem.stages.min, "max": problem.stages.max},
        "microbatches": problem.microbatches,
        "objective": problem.objective,
    }
    if as_json:
        print_json(summary)
    else:
        print_validation(problem_path, problem, summary["layouts"])


@app.command("evaluate")
@guarded
def evaluate_cmd(
    problem_path: Path = typer.Argument(..., metavar="PROBLEM"),
    plan_path: Path = typer.Argument(..., metavar="RESULT", help="A result or plan file."),
    objective: Optional[str] = typer.Option(None, "--objective"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Check a plan against the validity rules and report its times (exit 1 if it breaks a rule)."""
    check_choice(objective, OBJECTIVES, "--objective")
    problem = load_problem(problem_path)
    plan = load_plan(str(plan_path))
    try:
        ev = evaluate(problem, plan, objective)
    except PlanError as e:
        if as_json:
            print_json({"valid": False, "rule": e.rule, "stage": e.stage, "message": str(e)})
        err.print(f"{plan_path}: invalid plan: {e}", markup=False)
        raise typer.Exit(EXIT_NO_PLAN)
    if as_json:
        print_json(
            {
                "valid": True,
                "objective": ev.objective,
                "value": ev.value,
                "bottleneck_ms": ev.bottleneck_ms,
                "iteration_ms": ev.iteration_ms,
                "transfers_ms": list(ev.transfers_ms),
                "plan": plan.to_dict(ev),
            }
        )
    else:
        print_evaluation(problem, ev, plan_path)


@app.command("simulate")
@guarded
def simulate_cmd(
    problem_path: Path = typer.Argument(..., metavar="PROBLEM", help="Problem file (JSON or YAML, format v1 or v2)."),
    plan_path: Path = typer.Argument(..., metavar="RESULT_OR_PLAN", help="A result or plan file."),
    schedule: Optional[str] = typer.Option(
        None, "--schedule", "-s", help="1f1b | zb-h1 | interleaved | gpipe | forward (default: the problem's training.schedule)"
    ),
    as_json: bool = typer.Option(False, "--json", help="Print makespan, bubble, peak in-flight and memory as JSON."),
    gantt_path: Optional[Path] = typer.Option(None, "--gantt", help="Write a Gantt chart (.png, .svg or .pdf)."),
    trace_path: Optional[Path] = typer.Option(None, "--trace", help="Write a Chrome-trace JSON (opens in Perfetto)."),
) -> None:
    """Replay a plan for one iteration (exit 1 if it breaks a validity rule)."""
    from ..simulate.engine import SCHEDULES, simulate

    if schedule is not None:
        check_choice(schedule, SCHEDULES, "--schedule")
    if gantt_path is not None:
        from ..simulate.viz import IMAGE_FORMATS

        check_choice(gantt_path.suffix.lower().lstrip("."), IMAGE_FORMATS, f"--gantt {gantt_path}: suffix")
    problem = load_problem(problem_path)
    plan = load_plan(str(plan_path))
    try:
        ev = evaluate(problem, plan)
    except PlanError as e:
        err.print(f"{plan_path}: invalid plan: {e}", markup=False)
        raise typer.Exit(EXIT_NO_PLAN)
    schedule = schedule or problem.training.schedule
    try:
        sim = simulate(problem, plan, schedule, evaluation=ev)
    except ValueError as e:  # a schedule this plan cannot run (interleaved chunks vs plain stages)
        err.print(f"error: --schedule {schedule}: {e}", markup=False)
        raise typer.Exit(EXIT_BAD_INPUT)
    written = []
    title = f"{problem.name}: {plan_path.name}"
    try:
        if gantt_path is not None:
            from ..simulate.viz import save_gantt

            written.append(("Gantt chart", save_gantt(sim, gantt_path, title)))
        if trace_path is not None:
            from ..simulate.viz import write_trace

            written.append(("Chrome trace", write_trace(sim, trace_path, title)))
    except OSError as e:  # an unwritable output path is the user's input
        err.print(f"error: cannot write {e.filename or ''}: {e.strerror or e}", markup=False)
        raise typer.Exit(EXIT_BAD_INPUT)
    if as_json:
        print_json(sim.to_dict())
    else:
        print_simulation(problem, sim, ev, schedule)
    for what, path in written:
        (err if as_json else out).print(f"wrote {what} {path}", markup=False)
