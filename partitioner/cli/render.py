"""How the commands show what they computed: rich tables, one-line summaries, JSON on stdout.

Nothing here loads a file, solves or chooses an exit code: each function
formats and prints a result a command already has. Tables and summaries go to
stdout (``out``); messages about a missing plan and notes go to stderr
(``err``). :func:`print_json` writes the document of every ``--json`` flag,
indented by two spaces, on stdout. :class:`SweepProgress` is the progress bar
of ``partitioner batch`` on stderr.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rich.table import Table

from ..core.documents import strict_json_value
from ..plan import Evaluation, SolveResult
from ..problem import Problem
from ..simulate.breakdown import config_cell
from .common import err, out

if TYPE_CHECKING:  # the plan records, for annotations only (the CLI imports planning when it plans)
    from rich.console import JustifyMethod
    from rich.progress import TaskID

    from ..frameworks.common import Export
    from ..planning.recipes.estimate import Estimate
    from ..planning.records import RecipeComparison, TargetSummary
    from ..planning.results import ModelPlan
    from ..planning.schedules.report import ScheduleReport, ScheduleRow, ScheduleSummary

__all__ = [
    "print_json", "layout_header", "stage_table", "print_result", "print_validation", "print_evaluation", "simulation_table",
    "print_simulation", "print_models", "print_clusters", "print_plan_summary", "schedule_table", "schedule_name",
    "print_batch_summary", "print_sequences", "print_estimate", "target_line",
    "SweepProgress", "print_comparison",
]


def _add_columns(table: Table, columns: Sequence[tuple[str, JustifyMethod]]) -> None:
    """Add the columns ``(header, justify)`` to ``table``, in order."""
    for col, justify in columns:
        table.add_column(col, justify=justify)


def print_json(doc: Any) -> None:
    """``doc`` as strict JSON (no NaN or Infinity: they print as null), indented by two spaces, on stdout."""
    sys.stdout.write(json.dumps(strict_json_value(doc), indent=2, allow_nan=False, default=str) + "\n")
    sys.stdout.flush()


def layout_header(problem: Problem) -> str:
    """The config column's header: ``dp x tp`` (formats v1, v2), ``layout`` (v3: dp, tp, cp, ep, etp)."""
    return "layout" if problem.version >= 3 else "dp x tp"


def stage_table(problem: Problem, ev: Evaluation, title: str = "") -> Table:
    """The stage table: layers, GPUs, nodes, layout, F/B/t, memory; the bottleneck marked.

    Format v2: the ``dp x tp`` cell has one ``module dp x tp [variant]`` line per
    segment when the segments' configs differ, and a ``reshard ms`` column
    gives Σ r (in F and again in B).
    """
    v2 = problem.version >= 2
    table = Table(title=title or None, title_justify="left", caption="* bottleneck stage", caption_justify="left")
    columns: list[tuple[str, JustifyMethod]] = [
        ("", "left"),
        ("stage", "right"),
        ("layers", "left"),
        ("GPUs", "right"),
        ("node(s)", "left"),
        (layout_header(problem), "left"),
        ("F ms", "right"),
        ("B ms", "right"),
        ("t ms", "right"),
        ("memory GiB", "right"),
    ]
    if v2:
        columns.insert(6, ("reshard ms", "right"))
    _add_columns(table, columns)
    worst = ev.bottleneck_stage
    cap = problem.cluster.gpu_memory_bytes
    for s in ev.stages:
        first, last = problem.layers[s.first_layer], problem.layers[s.last_layer]
        names = first.name if s.first_layer == s.last_layer else f"{first.name} .. {last.name}"
        layers = f"{s.first_layer}-{s.last_layer} ({names})" if s.first_layer != s.last_layer else f"{s.first_layer} ({names})"
        nodes = ",".join(map(str, s.nodes))
        mark = "*" if s.index == worst else ""
        cells = [
            mark,
            str(s.index),
            layers,
            str(s.devices),
            nodes,
            config_cell(problem, s),
            f"{s.fwd_ms:.3f}",
            f"{s.bwd_ms:.3f}",
            f"[bold]{s.time_ms:.3f}[/bold]" if mark else f"{s.time_ms:.3f}",
            f"{s.memory_bytes / 2**30:.2f} / {cap / 2**30:.0f}",
        ]
        if v2:
            cells.insert(6, f"{s.reshard_ms:.3f}")
        table.add_row(*cells)
    return table


