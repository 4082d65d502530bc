"""The ``partitioner`` command line.

Exit codes (DESIGN.md): 0 -- a plan; 1 -- no plan (infeasible, or the method
found none); 2 -- bad input (the message on stderr names the file and field).
Nothing here is imported by the library.
"""
from __future__ import annotations

import contextlib
import functools
import json
import sys
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer
from rich.console import Console
from rich.table import Table

from .plan import Evaluation, PlanError, SolveResult, evaluate, load_plan
from .problem import OBJECTIVES, Problem, ProblemError, load_problem
from .solvers import SolverError, methods, solve

app = typer.Typer(
    name="partitioner",
    help="Optimal pipeline and mesh parallelism plans for heterogeneous multimodal training.",
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)
# Wide enough for the stage table when piped (rich defaults to 80 columns off a terminal).
out = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 150)

EXIT_OK, EXIT_NO_PLAN, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


def guarded(fn: Callable) -> Callable:
    """Turn the library's input errors into exit code 2 with one line on stderr."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except (ProblemError, SolverError) as e:
            err.print(f"error: {e}", markup=False)
            raise typer.Exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130)

    return wrapper


def parse_options(pairs: Optional[List[str]]) -> dict[str, Any]:
    """``--option key=value`` pairs; values are parsed as JSON when they can be."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SolverError(f"--option expects key=value, got {pair!r}")
        key, raw = pair.split("=", 1)
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def check_choice(value: Optional[str], choices: tuple[str, ...], flag: str) -> None:
    if value is not None and value not in choices:
        raise SolverError(f"{flag}: must be one of {', '.join(choices)}, got {value!r}")


@contextlib.contextmanager
def working(what: str):
    """A spinner on stderr while a long call runs (only on a terminal)."""
    if err.is_terminal:
        with err.status(what + " ..."):
            yield
    else:
        yield


def print_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


# --------------------------------------------------------------------------- tables


def stage_table(problem: Problem, ev: Evaluation, title: str = "") -> Table:
    """The stage table: layers, GPUs, nodes, layout, F/B/t, memory; the bottleneck marked."""
    table = Table(title=title or None, title_justify="left", caption="* bottleneck stage", caption_justify="left")
    for col, justify in (
        ("", "left"),
        ("stage", "right"),
        ("layers", "left"),
        ("GPUs", "right"),
        ("node(s)", "left"),
        ("dp x tp", "left"),
        ("F ms", "right"),
        ("B ms", "right"),
        ("t ms", "right"),
        ("memory GiB", "right"),
    ):
        table.add_column(col, justify=justify)
    worst = ev.bottleneck_stage
    cap = problem.cluster.gpu_memory_bytes
    for s in ev.stages:
        first, last = problem.layers[s.first_layer], problem.layers[s.last_layer]
        names = first.name if s.first_layer == s.last_layer else f"{first.name} .. {last.name}"
        layers = f"{s.first_layer}-{s.last_layer} ({names})" if s.first_layer != s.last_layer else f"{s.first_layer} ({names})"
        nodes = ",".join(map(str, s.nodes))
        mark = "*" if s.index == worst else ""
        table.add_row(
            mark,
            str(s.index),
            layers,
            str(s.devices),
            nodes,
            f"{s.layout.dp} x {s.layout.tp}",
            f"{s.fwd_ms:.3f}",
            f"{s.bwd_ms:.3f}",
            f"[bold]{s.time_ms:.3f}[/bold]" if mark else f"{s.time_ms:.3f}",
            f"{s.memory_bytes / 2**30:.2f} / {cap / 2**30:.0f}",
        )
    return table


