"""The commands on model and cluster presets: ``models``, ``clusters``, ``plan`` and ``export``.

``plan`` builds a problem from a model and a cluster preset (:mod:`partitioner.planning`),
solves it and prints the plan with its throughput, the Megatron baseline and the
settings of every export target; ``export`` turns a saved result into one target's
settings. Exit codes as in :mod:`.common`; output through :mod:`.render`.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Literal, Optional

import typer

from ..core.documents import strict_json_value
from ..plan import Plan, SolveResult
from ..problem import Problem, ProblemError, load_problem
from ..solvers import SolverError
from .common import EXIT_NO_PLAN, EXIT_OK, app, check_choice, err, guarded, parse_options, working
from .render import print_clusters, print_json, print_models, print_plan_summary, print_sequences

if TYPE_CHECKING:
    from ..planning import PlanOptions
    from ..planning.results import ModelPlan

__all__ = ["models_cmd", "clusters_cmd", "plan_cmd", "export_cmd"]


@app.command("models")
@guarded
def models_cmd(as_json: bool = typer.Option(False, "--json", help="Print the presets as JSON.")) -> None:
    """List the model presets with their parameter counts."""
    from ..presets import list_models, load_model

    specs = [load_model(name) for name in list_models()]
    if as_json:
        print_json([spec.summary() for spec in specs])
        return
    print_models(specs)


@app.command("clusters")
@guarded
def clusters_cmd(as_json: bool = typer.Option(False, "--json", help="Print the presets as JSON.")) -> None:
    """List the cluster presets (one GPU node each)."""
    from ..presets import list_clusters, load_cluster

    specs = [load_cluster(name) for name in list_clusters()]
    if as_json:
        print_json([spec.summary() for spec in specs])
        return
    print_clusters(specs)


@app.command("plan")
@guarded
def plan_cmd(
    model: str = typer.Option(..., "--model", help="Model preset name or YAML / config.json path (see `partitioner models`)."),
    cluster: str = typer.Option(..., "--cluster", help="Cluster preset name or YAML path (see `partitioner clusters`)."),
    nodes: int = typer.Option(..., "--nodes", help="Number of nodes."),
    gpus: Optional[int] = typer.Option(None, "--gpus",
                                       help="GPUs the job uses (default: all of the nodes): every GPU of the first "
                                            "nodes and part or all of the last, e.g. 64 of one 72-GPU NVL72 rack; "
                                            "stage sizes inside a node then follow the preset's stage_sizes."),
    global_batch: int = typer.Option(..., "--global-batch", help="Samples per iteration."),
    microbatches: str = typer.Option("auto", "--microbatches", help="Microbatches per iteration, or 'auto' (divisors of the batch)."),
    method: str = typer.Option("dp", "--method", "-m", help="Solver (dp, cpsat, milp, brute, greedy, ...)."),
    objective: str = typer.Option("iteration", "--objective", help="iteration | bottleneck"),
    time_limit: Optional[float] = typer.Option(None, "--time-limit",
                                               help="Seconds for the whole command (each solve gets what is left)."),
    max_stages: Optional[int] = typer.Option(None, "--max-stages", help="Upper bound on the pipeline depth (faster solves)."),
    memory_budget: Optional[float] = typer.Option(None, "--memory-budget",
                                                  help="GiB the dp tables of each solve may take (default 3)."),
    cost_option: Optional[List[str]] = typer.Option(None, "--cost-option", "-c", help="Cost-model option key=value (repeatable)."),
    profile: Optional[Path] = typer.Option(None, "--profile", help="Profiled per-layer times (CSV or JSON)."),
    save_problem: Optional[Path] = typer.Option(None, "--save-problem", help="Write the problem of the plan (with its schedule) here."),
    schedule: str = typer.Option("auto", "--schedule", "-s",
                                 help="auto (try every schedule, keep the fastest simulated) | 1f1b | zb-h1 | gpipe | interleaved"),
    virtual_stages: Optional[int] = typer.Option(None, "--virtual-stages", help="With --schedule interleaved: v (default: 2, 3, 4 tried)."),
    target: str = typer.Option("any", "--target",
                               help="any | megatron | torchtitan | deepspeed: search only the plans that framework runs "
                                    "(any: every plan, then per framework what --target T answers)."),
    per_target: bool = typer.Option(True, "--per-target/--no-per-target",
                                    help="With --target any: also plan each framework (as --target T does; with "
                                         "--time-limit, the search over every plan gets half and the frameworks "
                                         "share the rest)."),
    target_plans: Optional[Path] = typer.Option(None, "--target-plans", metavar="DIR",
                                                help="With --target any: write each framework's plan to DIR/T.json "
                                                     "(what plan --target T --json prints; `partitioner export "
                                                     "DIR/T.json --to T` gives its launch settings)."),
    precision: Optional[str] = typer.Option(None, "--precision",
                                            help="bf16 | fp8: the GEMM precision of the transformer blocks (default: "
                                                 "the cost options', bf16 unless -c precision=fp8)."),
    fp8_recipe: Optional[str] = typer.Option(None, "--fp8-recipe",
                                             help="With fp8: tensorwise (default) | delayed | blockwise | mxfp8 "
                                                  "(Blackwell) | rowwise (torchtitan's torchao recipe)."),
    knob_solves: str = typer.Option("fast", "--knob-solves",
                                    help="Uniform knob settings the screening solves per microbatch count: fast "
                                         "(the first with a plan) | all (every one: slower). The kept candidate is "
                                         "then solved exactly with knobs per segment either way; with --target, "
                                         "all is needed to prove the plan optimal."),
    gantt: Optional[Path] = typer.Option(None, "--gantt", help="Write a Gantt chart of the plan (PNG/SVG)."),
    as_json: bool = typer.Option(False, "--json", help="Print result format v1 plus baseline and throughput."),
    images: Optional[int] = typer.Option(None, "--images", help="Images (or video clips) per sample."),
    image_size: Optional[int] = typer.Option(None, "--image-size", help="Image side in px (dynamic resolution; tiling models cut it in tiles)."),
    tiles: Optional[int] = typer.Option(None, "--tiles", help="Tiles per image (InternVL, Idefics3/SmolVLM, LLaVA-OneVision, mllama)."),
    frames: Optional[int] = typer.Option(None, "--frames", help="Frames per video clip."),
    fps: Optional[float] = typer.Option(None, "--fps", help="Frame rate of the sampled frames (shows the clip length)."),
    text_tokens: Optional[int] = typer.Option(None, "--text-tokens", help="Text tokens per sample."),
    baseline: Optional[str] = typer.Option(None, "--baseline",
                                           help="Your recipe to compare with: a Megatron-LM argument list, a "
                                                "Megatron-Bridge config or a torchtitan TOML (as `estimate --recipe` "
                                                "reads it), or 'published' (the recipe shipped with the preset). The "
                                                "speed-up is then over it, and the plan is never slower than it."),
    mtp_layers: Optional[int] = typer.Option(None, "--mtp-layers",
                                             help="Multi-token prediction modules to train (default: the model's, "
                                                  "DeepSeek-V3's num_nextn_predict_layers; 0: none)."),
) -> None:
    """Plan a model preset on a cluster preset: stages, meshes, speed-up over Megatron's default, export settings.

    --images, --image-size, --tiles, --frames, --fps and --text-tokens describe one sample; each model tokenises
    them its own way (Qwen/GLM dynamic resolution, InternVL/Idefics3 tiling and pixel shuffle, LLaVA-OneVision
    anyres), and the plan shows the sequence lengths they imply. --mtp-layers sets the multi-token prediction
    modules trained after the language model (DeepSeek-V3 trains one).
    """
    from ..core.deadline import Deadline, process_seconds
    from ..planning import run_plan
    from ..presets import Workload, load_model, sequence_summary

    opts = _plan_options(
        nodes=nodes, gpus=gpus, global_batch=global_batch, microbatches=_microbatches(microbatches), method=method,
        objective=objective, time_limit=time_limit, options=parse_options(cost_option), profile=profile,
        max_stages=max_stages, schedule=schedule, virtual_stages=virtual_stages, target=target, knob_solves=knob_solves,
        per_target=per_target,
        precision=precision, fp8_recipe=fp8_recipe, memory_budget_gb=memory_budget, baseline=baseline,
    )
    workload = Workload(images=images, image_size=image_size, tiles=tiles, frames=frames, fps=fps, text_tokens=text_tokens,
                        mtp_layers=mtp_layers)
    spec = load_model(model, workload)
    sequences = sequence_summary(spec, workload)
    if target_plans is not None:
        _check_folder(target_plans)
    if gantt is not None:  # a wrong suffix was an internal error after the whole plan
        from ..simulate.viz import IMAGE_FORMATS

        check_choice(gantt.suffix.lower().lstrip("."), IMAGE_FORMATS, f"--gantt {gantt}: suffix")
    began = time.perf_counter()
    with working(f"planning {model} on {nodes} x {cluster} with {method}"):
        # --time-limit bounds the whole command: the interpreter's start-up and the imports count against it
        result = run_plan(spec, cluster, opts, Deadline(opts.time_limit, spent=process_seconds()))
    seconds = time.perf_counter() - began
    problem = result.problem
    if save_problem is not None and problem is not None:
        from ..problem import dump_problem

        dump_problem(problem, save_problem)
    if gantt is not None and result.plan is not None and problem is not None:
        _write_gantt(problem, result.plan, result, gantt)
    if target_plans is not None:
        _write_target_plans(result, target_plans, sequences)
    if as_json:
        print_json({**result.to_dict(), "sequences": sequences, **({"exports": _exportable(result, problem)} if result.plan else {})})
        if result.plan is None and result.message:
            err.print(result.message, markup=False)
    elif result.plan is None:
        err.print(f"{model}: {result.status}: {result.message}", markup=False)
    else:
        assert problem is not None, "a plan comes with its problem"
        print_plan_summary(problem, result, seconds)
        print_sequences(sequences)
    raise typer.Exit(EXIT_OK if result.plan is not None else EXIT_NO_PLAN)


def _microbatches(text: str) -> int | Literal["auto"]:
    """``--microbatches``: ``auto`` or an integer (its range is :class:`~partitioner.planning.PlanOptions`'s to check)."""
    if text == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise SolverError(f"--microbatches: must be a positive integer or 'auto', got {text!r}") from None


# The PlanOptions fields whose flag is not the field's name with dashes.
_FLAGS = {"memory_budget_gb": "memory-budget"}


def _plan_options(**fields: Any) -> "PlanOptions":
    """The command's :class:`~partitioner.planning.PlanOptions`, checked there; an error names the flag (``--nodes``)."""
    from ..planning import PlanOptions

    try:
        return PlanOptions(**fields)
    except ProblemError as err:
        flag = _FLAGS.get(err.path, err.path.replace("_", "-"))
        raise ProblemError(err.reason, path="--" + flag) from None


def _check_folder(folder: Path) -> None:
    """``--target-plans DIR`` refused before the plan when DIR cannot be made or written in (the plan is not lost)."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise ProblemError(f"cannot write in the folder: {e.strerror or e}", path="--target-plans",
                           source=str(folder)) from None


def _write_target_plans(result: "ModelPlan", folder: Path, sequences: Any) -> None:
    """``--target-plans DIR``: each framework's result as ``plan --target T --json`` prints it, in ``DIR/T.json``."""
    if not result.targets:
        err.print("--target-plans: no per-target plans (they come with --target any and --per-target)", markup=False)
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ProblemError(f"cannot create the folder: {e.strerror or e}", path="--target-plans",
                           source=str(folder)) from None
    for name, summary in result.targets.items():
        sub = summary.result
        if sub is None:
            continue
        doc = {**sub.to_dict(), "sequences": sequences,
               **({"exports": _exportable(sub, sub.problem)} if sub.plan is not None else {})}
        path = folder / f"{name}.json"
        try:
            path.write_text(json.dumps(strict_json_value(doc), indent=2, allow_nan=False, default=str) + "\n")
        except OSError as e:
            raise ProblemError(f"cannot write: {e.strerror or e}", path="--target-plans", source=str(path)) from None


def _exportable(result: SolveResult, problem: Problem | None) -> dict[str, dict]:
    """Per export target: whether it runs the kept plan, and the reasons when it does not (``plan --json``'s ``exports``)."""
    from ..frameworks.export import TARGETS, export_result

    out: dict[str, dict] = {}
    for target in TARGETS:
        exp = export_result(result, target, problem)
        out[target] = {"expressible": exp.expressible, "reasons": list(exp.reasons)}
    return out


def _write_gantt(problem: Problem, plan: Plan, result: SolveResult, path: Path) -> None:
    from ..simulate.engine import simulate
    from ..simulate.viz import save_gantt

    sim = simulate(problem, plan, evaluation=result.evaluation)  # under the problem's (the kept) schedule
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
    from ..frameworks.export import TARGETS, export_result
    from ..problem import read_document

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