def print_result(problem: Problem, result: SolveResult) -> None:
    """What ``partitioner solve`` prints: a head line, the stage table, the times and the message."""
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


def print_validation(problem_path: Path, problem: Problem, layouts: list[str]) -> None:
    """The one line ``partitioner validate`` prints for a valid problem."""
    out.print(
        f"{problem_path}: valid v{problem.version} problem '{problem.name}': {problem.num_layers} layers, "
        f"{problem.cluster.nodes} x {problem.cluster.gpus_per_node} GPUs, layouts "
        f"{', '.join(layouts)}, {problem.stages.min}..{problem.stages.max} stages, "
        f"m = {problem.microbatches}, objective {problem.objective}",
        markup=False,
    )


def print_evaluation(problem: Problem, ev: Evaluation, plan_path: Path) -> None:
    """The stage table of an evaluated plan and its objective value."""
    out.print(stage_table(problem, ev, title=f"{problem.name}: {plan_path}"))
    out.print(
        f"{ev.objective} = {ev.value:.6g} ms (bottleneck {ev.bottleneck_ms:.3f} ms, "
        f"iteration {ev.iteration_ms:.3f} ms)",
        markup=False,
    )


def simulation_table(problem: Problem, sim: Any, ev: Evaluation) -> Table:
    """Per stage: configs, F, B (reshards and sends included), busy and idle time, peak in-flight and memory."""
    table = Table(title_justify="left")
    _add_columns(table, (
        ("stage", "right"),
        ("layers", "left"),
        ("GPUs", "right"),
        (layout_header(problem), "left"),
        ("F ms", "right"),
        ("B ms", "right"),
        ("busy ms", "right"),
        ("idle ms", "right"),
        ("in-flight", "right"),
        ("peak memory GiB", "right"),
    ))
    cap = problem.cluster.gpu_memory_bytes
    peak = sim.peak_memory_bytes
    for s, busy, idle, inflight, mem in zip(ev.stages, sim.busy_ms, sim.idle_ms, sim.peak_inflight, peak):
        layers = f"{s.first_layer}" if s.first_layer == s.last_layer else f"{s.first_layer}-{s.last_layer}"
        table.add_row(
            str(s.index),
            layers,
            str(s.devices),
            config_cell(problem, s),
            f"{s.fwd_ms:.3f}",
            f"{s.bwd_ms:.3f}" if sim.schedule != "forward" else "-",
            f"{busy:.3f}",
            f"{idle:.3f}",
            str(inflight),
            f"{mem / 2**30:.2f} / {cap / 2**30:.0f}",
        )
    return table


def print_simulation(problem: Problem, sim: Any, ev: Evaluation, schedule: str) -> None:
    """The per-stage simulation table and the makespan / bubble line."""
    out.print(simulation_table(problem, sim, ev))
    out.print(
        f"{schedule}, m = {sim.microbatches}: makespan {sim.makespan_ms:.3f} ms, "
        f"bubble {100 * sim.bubble_ratio:.1f} % (1F1B iteration estimate {ev.iteration_ms:.3f} ms, "
        f"bottleneck {ev.bottleneck_ms:.3f} ms)",
        markup=False,
    )


def print_models(specs: list[Any]) -> None:
    """The table of model presets."""
    table = Table(title="model presets", title_justify="left")
    _add_columns(table, (("name", "left"), ("params", "right"), ("modules (layers, params)", "left"), ("LLM tokens", "right")))
    for spec in specs:
        mods = ", ".join(f"{m['name']} {m['kind']} ({m['layers']}, {m['params'] / 1e9:.3g} B)" for m in spec.summary()["modules"])
        table.add_row(spec.name, f"{spec.params / 1e9:.3g} B", mods, str(spec.llm_tokens))
    out.print(table)