def print_result(problem: Problem, result: SolveResult) -> None:
    head = f"{problem.name}: {result.method} -> {result.status}"
    if result.value is not None:
        head += f", {result.objective} = {result.value:.6g} ms"
        if result.bound is not None and result.status != "optimal":
            head += f" (bound {result.bound:.6g}, gap {100 * (result.gap or 0):.2f} %)"
    head += f"  [{result.solve_seconds:.2f} s]"
    out.print(head, markup=False)
    if result.evaluation is not None:
        ev = result.evaluation
        out.print(stage_table(problem, ev))
        out.print(
            f"bottleneck {ev.bottleneck_ms:.3f} ms, 1F1B iteration estimate {ev.iteration_ms:.3f} ms "
            f"(m = {problem.microbatches})",
            markup=False,
        )
        sim = result.extra.get("simulation")
        if sim:
            out.print(
                f"simulated 1F1B makespan {sim['makespan_ms']:.3f} ms, bubble {100 * sim['bubble_ratio']:.1f} %, "
                f"memory {'fits' if sim['fits_memory'] else 'DOES NOT FIT'}",
                markup=False,
            )
    if result.message:
        (err if result.plan is None else out).print(result.message, markup=False)


# --------------------------------------------------------------------------- commands


@app.command("solve")
@guarded
def solve_cmd(
    problem_path: Path = typer.Argument(..., metavar="PROBLEM", help="Problem file (JSON or YAML, format v1)."),
    method: str = typer.Option(
        "dp", "--method", "-m", help="dp (exact, the default) | cpsat | milp | brute | greedy | uniform | balanced"
    ),
    objective: Optional[str] = typer.Option(None, "--objective", help="bottleneck | iteration (default: the problem's)"),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Seconds for the search."),
    seed: int = typer.Option(0, "--seed", help="Random seed (CP-SAT)."),
    option: Optional[List[str]] = typer.Option(None, "--option", "-o", help="Method option key=value (repeatable)."),
    validate: bool = typer.Option(True, "--validate/--no-validate", help="Replay the plan in the 1F1B simulator."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (result format v1)."),
) -> None:
    """Find the best plan for PROBLEM."""
    check_choice(method, methods(), "--method")
    check_choice(objective, OBJECTIVES, "--objective")
    problem = load_problem(problem_path)
    with working(f"solving {problem.name} with {method}"):
        result = solve(
            problem, method, objective=objective, time_limit=time_limit, seed=seed, options=parse_options(option), validate=validate
        )
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
    """Check that PROBLEM follows format v1 (exit 0) or say which field is wrong (exit 2)."""
    problem = load_problem(problem_path)
    summary = {
        "valid": True,
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
        out.print(
            f"{problem_path}: valid v1 problem '{problem.name}': {problem.num_layers} layers, "
            f"{problem.cluster.nodes} x {problem.cluster.gpus_per_node} GPUs, layouts "
            f"{', '.join(summary['layouts'])}, {problem.stages.min}..{problem.stages.max} stages, "
            f"m = {problem.microbatches}, objective {problem.objective}",
            markup=False,
        )


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
        out.print(stage_table(problem, ev, title=f"{problem.name}: {plan_path}"))
        out.print(
            f"{ev.objective} = {ev.value:.6g} ms (bottleneck {ev.bottleneck_ms:.3f} ms, "
            f"iteration {ev.iteration_ms:.3f} ms)",
            markup=False,
        )


# --------------------------------------------------------------------------- simulate


def simulation_table(problem: Problem, sim: Any, ev: Evaluation) -> Table:
    """Per stage: F, B, busy and idle time, peak in-flight microbatches and peak memory."""
    table = Table(title_justify="left")
    for col, justify in (
        ("stage", "right"),
        ("layers", "left"),
        ("GPUs", "right"),
        ("dp x tp", "left"),
        ("F ms", "right"),
        ("B ms", "right"),
        ("busy ms", "right"),
        ("idle ms", "right"),
        ("in-flight", "right"),
        ("peak memory GiB", "right"),
    ):
        table.add_column(col, justify=justify)
    cap = problem.cluster.gpu_memory_bytes
    peak = sim.peak_memory_bytes
    for s, busy, idle, inflight, mem in zip(ev.stages, sim.busy_ms, sim.idle_ms, sim.peak_inflight, peak):
        layers = f"{s.first_layer}" if s.first_layer == s.last_layer else f"{s.first_layer}-{s.last_layer}"
        table.add_row(
            str(s.index),
            layers,
            str(s.devices),
            f"{s.layout.dp} x {s.layout.tp}",
            f"{s.fwd_ms:.3f}",
            f"{s.bwd_ms:.3f}" if sim.schedule != "forward" else "-",
            f"{busy:.3f}",
            f"{idle:.3f}",
            str(inflight),
            f"{mem / 2**30:.2f} / {cap / 2**30:.0f}",
        )
    return table


@app.command("simulate")
@guarded
def simulate_cmd(
    problem_path: Path = typer.Argument(..., metavar="PROBLEM", help="Problem file (JSON or YAML, format v1)."),
    plan_path: Path = typer.Argument(..., metavar="RESULT_OR_PLAN", help="A result or plan file."),
    schedule: str = typer.Option("1f1b", "--schedule", "-s", help="1f1b | gpipe | forward"),
    as_json: bool = typer.Option(False, "--json", help="Print makespan, bubble, peak in-flight and memory as JSON."),
    gantt_path: Optional[Path] = typer.Option(None, "--gantt", help="Write a Gantt chart (.png, .svg or .pdf)."),
    trace_path: Optional[Path] = typer.Option(None, "--trace", help="Write a Chrome-trace JSON (opens in Perfetto)."),
) -> None:
    """Replay a plan for one iteration (exit 1 if it breaks a validity rule)."""
    from .simulate import SCHEDULES, simulate

    check_choice(schedule, SCHEDULES, "--schedule")
    if gantt_path is not None:
        from .viz import IMAGE_FORMATS

        check_choice(gantt_path.suffix.lower().lstrip("."), IMAGE_FORMATS, f"--gantt {gantt_path}: suffix")
    problem = load_problem(problem_path)
    plan = load_plan(str(plan_path))
    try:
        ev = evaluate(problem, plan)
    except PlanError as e:
        err.print(f"{plan_path}: invalid plan: {e}", markup=False)
        raise typer.Exit(EXIT_NO_PLAN)
    sim = simulate(problem, plan, schedule, evaluation=ev)
    written = []
    title = f"{problem.name}: {plan_path.name}"
    try:
        if gantt_path is not None:
            from .viz import save_gantt

            written.append(("Gantt chart", save_gantt(sim, gantt_path, title)))
        if trace_path is not None:
            from .viz import write_trace

            written.append(("Chrome trace", write_trace(sim, trace_path, title)))
    except OSError as e:  # an unwritable output path is the user's input
        err.print(f"error: cannot write {e.filename or ''}: {e.strerror or e}", markup=False)
        raise typer.Exit(EXIT_BAD_INPUT)
    if as_json:
        print_json(sim.to_dict())
    else:
        out.print(simulation_table(problem, sim, ev))
        out.print(
            f"{schedule}, m = {sim.microbatches}: makespan {sim.makespan_ms:.3f} ms, "
            f"bubble {100 * sim.bubble_ratio:.1f} % (1F1B iteration estimate {ev.iteration_ms:.3f} ms, "
            f"bottleneck {ev.bottleneck_ms:.3f} ms)",
            markup=False,
        )
    for what, path in written:
        (err if as_json else out).print(f"wrote {what} {path}", markup=False)


# --------------------------------------------------------------------------- presets, plan, export


@app.command("models")
@guarded
def models_cmd(as_json: bool = typer.Option(False, "--json", help="Print the presets as JSON.")) -> None:
    """List the model presets with their parameter counts."""
    from .presets import list_models, load_model

    specs = [load_model(name) for name in list_models()]
    if as_json:
        print_json([spec.summary() for spec in specs])
        return
    table = Table(title="model presets", title_justify="left")
    for col, justify in (("name", "left"), ("params", "right"), ("modules (layers, params)", "left"), ("LLM tokens", "right")):
        table.add_column(col, justify=justify)
    for spec in specs:
        mods = ", ".join(f"{m['name']} {m['kind']} ({m['layers']}, {m['params'] / 1e9:.3g} B)" for m in spec.summary()["modules"])
        table.add_row(spec.name, f"{spec.params / 1e9:.3g} B", mods, str(spec.llm_tokens))
    out.print(table)


@app.command("clusters")
@guarded
def clusters_cmd(as_json: bool = typer.Option(False, "--json", help="Print the presets as JSON.")) -> None:
    """List the cluster presets (one GPU node each)."""
    from .presets import list_clusters, load_cluster

    specs = [load_cluster(name) for name in list_clusters()]
    if as_json:
        print_json([spec.summary() for spec in specs])
        return
    table = Table(title="cluster presets (per node)", title_justify="left")
    for col in ("name", "GPU", "GPUs/node", "memory GiB", "bf16 TFLOPS", "NVLink GB/s", "network GB/s"):
        table.add_column(col, justify="left" if col in ("name", "GPU") else "right")
    for c in specs:
        table.add_row(c.name, c.gpu, str(c.gpus_per_node), f"{c.gpu_memory_bytes / 2**30:.1f}", f"{c.peak_tflops:g}",
                      f"{c.intra_node_GBps:g}", f"{c.inter_node_GBps:g}")
    out.print(table)


def _plan_summary(problem: Problem, result: SolveResult) -> None:
    doc = result.to_dict()
    tput, base = doc.get("throughput") or {}, doc.get("baseline") or {}
    out.print(
        f"{doc.get('model')} on {problem.cluster.nodes} x {problem.cluster.gpus_per_node} GPUs ({doc.get('cluster')}), "
        f"global batch {doc.get('global_batch')}, m = {problem.microbatches}: {result.method} -> {result.status}, "
        f"{result.objective} = {result.value:.6g} ms  [{result.solve_seconds:.2f} s]",
        markup=False,
    )
    out.print(stage_table(problem, result.evaluation))
    src = "1F1B simulator" if tput.get("iteration_source") == "simulator" else "1F1B estimate"
    out.print(
        f"iteration {tput['iteration_ms']:.1f} ms ({src}), {tput['tokens_per_s']:.4g} tokens/s, MFU {100 * tput['mfu']:.1f} %",
        markup=False,
    )
    if base.get("plan"):
        stages = base["plan"]["stages"]
        shape = f"{len(stages)} stage(s) of dp {stages[0]['dp']} x tp {stages[0]['tp']}"
        out.print(
            f"baseline {base['method']} ({shape}, m = {base['microbatches']}): iteration {base['iteration_ms']:.1f} ms, "
            f"MFU {100 * base['throughput']['mfu']:.1f} % -> speed-up {doc['speedup']:.3f}x",
            markup=False,
        )
    else:
        out.print("baseline megatron-uniform: no uniform plan fits in memory", markup=False)
    if result.message:
        out.print(result.message, markup=False)
    from .export import TARGETS, export_result

    for target in TARGETS:
        out.print(f"\n[bold]{target}[/bold]")
        sys.stdout.flush()
        sys.stdout.write(export_result(result, target, problem).text())  # unwrapped: meant to be pasted


@app.command("plan")
@guarded
def plan_cmd(
    model: str = typer.Option(..., "--model", help="Model preset name or YAML / config.json path (see `partitioner models`)."),
    cluster: str = typer.Option(..., "--cluster", help="Cluster preset name or YAML path (see `partitioner clusters`)."),
    nodes: int = typer.Option(..., "--nodes", help="Number of nodes."),
    global_batch: int = typer.Option(..., "--global-batch", help="Samples per iteration."),
    microbatches: str = typer.Option("auto", "--microbatches", help="Microbatches per iteration, or 'auto' (divisors of the batch)."),
    method: str = typer.Option("dp", "--method", "-m", help="Solver (dp, cpsat, milp, brute, greedy, ...)."),
    objective: str = typer.Option("iteration", "--objective", help="iteration | bottleneck"),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", help="Seconds per solve."),
    max_stages: Optional[int] = typer.Option(None, "--max-stages", help="Upper bound on the pipeline depth (faster solves)."),
    cost_option: Optional[List[str]] = typer.Option(None, "--cost-option", "-c", help="Cost-model option key=value (repeatable)."),
    profile: Optional[Path] = typer.Option(None, "--profile", help="Profiled per-layer times (CSV or JSON)."),
    save_problem: Optional[Path] = typer.Option(None, "--save-problem", help="Write the v1 problem of the plan here."),
    gantt: Optional[Path] = typer.Option(None, "--gantt", help="Write a Gantt chart of the plan (PNG/SVG)."),
    as_json: bool = typer.Option(False, "--json", help="Print result format v1 plus baseline and throughput."),
) -> None:
    """Plan a model preset on a cluster preset: stages, meshes, speed-up over Megatron's default, export settings."""
    from .planning import plan_model

    check_choice(method, methods(), "--method")
    check_choice(objective, OBJECTIVES, "--objective")
    if microbatches != "auto":
        try:
            mb: int | str = int(microbatches)
        except ValueError:
            raise SolverError(f"--microbatches: must be a positive integer or 'auto', got {microbatches!r}") from None
        if mb < 1:
            raise SolverError(f"--microbatches: must be a positive integer or 'auto', got {microbatches!r}")
    else:
        mb = "auto"
    if nodes < 1 or global_batch < 1 or (max_stages is not None and max_stages < 1):
        raise SolverError("--nodes, --global-batch and --max-stages must be positive integers")
    with working(f"planning {model} on {nodes} x {cluster} with {method}"):
        result = plan_model(
            model, cluster, nodes=nodes, global_batch=global_batch, microbatches=mb, method=method, objective=objective,
            time_limit=time_limit, options=parse_options(cost_option), profile=profile, max_stages=max_stages,
        )
    problem = result.problem
    if save_problem is not None and problem is not None:
        from .problem import dump_problem

        dump_problem(problem, save_problem)
    if gantt is not None and result.plan is not None:
        _write_gantt(problem, result, gantt)
    if as_json:
        print_json(result.to_dict())
        if result.plan is None and result.message:
            err.print(result.message, markup=False)
    elif result.plan is None:
        err.print(f"{model}: {result.status}: {result.message}", markup=False)
    else:
        _plan_summary(problem, result)
    raise typer.Exit(EXIT_OK if result.plan is not None else EXIT_NO_PLAN)


def _write_gantt(problem: Problem, result: SolveResult, path: Path) -> None:
    from .simulate import simulate
    from .viz import save_gantt

    sim = simulate(problem, result.plan, "1f1b", evaluation=result.evaluation)
    save_gantt(sim, path, title=f"{problem.name}: {result.method}")


@app.command("export")
@guarded
def export_cmd(
    result_path: Path = typer.Argument(..., metavar="RESULT", help="A result file (`partitioner plan --json` output)."),
    to: str = typer.Option(..., "--to", help="megatron | torchtitan | deepspeed"),
    problem_path: Optional[Path] = typer.Option(None, "--problem", help="The problem the result solves (for results of `solve`)."),
    as_json: bool = typer.Option(False, "--json", help="Print settings, snippet and notes as JSON."),
) -> None:
    """Turn a plan into Megatron, torchtitan or DeepSpeed settings; exit 1 when the framework cannot express it."""
    from .export import TARGETS, export_result
    from .problem import read_document

    check_choice(to, TARGETS, "--to")
    doc = read_document(result_path)
    if not isinstance(doc, dict):
        raise ProblemError("a result must be an object", source=str(result_path))
    problem = load_problem(problem_path) if problem_path is not None else None
    try:
        exported = export_result(doc, to, problem)
    except ProblemError as e:
        raise e if e.source else e.with_source(str(result_path))
    if as_json:
        print_json(exported.to_dict())
    else:
        sys.stdout.write(exported.text())
    if not exported.expressible:
        err.print(f"{result_path}: not expressible in {to}: " + "; ".join(exported.reasons), markup=False)
        raise typer.Exit(EXIT_NO_PLAN)


# --------------------------------------------------------------------------- batch


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
    from .batch import BACKENDS, load_sweep, run_sweep

    check_choice(backend, BACKENDS, "--backend")
    sweep = load_sweep(sweep_path)
    bar = _SweepProgress(enabled=progress)
    with bar:
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
    counts = ", ".join(f"{status} {n}" for status, n in sorted(summary.statuses.items())) or "nothing to do"
    line = f"{summary.out}: ran {summary.ran} of {summary.total} jobs ({counts}) in {summary.seconds:.1f} s"
    if summary.ran:
        line += f" on {summary.workers} {summary.backend} worker(s) x {summary.threads} thread(s)"
    if summary.skipped:
        line += f"; {summary.skipped} already done"
    out.print(line, markup=False)
    if summary.dropped_bytes:
        err.print(f"note: cut a half-written last line ({summary.dropped_bytes} bytes) from {summary.out}", markup=False)
    if summary.duplicates:
        err.print(f"note: {summary.duplicates} duplicate job(s) (same problem content and settings) ran once", markup=False)


class _SweepProgress:
    """A rich progress bar on stderr: done / total, jobs per second, ETA, failures so far."""

    def __init__(self, enabled: bool):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.enabled = enabled
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[failed]}"),
            console=err,
            disable=not enabled,
        )
        self.task = None
        self.ran = 0
        self.failed: dict[str, int] = {}
        self.t0 = 0.0

    def __enter__(self) -> "_SweepProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def start(self, total: int, done: int) -> None:
        import time

        self.t0 = time.monotonic()
        self.task = self.progress.add_task("sweep", total=total, completed=done, rate="", failed="")

    def advance(self, record: Any) -> None:
        import time

        self.ran += 1
        if record["status"] in ("error", "timeout"):
            self.failed[record["status"]] = self.failed.get(record["status"], 0) + 1
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        rate = self.ran / elapsed
        rate_text = f"{rate:.2f} jobs/s" if rate >= 0.1 else f"{60 * rate:.2f} jobs/min"
        failed = ", ".join(f"{n} {status}" for status, n in sorted(self.failed.items()))
        self.progress.update(self.task, advance=1, rate=rate_text, failed=failed)