def print_clusters(specs: list[Any]) -> None:
    """The table of cluster presets (one node each)."""
    table = Table(title="cluster presets (per node)", title_justify="left")
    for col in ("name", "GPU", "GPUs/node", "memory GiB", "bf16 TFLOPS", "NVLink GB/s", "network GB/s"):
        table.add_column(col, justify="left" if col in ("name", "GPU") else "right")
    for c in specs:
        table.add_row(c.name, c.gpu, str(c.gpus_per_node), f"{c.gpu_memory_bytes / 2**30:.1f}", f"{c.peak_tflops:g}",
                      f"{c.intra_node_GBps:g}", f"{c.inter_node_GBps:g}")
    out.print(table)


def print_sequences(doc: dict[str, Any]) -> None:
    """The sample the plan is for: the workload given and the sequence lengths it implies."""
    parts = []
    if doc.get("workload"):
        parts.append("workload " + ", ".join(f"{k} {v}" for k, v in doc["workload"].items()))
    for name, n in doc.get("vision_tokens", {}).items():
        parts.append(f"{name} {n} tokens")
    if "image_tokens" in doc:
        parts.append(f"image tokens {doc['image_tokens']}")
    if "cross_attention_tokens" in doc:
        parts.append(f"cross-attention tokens {doc['cross_attention_tokens']}")
    if "llm_tokens" in doc:
        parts.append(f"text tokens {doc['text_tokens']}, llm sequence {doc['llm_tokens']}")
    if doc.get("mtp_layers"):
        parts.append(f"{doc['mtp_layers']} multi-token prediction module(s) trained")
    out.print("per sample: " + "; ".join(parts), markup=False)


def print_plan_summary(problem: Problem, result: "ModelPlan", seconds: float | None = None) -> None:
    """What ``partitioner plan`` prints: the plan, its throughput, the baseline and the export settings.

    ``seconds``: the wall time of the whole planning run, shown in the first line (the kept solve's own time
    without it; the JSON has both sides: ``solve_seconds``)."""
    tput = result.throughput
    assert tput is not None and result.evaluation is not None and result.value is not None
    out.print(
        f"{result.model} on {problem.cluster.nodes} x {problem.cluster.gpus_per_node} GPUs ({result.cluster}), "
        f"global batch {result.global_batch}, m = {problem.microbatches}: {result.method} -> {result.status}, "
        f"{result.objective} = {result.value:.6g} ms  [{result.solve_seconds if seconds is None else seconds:.2f} s]",
        markup=False,
    )
    out.print(stage_table(problem, result.evaluation))
    name = schedule_name(problem.training.schedule, problem.training.virtual_stages)
    src = f"{name} {'simulator' if tput.iteration_source == 'simulator' else 'estimate'}"
    out.print(
        f"iteration {tput.iteration_ms:.1f} ms ({src}), {tput.tokens_per_s:.4g} tokens/s, MFU {100 * tput.mfu:.1f} %",
        markup=False,
    )
    out.print(_baseline_line(result), markup=False)
    if result.recipe_baseline is not None:
        out.print(_recipe_line(result.recipe_baseline), markup=False)
    if result.precision:
        out.print(_precision_line(result.precision), markup=False)
    if result.schedules is not None and result.schedules.by_schedule:
        _print_schedules(result.schedules)
    if result.message:
        out.print(result.message, markup=False)
    if result.memory is not None:
        counts = ", ".join(f"ZeRO-{z} {c}" for z, c in sorted(result.memory.counts.items()))
        out.print(f"weight memory: {result.memory.note} ({counts})", markup=False)
    for cp_stage in result.context_parallel or ():
        out.print("context parallelism: " + cp_stage.text(), markup=False)
    for alternative in result.axes_not_chosen or ():
        out.print(alternative.text(), markup=False)
    from ..frameworks.export import TARGETS, export_result

    exports = {target: export_result(result, target, problem) for target in TARGETS}
    for target, exp in exports.items():
        out.print(f"\n[bold]{target}[/bold]")
        sys.stdout.flush()
        sys.stdout.write(exp.text())  # unwrapped: meant to be pasted
    out.print("\nexportable: " + "; ".join(f"{t} {_exportable(e)}" for t, e in exports.items()), markup=False)
    if result.targets:
        out.print("\nbest plan each framework runs (each line is what plan --target T answers with these options):",
                  markup=False)
        for t, s in result.targets.items():
            out.print("  " + target_line(t, s), markup=False)
        out.print("  launch settings per framework: --target-plans DIR writes DIR/T.json, then "
                  "`partitioner export DIR/T.json --to T`", markup=False)


def target_line(name: str, s: "TargetSummary") -> str:
    """One framework's line of the default output: the ``--target`` run's time, speed-up, status and plan, or why none."""
    if s.plan is None or s.iteration_ms is None:
        return f"{name}: no plan ({s.status}: {s.message})" + (f"; {s.note}" if s.cut and s.note else "")
    p = s.plan
    v = f" v{p['virtual_stages']}" if p.get("virtual_stages", 1) > 1 else ""
    speed = f" ({s.speedup:.3f}x its best baseline)" if s.speedup else ""
    runs_kept = "runs the kept plan" if not s.reasons else "does not run the kept plan: " + "; ".join(s.reasons[:2])
    cut = f"; cut short: {s.note}" if s.cut and s.note else ""
    return (f"{name}: {s.iteration_ms:.6g} ms{speed}, {s.status}; {p['schedule']}{v} m={p['microbatches']}, "
            f"{p['stages']} stage{'s' if p['stages'] != 1 else ''}, {', '.join(p['meshes'])}, "
            f"{', '.join(p['knobs'])}{cut}; {runs_kept}")


def print_estimate(est: "Estimate") -> None:
    """What ``partitioner estimate`` prints: the layout, the stage table, the throughput and what does not fit."""
    problem, ev, r = est.problem, est.evaluation, est.recipe
    assert problem is not None and ev is not None, "an estimate comes with its problem and evaluation"
    axes = [f"{name} {getattr(r, name)}" for name in ("tp", "pp", "vpp", "cp", "ep") if getattr(r, name) != 1]
    if r.ep > 1:
        axes.append(f"etp {r.expert_tp}")
    knobs = [f"ZeRO-{est.recipe.zero}"] + ([f"recompute {r.recompute}"] if r.recompute != "none" else [])
    out.print(
        f"{est.model} on {est.nodes} x {problem.cluster.gpus_per_node} GPUs ({est.cluster}): "
        f"{' x '.join(axes + [f'dp {est.dp}'])}, mbs {r.mbs}, global batch {r.gbs}, m = {est.microbatches}, "
        f"{', '.join(knobs)}, {schedule_name(est.schedule, est.virtual_stages)}",
        markup=False,
    )
    out.print(stage_table(problem, ev))
    if est.virtual_stages > 1:
        ranks = sorted({(s.rank, s.memory_bytes) for s in est.stages})
        out.print("memory per pipeline rank (its chunks' weights and stash): " + ", ".join(
            f"rank {k} {b / 2**30:.2f} GiB" for k, b in ranks), markup=False)
    tput = est.throughput
    bubble = f", bubble {100 * est.bubble_ratio:.1f} %" if est.bubble_ratio is not None else ""
    out.print(f"iteration {tput.iteration_ms:.1f} ms (simulated; estimate {est.estimate_ms:.1f} ms){bubble}, "
              f"{tput.tokens_per_s:.4g} tokens/s, MFU {100 * tput.mfu:.1f} %", markup=False)
    if est.fits:
        out.print(f"fits: every pipeline rank within {est.gpu_memory_bytes / 2**30:.2f} GiB usable per GPU", markup=False)
    else:
        out.print("DOES NOT FIT: " + "; ".join(est.over_memory) + " (times with the memory check lifted)", markup=False)
    for note in est.notes:
        out.print(f"note: {note}", markup=False)