# --------------------------------------------------------------------------- compare


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

    from .compare import SUMMARY_COLUMNS, compare_file, plot_profile, problem_rows, summary_rows, to_markdown

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
    table = Table(title=f"{results_path}: {len(comparison.problems)} instances", title_justify="left")
    for i, (_, head) in enumerate(SUMMARY_COLUMNS):
        table.add_column(head, justify="left" if i == 0 else "right")
    for row in summary_rows(comparison):
        table.add_row(*row)
    out.print(table)
    for c in comparison.conflicts:
        out.print(f"conflict: {c['problem']} ({c['objective']}), {c['method']}: {c['conflict']}", markup=False)
    if per_problem:
        header, rows = problem_rows(comparison)
        ptable = Table(title="per problem", title_justify="left")
        for i, head in enumerate(header):
            ptable.add_column(head, justify="left" if i < 2 else "right")
        for row in rows:
            ptable.add_row(*row)
        out.print(ptable)


def main() -> None:
    """Console-script entry point: never a traceback for the user."""
    try:
        app()
    except SystemExit:
        raise
    except Exception as e:  # a bug: say so briefly, exit 3
        err.print(f"internal error: {type(e).__name__}: {e} (please report it with the input files)", markup=False)
        sys.exit(EXIT_INTERNAL)