def _precision_line(precision: Mapping[str, Any]) -> str:
    """The FP8 line of a plan's summary: the recipe, the FP8 rate and what stays BF16 (the MFU is of the BF16 peak)."""
    gather = ", fp8 parameters" if precision.get("fp8_param_gather") else ""
    peak = float(precision.get("peak_flops_fp8_per_gpu", 0.0)) / 1e12
    return (f"precision: FP8, {precision.get('fp8_recipe')} scaling{gather}: block GEMMs at {peak:.1f} TFLOP/s peak x "
            f"{float(precision.get('fp8_gemm_efficiency', 0.0)):.2f} of the BF16 curve; BF16: {precision.get('bf16')} "
            "(MFU above is against the BF16 peak)")


def _recipe_line(rc: "RecipeComparison") -> str:
    """``baseline: your recipe FILE (layout): iteration X ms -> speed-up Y``: the one stated reference of the speed-up."""
    fit = "" if rc.fits else " (over memory: timed with the memory check lifted)"
    kept = "; the plan is the recipe's own (nothing faster found)" if rc.kept else ""
    speedup = f"{rc.speedup:.3f}x" if rc.speedup is not None else "n/a"
    source = f" [{rc.source}]" if rc.source else ""
    return (f"baseline: {rc.name} ({rc.layout}){source}: iteration {rc.iteration_ms:.1f} ms{fit}, MFU "
            f"{100 * rc.throughput.mfu:.1f} % -> speed-up {speedup}{kept}")


def _baseline_line(result: "ModelPlan") -> str:
    """The best baseline's shape, iteration and MFU, and the speed-up over it (over the recipe, with one)."""
    base = result.baseline
    if base is None or base.plan is None:
        return "baseline megatron-uniform: no uniform plan fits in memory"
    stages, v = base.plan["stages"], base.virtual_stages or 1
    mesh = base.layout.label if base.layout is not None else f"dp {stages[0]['dp']} x tp {stages[0]['tp']}"
    shape = f"{len(stages) // v} stage(s){f' x {v} virtual' if v > 1 else ''} of {mesh}"
    under = f", {schedule_name(base.schedule, v)}" if base.schedule else ""
    return (f"baseline {base.method} ({shape}, m = {base.microbatches}{under}): iteration {base.iteration_ms:.1f} ms, "
            f"MFU {100 * base.throughput.mfu:.1f} % -> " + (
                "the speed-up is over the recipe (next line)" if result.recipe_baseline is not None
                else f"speed-up {result.speedup:.3f}x"))


def _print_schedules(report: "ScheduleReport") -> None:
    """The schedule line, the schedule table, its notes and which export targets run the kept schedule."""
    chosen = report.chosen
    how = "pinned" if report.pinned else "chosen by simulation"
    if chosen is not None:
        what = _SOURCE_WORDS.get(chosen.plan_source, "{method}").format(method=chosen.method)
        out.print(f"schedule: {schedule_name(chosen.schedule, chosen.virtual_stages)} ({how}; {what})", markup=False)
    out.print(schedule_table(report))
    for note in report.notes:
        out.print(f"note: {note}", markup=False)
    if chosen is not None:
        out.print(export_hint(chosen.schedule, report.by_schedule), markup=False)


def schedule_name(schedule: str, virtual_stages: int = 1) -> str:
    """``interleaved (v = 2)`` or the plain name."""
    return f"{schedule} (v = {virtual_stages})" if schedule == "interleaved" else schedule


def schedule_table(report: "ScheduleReport") -> Table:
    """Per schedule: the best plan and the best baseline, simulated iteration, bubble, peak memory (``plan``'s table)."""
    table = Table(title="schedules (simulated iteration; * kept)", title_justify="left")
    _add_columns(table, (("", "left"), ("schedule", "left"), ("best plan", "left"), ("iteration ms", "right"),
                         ("bubble %", "right"), ("peak GiB", "right"), ("best baseline", "left"),
                         ("iteration ms", "right"), ("bubble %", "right"), ("peak GiB", "right")))
    kept = (report.chosen.schedule, report.chosen.virtual_stages) if report.chosen is not None else None
    for entry in report.by_schedule:
        mark = "*" if (entry.schedule, entry.virtual_stages) == kept else ""
        table.add_row(mark, schedule_name(entry.schedule, entry.virtual_stages), *_row_cells(entry.plan, entry.plan_reason),
                      *_row_cells(entry.baseline, entry.baseline_reason))
    table.caption = ("plan: the kept plan replayed; solved: the method re-run under the schedule; uniform: Megatron-style "
                     "uniform split; m microbatches, P stages (x v chunks), a baseline's cp, ep, etp when not 1")
    table.caption_justify = "left"
    return table


def _row_cells(row: "ScheduleRow | None", why: str | None) -> list[str]:
    """A schedule-table row's four cells for one candidate: label, iteration, bubble, peak memory."""
    if row is None:
        return [why or "-", "", "", ""]
    label = row.plan_source if row.plan_source in ("plan", "solved") else _BASELINE_LABEL.get(row.method, row.method)
    v = row.virtual_stages
    label += f" m {row.microbatches} P {row.stages // v}" + (f"x{v}" if v > 1 else "")
    if row.layout is not None:  # a baseline's context and expert parallelism, when it has any
        label += "".join(f" {axis} {n}" for axis in ("cp", "ep", "etp") if (n := getattr(row.layout, axis)) != 1)
    bubble = "" if row.bubble_ratio is None else f"{100 * max(row.bubble_ratio, 0.0):.1f}"
    peak = "" if not row.peak_memory_bytes else f"{row.peak_memory_bytes / 2**30:.1f}"
    return [label, f"{row.iteration_ms:.1f}", bubble, peak]


def export_hint(schedule: str, by_schedule: "Sequence[ScheduleSummary]") -> str:
    """Which export targets run ``schedule``; for the others, the fastest schedule they do run (from the table)."""
    from ..frameworks import RULES

    lacking = [t for t, rules in RULES.items() if schedule not in rules.schedules]
    if not lacking:
        return f"exports: every target runs {schedule}"

    def fastest(runs: tuple[str, ...]) -> str:
        rows = [r for e in by_schedule if e.schedule in runs for r in (e.plan, e.baseline) if r is not None]
        if not rows:  # a pinned schedule: the table has none of theirs
            return f"--schedule {runs[0]}"
        best = min(rows, key=lambda r: r.iteration_ms)
        return f"--schedule {best.schedule}: {best.iteration_ms:.1f} ms"

    return (f"exports: {schedule} is not a schedule of " + ", ".join(lacking) + " (they say so below); re-plan pinned for them: "
            + "; ".join(f"{t} ({fastest(RULES[t].schedules)})" for t in lacking))


_BASELINE_LABEL = {"megatron-uniform": "uniform", "fsdp": "fsdp"}
_SOURCE_WORDS = {"plan": "the {method} plan", "solved": "{method} re-solved under it", "baseline": "the {method} baseline",
                 "fsdp": "the fsdp baseline"}


def print_batch_summary(summary: Any) -> None:
    """The line a finished sweep prints, and notes on stderr about repaired or repeated jobs."""
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


class SweepProgress:
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
        self.task: TaskID | None = None  # set by start()
        self.ran = 0
        self.failed: dict[str, int] = {}
        self.t0 = 0.0

    def __enter__(self) -> "SweepProgress":
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
        assert self.task is not None, "advance() before start()"
        self.progress.update(self.task, advance=1, rate=rate_text, failed=failed)


def print_comparison(comparison: Any, results_path: Path, per_problem: bool) -> None:
    """The summary table of a comparison, its conflicts, and (optionally) the per-problem table."""
    from ..batch.compare import SUMMARY_COLUMNS, problem_rows, summary_rows

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


def _exportable(export: Export) -> str:
    """``yes``, ``yes (a template, not a launch)`` or ``no``: what the ``exportable:`` line says of one framework."""
    if not export.expressible:
        return "no"
    return "yes (a template, not a launch)" if export.settings.get("launch") == "template" else "yes"
