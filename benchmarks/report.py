"""Regenerate ``benchmarks/results/REPORT.md``: the project's benchmark report.

One command, from the repository root::

    python -m benchmarks.report           # everything (about an hour on 2 cores)
    python -m benchmarks.report --quick   # small versions of every part, for a smoke test
    python -m benchmarks.report --reuse   # rebuild the report from the result files already there
    python -m benchmarks.report --parts throughput,plans   # re-measure some parts, keep the others

Parts, each also runnable on its own:

1. **Solver time scaling** -- :mod:`benchmarks.solvers` (layers, GPUs and layouts grow; the issue-3 targets).
2. **Batch throughput** -- :mod:`benchmarks.throughput` (64-layer problems per hour per core).
3. **Solver quality on the presets** -- a ``partitioner batch`` sweep over model presets x clusters x
   batch sizes, every method, compared with :mod:`partitioner.batch.compare` (table and performance profile).
4. **Plan quality** -- for every VLA/VLM preset, :func:`partitioner.plan_model` against both baselines
   (``megatron-uniform`` and ``fsdp``), simulated, with the memory knobs each stage and segment chose.
   ``--case-timeout S`` gives up a case after S seconds (its row says so); ``--cases m1,m2`` re-measures
   only those models and keeps the other rows of ``plans.json``.
5. **Schedules** -- measured with part 4 (``plans``): the ``schedules`` entry of each case's
   :func:`partitioner.plan_model` result, written to ``schedules.md`` (:mod:`benchmarks.schedules`'s table)
   and included in the report.
6. **Calibration** -- :mod:`benchmarks.calibration`: every row of Megatron-LM's SC'21 Table 1 evaluated as
   published through the cost model, predicted against measured throughput, and Korthikanti et al.'s Table 5
   (both experiments) against measured iteration time (``calibration.md``, included).
7. **Targets** (part ``targets``) -- :mod:`benchmarks.targets`: per preset x export target, ``plan --target T``,
   ``export --to T`` and the framework's own check, with the speed-up over the best baseline under T
   (``targets.md``, included with the issue targets). ``python -m benchmarks.targets --out benchmarks/results``
   measures it alone and splices its table into an existing REPORT.md without rebuilding the rest.

The issue-13 target table (part ``issue13``) comes from ``python -m benchmarks.solvers --sweeps issue13,plan
--methods dp,cpsat --time-limit 60 --out benchmarks/results/issue13``: every solver target and its
format-v2 twin, and ``partitioner plan`` per preset, each in its own process (wall, CPU, peak memory).
The issue-28 row (part ``issue28``) comes from ``python -m benchmarks.solvers --sweeps issue28 --methods dp
--time-limit 60 --out benchmarks/results/issue28``: dp on the VLA shape at its memory budget.

The issue-25/27 rows (part ``issue25``) come from ``python -m benchmarks.solvers --sweeps plan,issue25 --methods
dp --out benchmarks/results/issue25``: ``partitioner plan`` on every preset, in a process of its own.

The first-run section comes from ``python -m benchmarks.first_run`` (``first_run.md``: a fresh clone,
an empty numba cache, 4 busy processes; the README's warmup step and the plan after it).

The report states the machine, the date and the commit it was made on.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import solvers as solver_bench  # noqa: E402
from benchmarks import startup as startup_bench  # noqa: E402
from benchmarks import targets as targets_bench  # noqa: E402
from benchmarks import throughput as throughput_bench  # noqa: E402
from benchmarks.calibration import dense as calibration_bench  # noqa: E402
from partitioner import __version__, plan_model  # noqa: E402
from partitioner.batch import expand, load_sweep, run_jobs  # noqa: E402
from partitioner.batch.compare import compare_file, plot_profile, to_markdown  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
PARTS = ("solvers", "throughput", "presets", "plans", "issue13", "issue25", "issue28", "issue34", "calibration",
         "targets")
TARGETS_TIME_LIMIT = 60.0  # seconds per `plan --target T` command of part `targets`

# Plan-quality cases: every VLA/VLM preset on a cluster that holds it, with a realistic batch.
PLAN_CASES = solver_bench.PLAN_CASES
QUICK_PLAN_CASES = PLAN_CASES[1:3]

PRESET_GRID = {
    "model": ["openvla-7b", "pi0", "llava-1.5-7b", "qwen2-vl-7b"],
    "cluster": ["dgx-a100-80g", "dgx-h100"],
    "nodes": [1, 2],
    "global_batch": [256, 1024],
    "microbatches": [16],
}
QUICK_PRESET_GRID = {"model": ["pi0"], "cluster": ["dgx-h100"], "nodes": [1], "global_batch": [256], "microbatches": [8]}


def preset_quality(out: Path, quick: bool, time_limit: float) -> Path:
    """Part 3: the batch sweep over presets (resumable) and its comparison."""
    grid = QUICK_PRESET_GRID if quick else PRESET_GRID
    methods = ["dp", "greedy", "balanced", "uniform"] if quick else ["dp", "cpsat", "milp", "greedy", "balanced", "uniform"]
    sweep_file = out / "presets_sweep.yaml"
    sweep_file.write_text(
        "# written by benchmarks/report.py\n"
        + json.dumps({"grid": grid, "methods": methods, "objective": "iteration", "time_limit": time_limit}, indent=1)
        + "\n"
    )
    results = out / "presets.jsonl"
    expansion = expand(load_sweep(sweep_file))
    run_jobs(expansion.jobs, results, prefailed=expansion.failed)
    shown = results.relative_to(ROOT) if results.is_relative_to(ROOT) else results
    comparison = compare_file(results, source=str(shown))
    plot_profile(comparison, out / "presets_profile.png", title="Performance profile: presets x clusters x batch sizes")
    (out / "presets_compare.md").write_text(
        to_markdown(comparison, title="Solver quality on the model presets", profile_image="presets_profile.png")
    )
    return results


def _knob_label(seg: dict) -> str:
    """One segment's memory knobs, compact: ``Z1``, ``Z3+rs`` (selective recompute), ``Z0+rf`` (full)."""
    rec = {"none": "", "selective": "+rs", "full": "+rf"}.get(str(seg.get("recompute") or "none"), f"+r{seg.get('recompute')}")
    return f"Z{seg.get('zero', 0)}{rec}"


def compact_knobs(knobs: list[dict] | None) -> str:
    """Per stage, its segments' knobs joined by ``/``; runs of equal stages collapsed (``4x Z1 · Z1/Z1+rs``)."""
    if not knobs:
        return ""
    labels = ["/".join(_knob_label(seg) for seg in st["segments"]) for st in knobs]
    runs: list[list] = []
    for label in labels:
        if runs and runs[-1][0] == label:
            runs[-1][1] += 1
        else:
            runs.append([label, 1])
    return " · ".join(label if n == 1 else f"{n}x {label}" for label, n in runs)


def _mesh(stage: dict) -> str:
    """``GPUs:dp x tp``; a stage whose segments differ lists each segment's mesh, joined by ``/``."""
    if "dp" in stage:
        return f"{stage['devices']}:{stage['dp']}x{stage['tp']}"
    return f"{stage['devices']}:" + "/".join(f"{c['dp']}x{c['tp']}" for c in stage["configs"])


def _meshes(plan: dict | None) -> list[str]:
    return [_mesh(s) for s in plan["stages"]] if plan else []


def _stage_modules(result) -> list[list[str]]:
    """Per stage of the kept plan, the modules its layers belong to, in layer order."""
    if result.plan is None or result.problem is None:
        return []
    out = []
    for st in result.plan.stages:
        names: list[str] = []
        for layer in result.problem.layers[st.first_layer: st.last_layer + 1]:
            if not names or names[-1] != layer.module:
                names.append(layer.module)
        out.append(names)
    return out


def _short_mesh(mesh: str) -> str:
    """``32:32x1/32x1`` -> ``32:32x1`` when every segment of the stage has the same mesh (knobs may differ)."""
    devices, _, segs = mesh.partition(":")
    parts = segs.split("/")
    return f"{devices}:{parts[0]}" if len(set(parts)) == 1 else mesh


def plan_case(model: str, cluster: str, nodes: int, batch: int) -> dict:
    """Plan one case with :func:`plan_model` (dp) and summarise it: plan, both baselines, knobs, schedules."""
    start = time.perf_counter()
    result = plan_model(model, cluster, nodes=nodes, global_batch=batch)
    seconds = time.perf_counter() - start
    doc = result.to_dict()
    extra = result.extra
    base = extra.get("baseline") or {}
    baselines = {}
    for name, b in (extra.get("baselines") or {}).items():
        baselines[name] = {
            "simulated_ms": (b.get("simulation") or {}).get("makespan_ms"),
            "iteration_ms": b.get("iteration_ms"),
            "predicted_ms": b.get("value"),
            "microbatches": b.get("microbatches"),
            "meshes": _meshes(b.get("plan")),
            "knobs": compact_knobs(b.get("knobs")),
            "mfu": (b.get("throughput") or {}).get("mfu"),
            "message": b.get("message", ""),
        }
    schedules = None
    if result.plan is not None and "schedules" in extra:
        schedules = {"model": model, "cluster": cluster, "nodes": nodes, "global_batch": batch, "status": result.status,
                     "seconds": seconds, "microbatches": extra.get("microbatches"), "rows": extra["schedules"]["rows"]}
    return {
        "model": model,
        "cluster": cluster,
        "nodes": nodes,
        "global_batch": batch,
        "status": doc["status"],
        "message": doc.get("message", ""),
        "seconds": seconds,
        "commit": throughput_bench.machine()["commit"],
        "stages": len(doc["plan"]["stages"]) if doc.get("plan") else None,
        "meshes": _meshes(doc.get("plan")),
        "stage_modules": _stage_modules(result),
        "knobs": compact_knobs(extra.get("knobs")),
        "microbatches": extra.get("microbatches"),
        "predicted_ms": doc.get("value"),
        "simulated_ms": (extra.get("simulation") or {}).get("makespan_ms"),
        "baseline_method": base.get("method"),
        "baseline_simulated_ms": (base.get("simulation") or {}).get("makespan_ms"),
        "baseline_message": base.get("message", ""),
        "baselines": baselines,
        "speedup": extra.get("speedup"),
        "mfu": (extra.get("throughput") or {}).get("mfu"),
        "baseline_mfu": (base.get("throughput") or {}).get("mfu"),
        "fits_memory": (extra.get("simulation") or {}).get("fits_memory"),
        "schedules": schedules,
    }


def _case_worker(case: tuple, queue) -> None:
    try:
        queue.put(("ok", plan_case(*case)))
    except Exception as err:  # reported in the table, not swallowed: the row says what failed
        queue.put(("error", f"{type(err).__name__}: {err}"))


def run_case(case: tuple, timeout: float | None) -> dict:
    """:func:`plan_case` in a child process, given up after ``timeout`` seconds (a row that says so)."""
    if timeout is None:
        return plan_case(*case)
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_case_worker, args=(case, queue))
    start = time.perf_counter()
    proc.start()
    try:
        kind, payload = queue.get(timeout=timeout)
    except Exception:  # queue.Empty: the case ran out of time
        kind, payload = "dropped", f"not measured in this run: planning took more than {timeout:.0f} s on this shared 2-core machine"
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join()
    if kind == "ok":
        return payload
    model, cluster, nodes, batch = case
    return {"model": model, "cluster": cluster, "nodes": nodes, "global_batch": batch, "status": kind,
            "message": payload, "seconds": time.perf_counter() - start, "meshes": [], "knobs": "", "baselines": {},
            "speedup": None, "simulated_ms": None, "baseline_simulated_ms": None, "schedules": None}


def plan_quality(out: Path, quick: bool, case_timeout: float | None = None, only: set[str] | None = None) -> list[dict]:
    """Part 4 (and 5): every VLA/VLM preset planned and compared with both baselines; its schedule comparison.

    ``only``: measure just these models; the other cases keep their rows from ``plans.json``.
    """
    from benchmarks import schedules as schedule_bench

    cases = QUICK_PLAN_CASES if quick else PLAN_CASES
    old = {}
    if only and (out / "plans.json").exists():
        old = {(r["model"], r["cluster"], r["nodes"], r["global_batch"]): r for r in json.loads((out / "plans.json").read_text())}
    rows = []
    for case in cases:
        if only and case[0] not in only:
            if case in old:
                rows.append(old[case])
            continue
        row = run_case(case, case_timeout)
        rows.append(row)
        print(f"{row['model']:18s} {row['cluster']:13s} x{row['nodes']:<3d} {row['status']} speed-up {row['speedup']}  "
              f"({row['seconds']:.1f} s)", flush=True)
        done = rows + [old[c] for c in cases[cases.index(case) + 1:] if c in old]
        (out / "plans.json").write_text(json.dumps(done, indent=1) + "\n")  # a working state after every case
    (out / "plans.json").write_text(json.dumps(rows, indent=1) + "\n")
    _plot_plans(rows, out / "plans.png")
    entries = [r.get("schedules") or {k: r[k] for k in ("model", "cluster", "nodes", "global_batch", "status", "seconds")}
               for r in rows]
    (out / "schedules.json").write_text(json.dumps(entries, indent=1) + "\n")
    (out / "schedules.md").write_text(
        schedule_bench.to_markdown(entries, "dp", "python -m benchmarks.report --parts plans") + "\n"
    )
    return rows


def _plot_plans(rows: list[dict], path: Path) -> None:
    """Bars per case: each baseline's and the plan's simulated iteration (a missing bar: that baseline does not fit)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if r.get("simulated_ms")]
    if not ok:
        return
    series = [("megatron-uniform", lambda r: (r["baselines"].get("megatron-uniform") or {}).get("simulated_ms")),
              ("fsdp", lambda r: (r["baselines"].get("fsdp") or {}).get("simulated_ms")),
              ("partitioner plan", lambda r: r["simulated_ms"])]
    fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(ok)), 4.2))
    width = 0.27
    for k, (label, get) in enumerate(series):
        xs = [i + (k - 1) * width for i, r in enumerate(ok) if get(r)]
        ys = [get(r) / 1000 for r in ok if get(r)]
        ax.bar(xs, ys, width, label=label)
    for i, r in enumerate(ok):
        if r.get("speedup"):
            ax.annotate(f"{r['speedup']:.2f}x", (i + width, r["simulated_ms"] / 1000), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(range(len(ok))), [f"{r['model']}\n{r['nodes']}x{r['cluster']}" for r in ok], fontsize=7)
    ax.set_ylabel("simulated 1F1B iteration (s)")
    ax.legend(fontsize=8)
    ax.set_title("Iteration time: plan vs baselines (simulated); label = speed-up over the best baseline", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fmt(x, digits=1, scale=1.0, suffix=""):
    return "" if x is None else f"{x * scale:,.{digits}f}{suffix}"


# Why a target is missed, as analysed (cProfile, CP-SAT logs) when this report was written; keyed by (method, row label).
LIMITS = {
    ("cpsat", "L=64 N=32 layouts=all no transfers iteration"): (
        "the slot model's LP relaxation sees little more than total work / N, so the proven bound stays "
        "near it while the incumbent is already the optimum; turning presolve back on (it is off for "
        "OR-Tools #5274, #5293) leaves the same bound after 30 s"
    ),
    ("dp", "L=256 N=256 layouts=all no transfers iteration"): (
        "10 least-sum and 10 feasibility recursions of the threshold search; 40 % of a least-sum recursion is the "
        "self-extending \"K or more stages\" level (cProfile)"
    ),
    ("dp", "L=256 N=256 layouts=all transfers bottleneck"): (
        "one minmax recursion over 256 layers with placement states, under the ceiling of the comm-free optimum's "
        "plan; the \"K or more stages\" level reads itself, so it runs one first layer at a time, and the kernels' "
        "numpy work over (last layer, placement pair, devices) blocks is the rest (cProfile)"
    ),
}


def newer_row(out: Path, label: str, method: str) -> dict | None:
    """A row re-measured after part 1 (``issue13/solvers.json``, ``arcflow/target.json``, then
    ``arcflow/solvers.json``), if any."""
    for path in (out / "issue13" / "solvers.json", out / "arcflow" / "target.json", out / "arcflow" / "solvers.json"):
        if path.exists():
            found = next((x for x in json.loads(path.read_text()) if x["label"] == label and x["method"] == method), None)
            if found is not None:
                return found
    return None


# issue 13's solver rows: (row label, method, seconds allowed, what the issue asks)
ISSUE13_ROWS = (
    ("L=256 N=256 layouts=all no transfers iteration", "dp", 3.0, "dp, 256 layers x 256 GPUs, no transfers, iteration"),
    ("L=64 N=256 layouts=all transfers iteration", "dp", 10.0, "dp, 64 layers x 256 GPUs with transfers, iteration"),
    ("L=256 N=256 layouts=all transfers bottleneck", "dp", 60.0, "dp, 256 layers x 256 GPUs with transfers, bottleneck"),
    ("L=64 N=32 layouts=all no transfers iteration", "cpsat", 10.0, "cpsat, 64 layers x 4 x 8 GPUs, iteration"),
)
V2_TWIN = solver_bench.V2_SUFFIX
BUDGET_MB = 3 * 1024  # the 3 GiB memory budget of the targets

# What limits a missed issue-13 target, as profiled on this machine, keyed by the target's row label: every
# target was met in the last run (benchmarks/results/issue13/solvers.json), so none is listed.
ISSUE13_LIMITS: dict[str, str] = {}
# what limits a plan row over 10 s (profiled on qwen2-vl-72b, the slowest preset: 7.1 s in the last run)
PLAN_LIMIT = (
    "dp solves are most of plan's time: the two 1F1B solves (the general recursion with placement states over "
    "64 levels at m = 64, about 1.5 s each) and the re-solve under zb-h1 (a walk per k, at most as long as the "
    "1F1B solves took and at least 2 s; proving its optimum takes about 11 s on qwen2-vl-72b); the planning "
    "layer itself (cost tables, baselines, replays) is 0.2-0.6 s")


# issue 24: the v3 twins of issue 13's rows (every layout also at cp = 2 and 4, MoE layers with ep 1/2/4/8)
ISSUE24_ROWS = (
    ("L=256 N=256 layouts=all no transfers iteration", "dp", 10.0, "dp, 256 layers x 256 GPUs, no transfers, iteration"),
    ("L=64 N=256 layouts=all transfers iteration", "dp", 20.0, "dp, 64 layers x 256 GPUs with transfers, iteration"),
    ("L=64 N=32 layouts=all no transfers iteration", "cpsat", 30.0, "cpsat, 64 layers x 4 x 8 GPUs, iteration"),
)
V3_TWIN = solver_bench.V3_SUFFIX


def issue24_targets(out: Path) -> list[str]:
    """The issue-24 target table from ``issue24/solvers.json`` (``python -m benchmarks.solvers --sweeps issue24``):
    each v3 twin in its own process (time, CPU, peak memory); [] when not measured."""
    path = out / "issue24" / "solvers.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    if not rows:
        return []
    lines = ["", "## Targets (issue 24: 5D layouts, v3 twins)", "",
             "The issue-13 problems with every layout also at cp = 2 and cp = 4 (on the same devices) and every other "
             "language layer a MoE layer with ep in {1, 2, 4, 8} (`benchmarks/synthetic.py`, "
             "`synthetic_v3_problem`); each row in its own process; budget 3 GiB.", "",
             "| target | measured | met |", "|---|---|---|"]
    for label, method, limit, what in ISSUE24_ROWS:
        r = next((x for x in rows if x["label"] == label + V3_TWIN and x["method"] == method), None)
        if r is None:
            lines.append(f"| {what} (v3 twin): optimal in <= {limit:g} s | not measured | no |")
            continue
        ok = r["status"] == "optimal" and r["seconds"] <= limit and (r.get("peak_rss_mb") or 0) <= BUDGET_MB
        cpu = f", cpu {r['cpu_seconds']:.2f} s" if r.get("cpu_seconds") is not None else ""
        peak = f", peak {r['peak_rss_mb']:,.0f} MB" if r.get("peak_rss_mb") else ""
        lines.append(f"| {what} (v3 twin): optimal in <= {limit:g} s | {r['status']} in {r['seconds']:.2f} s{cpu}{peak} | "
                     f"{'yes' if ok else 'no'} |")
    lines += ["", "Reproduce: `python -m benchmarks.solvers --sweeps issue24 --methods dp,cpsat --time-limit 60 "
              "--out benchmarks/results/issue24`."]
    return lines


def issue13_targets(out: Path) -> list[str]:
    """The issue-13 target table from ``issue13/solvers.json`` (``python -m benchmarks.solvers --sweeps issue13,plan``):
    every solver target and its format-v2 twin, the comm-free cpsat problems and ``partitioner plan`` per preset;
    each row measured in its own process (time, CPU, peak memory)."""
    path = out / "issue13" / "solvers.json"
    rows = json.loads(path.read_text()) if path.exists() else []

    def find(label, method):
        return next((x for x in rows if x["label"] == label and x["method"] == method), None)

    def cell(r):
        if r is None:
            return "not measured"
        cpu = f", cpu {r['cpu_seconds']:.2f} s" if r.get("cpu_seconds") is not None else ""
        peak = f", peak {r['peak_rss_mb']:,.0f} MB" if r.get("peak_rss_mb") else ""
        return f"{r['status']} in {r['seconds']:.2f} s{cpu}{peak}"

    def met(r, limit, proven=True):
        ok = r is not None and r["seconds"] <= limit and (r.get("peak_rss_mb") or 0) <= BUDGET_MB
        return ok and (r["status"] == "optimal" if proven else r["status"] in ("optimal", "feasible"))

    lines = ["", "## Targets (issue 13: solver speed and strength)", "",
             "Every row in its own process (wall time; CPU time of the solve; peak resident memory of the process, "
             "imports included); budget 3 GiB.", "",
             "| target | measured | met | what limits it |", "|---|---|---|---|"]
    for label, method, limit, what in ISSUE13_ROWS:
        for twin in ("", V2_TWIN):
            r = find(label + twin, method)
            ok = met(r, limit)
            name = f"{what}{' (v2 twin: 3 variants, per-segment configs)' if twin else ''}"
            lines.append(f"| {name}: optimal in <= {limit:g} s | {cell(r)} | {'yes' if ok else 'no'} | "
                         f"{'' if ok else ISSUE13_LIMITS.get(label + twin, '')} |")
    free = [x for x in rows if x["sweep"] == "issue13" and x["method"] == "cpsat" and x["version"] == 1]
    if free:
        worst = max(x["seconds"] for x in free)
        proven = sum(x["status"] == "optimal" for x in free)
        ok = proven == len(free) and worst <= 60
        lines.append(f"| cpsat on {len(free)} comm-free problems, 20-72 layers, 16-64 GPUs: all proven in <= 60 s | "
                     f"{proven} of {len(free)} optimal, slowest {worst:.2f} s | {'yes' if ok else 'no'} | |")
    for r in (x for x in rows if x["sweep"] == "plan"):
        ok = met(r, 10.0, proven=False)
        lines.append(f"| `partitioner plan --model {r['model']} --cluster {r['cluster']} --nodes {r['nodes']} "
                     f"--global-batch {r['global_batch']}`: <= 10 s, peak <= 3 GiB | {cell(r)} | {'yes' if ok else 'no'} | "
                     f"{'' if ok else ISSUE13_LIMITS.get(r['label'], PLAN_LIMIT)} |")
    lines += ["", "Reproduce: `python -m benchmarks.solvers --sweeps issue13,plan --methods dp,cpsat --time-limit 60 "
              "--out benchmarks/results/issue13` (raw rows and tables in [issue13/](issue13/solvers.md))."]
    return lines


# what dp answered on the issue-28 row before its comm-free pass (commit 401f9ab, measured on this machine)
ISSUE28_BEFORE = ("before the bound-and-prune pass: the tables of 32 levels would need 5.0 GiB, so dp answered "
                  "feasible in 1.1 s with a 50 % gap and advised cpsat")


def issue28_targets(out: Path) -> list[str]:
    """The issue-28 target from ``issue28/solvers.json`` (``python -m benchmarks.solvers --sweeps issue28``): dp proves
    the VLA shape on 256 GPUs with transfers optimal within its 3 GiB default budget, in its own process."""
    path = out / "issue28" / "solvers.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    lines = ["", "## Targets (issue 28: dp at its memory budget)", "",
             "In its own process (wall time; CPU time of the solve; peak resident memory of the process, imports "
             "included); dp's default budget of 3 GiB.", "",
             "| target | measured | met | what limits it |", "|---|---|---|---|"]
    for r in (x for x in rows if x["sweep"] == "issue28"):
        stats = r.get("stats") or {}
        ok = r["status"] == "optimal" and r["seconds"] <= 60 and (r.get("peak_rss_mb") or 0) <= BUDGET_MB
        detail = (f"; {stats['states']} placement states, {stats.get('levels', '?')} of 32 levels filled, "
                  f"{stats.get('recursions', '?')} recursions" if "states" in stats else "")
        lines.append(f"| dp, {r['label']} (vision 32 / llm 192 / action 32 layers on 32 x 8 GPUs): optimal in <= 60 s, "
                     f"peak <= 3 GiB | {r['status']} in {r['seconds']:.2f} s, cpu {r['cpu_seconds']:.2f} s, peak "
                     f"{r['peak_rss_mb']:,.0f} MB, load {r['load_average']:.1f}{detail} | {'yes' if ok else 'no'} | "
                     f"{'' if ok else ISSUE28_BEFORE} |")
    if rows:
        lines += ["", f"For comparison, {ISSUE28_BEFORE}. Reproduce: `python -m benchmarks.solvers --sweeps issue28 "
                  "--methods dp --time-limit 60 --out benchmarks/results/issue28` "
                  "([issue28/](issue28/solvers.md))."]
    return lines


# what dp answered on the issue-34 rows before (issue 34's own measurements, and this machine's at commit daf5bd7)
ISSUE34_BEFORE = {
    "L=128 N=1024": "before: the tables needed 26.8 GiB (148 placement states), so dp stopped at its budget",
    "no transfers iteration 5D": "before: 15.3 s at load 1.0 (every recursion rebuilt the stage matrices of 32 "
                                 "stashes; issue 34 measured feasible after 152 s at load 6); cpu 6.95 / 6.43 s "
                                 "before the batched stage fits and the level's early stop, 6.37 / 5.93 s after "
                                 "(alternating runs at load 5-7)",
    "N=256 m=32 transfers iteration 5D": "before: 6.3 s at load 1.5 (issue 34 measured 49 s at load 6)",
    "cpsat": "before: no plan in 600 s (the greedy heuristic finds none, so CP-SAT had no hint)",
}
ISSUE34_PLANS = (  # (label fragment, target words, seconds, what is asked: "proof", "bound" or "cpu")
    ("llama-3-70b on 2048", "a Llama-3-70B config on 16,384 H100 planned in <= 120 s, a bound within 5 %", 120.0,
     "bound"),
    ("qwen3-vl-235b-a22b on 128", "Qwen3-VL-235B on 1,024 B200 proven optimal in <= 120 s", 120.0, "proof"),
    ("glm-4.5v on 128", "the default plan (no --time-limit) of GLM-4.5V on 1,024 H100 in <= 30 s CPU", 30.0, "cpu"),
)
ISSUE34_PLAN_LIMITS = {
    "qwen3-vl-235b-a22b on 128": "the proof itself: the kept candidate's exact zb-h1 solve (124 layers, m = 64, "
                                 "64 levels, warm start 1,380.8 ms) alone is optimal at 1,096.1 ms in 102 CPU s (206 s "
                                 "wall at load 8.5; 168 recursions with every transfer at its least, one k walked "
                                 "with placement states); in the plan it gets what the search over every plan "
                                 "leaves of its half of the limit (13 s at load 8). Before: the solve walked k = "
                                 "10..57 and was cut after 300 s with a 20 % gap",
    "glm-4.5v on 128": "the screening: 12 microbatch counts, each problem built (about 3.5 CPU s a count: the "
                       "MoE entries and the document's parse) and its Megatron baselines enumerated, before any "
                       "solve; then the schedules' re-solves, the exact solve's budget and three target runs of "
                       "at least 10 s each",
}
ISSUE34_TARGETS = (  # (row label fragment, method, seconds, what the target asks)
    ("L=128 N=1024", "dp", None, "dp, 128 layers x 1,024 GPUs with transfers, iteration: optimal within the default 3 GiB"),
    ("N=256 m=32 no transfers iteration 5D", "dp", 10.0, "dp, VLA 256 layers x 256 GPUs, 5D keys, no transfers: optimal "
                                                         "in <= 10 s (quiet machine)"),
    ("N=256 m=32 no transfers iteration", "dp", None, "the same problem's 2D twin (layouts without cp and ep)"),
    ("N=256 m=32 transfers iteration 5D", "dp", 20.0, "dp, VLA 64 layers x 256 GPUs, 5D keys, with transfers: optimal "
                                                      "in <= 20 s (quiet machine)"),
    ("N=256 m=32 transfers iteration", "dp", None, "the same problem's 2D twin"),
    ("L=32 N=256", "cpsat", 60.0, "cpsat, 32 layers x 256 GPUs with transfers: a plan (60 s limit)"),
)


def issue34_targets(out: Path) -> list[str]:
    """The issue-34 solver targets from ``issue34/solvers.json`` (``python -m benchmarks.solvers --sweeps issue34``)
    and ``issue34/startup.json`` (``python -m benchmarks.startup --out benchmarks/results/issue34``)."""
    path = out / "issue34" / "solvers.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    if not rows:
        return []
    lines = ["", "## Targets (issue 34: solvers at scale)", "",
             "Each row in its own process (wall time; CPU time of the solve or command; peak resident memory of the "
             "process, imports included; the load average when it ended: 2 cores shared with other work, so wall "
             "times are longer than on a quiet machine). dp's default budget of 3 GiB. The targets timed \"on a "
             "quiet machine\" are judged by the solve's CPU seconds (every thread's: on a quiet machine the wall "
             "time is no longer, the dp's threads run side by side).", "",
             "| target | measured | met | before / what limits it |", "|---|---|---|---|"]
    used: set[int] = set()
    for fragment, method, seconds, words in ISSUE34_TARGETS:
        found = next((k for k, r in enumerate(rows) if k not in used and r["sweep"] == "issue34"
                      and r["method"] == method and fragment.split(" 5D")[0] in r["label"]
                      and (" 5D" in fragment) == ("5D" in r["label"])), None)
        if found is None:
            continue
        used.add(found)
        r = rows[found]
        stats = r.get("stats") or {}
        ok = r["value"] is not None if method == "cpsat" else (
            r["status"] == "optimal" and (r.get("peak_rss_mb") or 0) <= BUDGET_MB
            and (seconds is None or r["cpu_seconds"] <= seconds))
        extra = (f"; {stats['states']} placement states, {stats.get('recursions', '?')} recursions"
                 if "states" in stats else f"; hint: {stats['hint']}" if "hint" in stats else "")
        bound = f", bound {r['bound']:,.1f}" if method == "cpsat" and r.get("bound") is not None else ""
        before = next((v for k, v in ISSUE34_BEFORE.items()
                       if (k == "cpsat" and method == k) or k.split(" 5D")[0] in r["label"]
                       and (" 5D" in k) == ("5D" in r["label"])), "")
        lines.append(f"| {words} | {r['status']} in {r['seconds']:.2f} s, cpu {r['cpu_seconds']:.2f} s, peak "
                     f"{r['peak_rss_mb']:,.0f} MB, load {r['load_average']:.1f}{bound}{extra} | "
                     f"{'yes' if ok else 'no'} | {before} |")
    for fragment, words, seconds, asked in ISSUE34_PLANS:
        r = next((x for x in rows if x["sweep"] == "issue34-plan" and fragment in x["label"]), None)
        if r is None:
            continue
        gap = r["message"].split("(gap ")[1].split(" %")[0] if "(gap " in r["message"] else None
        planned = r["status"] in ("optimal", "feasible")
        ok = {"proof": r["seconds"] <= seconds and r["status"] == "optimal",
              "bound": r["seconds"] <= seconds and planned and gap is not None and float(gap) <= 5,
              "cpu": r["cpu_seconds"] <= seconds and planned}[asked]
        lines.append(f"| {words}: `{r['label']}` | {r['status']} in {r['seconds']:.1f} s, cpu {r['cpu_seconds']:.1f} s, "
                     f"peak {r['peak_rss_mb']:,.0f} MB, load {r['load_average']:.1f}; {r['message']} | "
                     f"{'yes' if ok else 'no'} | {'' if ok else ISSUE34_PLAN_LIMITS.get(fragment, '')} |")
    startup = out / "issue34" / "startup.json"
    if startup.exists():
        lines += ["", "Start-up (`python -m benchmarks.startup --repeat 7 --out benchmarks/results/issue34`, after "
                  "`partitioner warmup`): Alpa's 64-layer 4 x 8 GPU cases, the median `solve_seconds` of fresh "
                  "`partitioner solve` processes against the same solve inside a running process, each fresh one "
                  "paired with an in-process solve right after it, under the same load (target: within 1.5 x); "
                  "and, in CPU seconds, a fresh process's first solve through the API against its second.", "",
                  "| case | in-process solve s | fresh process: solve s | its wall s | its CPU s | ratio | met | "
                  "CPU s: first solve / second | load |", "|---|---|---|---|---|---|---|---|---|"]
        for r in json.loads(startup.read_text()):
            cpu = (f"{r['first_solve_cpu_s']:.4f} / {r['second_solve_cpu_s']:.4f} ({r['cpu_ratio']:.2f} x)"
                   if "cpu_ratio" in r else "")
            lines.append(f"| {r['case']} | {r['in_process_s']:.3f} | {r['fresh_solve_s']:.3f} | {r['fresh_wall_s']:.2f} "
                         f"| {r['fresh_cpu_s']:.2f} | {r['ratio']:.2f} | {'yes' if r['ratio'] <= 1.5 else 'no'} | "
                         f"{cpu} | {r['load']:.1f} |")
    lines += ["", "Reproduce: `python -m benchmarks.solvers --sweeps issue34 --methods dp,cpsat --time-limit 60 --out "
              "benchmarks/results/issue34` ([issue34/](issue34/solvers.md)); the four VLA rows alone, the others "
              "kept: `python -m benchmarks.solvers --sweeps issue34 --labels VLA --methods dp --time-limit 60 --out "
              "benchmarks/results/issue34 --merge`; the Qwen3-VL-235B and GLM-4.5V plan rows alone: `python -m "
              "benchmarks.solvers --sweeps issue34 --labels qwen3-vl-235b-a22b,glm-4.5v --methods dp --out "
              "benchmarks/results/issue34 --merge`."]
    return lines


def issue25_targets(out: Path) -> list[str]:
    """The issue-25 and issue-27 targets from ``issue25/solvers.json`` (``python -m benchmarks.solvers --sweeps
    plan,issue25``): ``partitioner plan`` at its default settings on every preset, in a process of its own --
    the new presets' plans fit within 30 s (issue 25), and each plan answers ``optimal`` or says what was cut
    short (issue 27)."""
    path = out / "issue25" / "solvers.json"
    rows = [r for r in (json.loads(path.read_text()) if path.exists() else []) if r["sweep"] in ("plan", "issue25")]
    if not rows:
        return []
    lines = ["", "## Targets (issues 25 and 27: `plan` on every preset at its default settings)", "",
             "`partitioner plan --model M --cluster C --nodes N --global-batch B --json`, in a process of its own "
             "(wall time, imports included; the machine's load average when it ended). *fits*: the replayed plan "
             "keeps every stage within its GPU memory. Issue 25's target: each new preset plans and fits in <= 30 s; "
             "issue 27's: the plan answers `optimal` in <= 30 s, or says which part was cut short (the result's "
             "message).", "",
             "| preset | new (issue 25) | status | seconds | fits | load | met |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        fits = "every stage fits" in r["message"]
        new = r["sweep"] == "issue25"
        ok = r["status"] in ("optimal", "feasible") and fits and r["seconds"] <= 30
        lines.append(f"| {r['label']} | {'yes' if new else ''} | {r['status']} ({r['message']}) | {r['seconds']:.1f} "
                     f"| {'yes' if fits else 'no'} | {r['load_average']:.1f} | {'yes' if ok else 'no'} |")
    lines += ["", "Reproduce: `python -m benchmarks.solvers --sweeps plan,issue25 --methods dp --out "
              "benchmarks/results/issue25` ([issue25/](issue25/solvers.md))."]
    return lines


def kept_schedule(row: dict) -> str:
    """The schedule (and v) of the candidate ``plan`` kept: the fastest simulated plan or solved row."""
    rows = [x for x in ((row.get("schedules") or {}).get("rows") or [])
            if x.get("ok") and x.get("plan_source") in ("plan", "solved") and x.get("iteration_ms") is not None]
    if not rows:
        return ""
    best = min(rows, key=lambda x: x["iteration_ms"])
    return best["schedule"] + (f" v={best['virtual_stages']}" if best.get("virtual_stages", 1) > 1 else "")


def _limit(method: str, record: dict) -> str:
    if record["status"] == "error":
        return record.get("message", "")
    return LIMITS.get((method, record["label"]), "")


def _speedup_cell(row: dict) -> str:
    if row["speedup"] is not None:
        return _fmt(row["speedup"], 3, suffix=" x")
    return f"no baseline: {row.get('baseline_message') or 'none found'}"


def _base_cell(b: dict | None) -> str:
    """A baseline's simulated iteration, or why none fits."""
    if not b:
        return ""
    if b.get("simulated_ms") is None and b.get("iteration_ms") is None:
        return f"does not fit ({b.get('message') or 'no plan'})"
    ms = b["simulated_ms"] if b.get("simulated_ms") is not None else b["iteration_ms"]
    return f"{_fmt(ms)} ({' '.join(map(_short_mesh, b.get('meshes') or []))}; {b.get('knobs', '')}; m {b.get('microbatches')})"


def _stages_text(r: dict) -> str:
    """``16:16x1 (vision) + 16:16x1 (projector, llm)``: each stage's mesh and, when recorded, its modules."""
    mods = r.get("stage_modules") or []
    return " + ".join(
        _short_mesh(m) + (f" ({', '.join(mods[i])})" if i < len(mods) else "") for i, m in enumerate(r["meshes"])
    )


def _best_meshes(r: dict) -> list[str]:
    return list(map(_short_mesh, (r["baselines"].get(r.get("baseline_method")) or {}).get("meshes") or []))


def _names(what: str, rows: list[dict]) -> str:
    return f"{what} ({', '.join(r['model'] for r in rows)})" if rows else ""


def _plan_findings(plans: list[dict]) -> list[str]:
    """What the measured rows say about where the planner gains, computed from them (no fixed numbers)."""
    ok = [r for r in plans if r.get("speedup") is not None]
    if not ok:
        return []
    small = [r for r in ok if r["speedup"] < 1.05]
    large = [r for r in ok if r["speedup"] >= 1.05]
    one_stage = [r for r in small
                 if len((r["baselines"].get(r.get("baseline_method")) or {}).get("meshes") or []) == 1]
    tp1 = [r for r in small if all(m.endswith("x1") for m in r["meshes"])]
    small_list = ", ".join(f"{r['model']} {r['speedup']:.3f} x" for r in small) or "none"
    text = (
        f"**Where the planner finds little to gain.** On {len(small)} of {len(ok)} measured cases the plan is less "
        f"than 5 % faster than the best baseline ({small_list}). On {len(one_stage)} of these {len(small)} the best "
        "baseline is a single stage, i.e. plain data parallelism over all GPUs with ZeRO-1 (and recompute where "
        "needed): with those knobs the whole model fits in memory at these batch sizes, so there is no memory "
        f"pressure for a pipeline to relieve, and {len(tp1)} of the {len(small)} plans also keep tp = 1 everywhere. "
        "What a plan can still change is worth a few percent at most here: "
        + "; ".join(part for part in (
            _names("more pipeline stages on fewer GPUs each than the baseline, so each stage's gradient "
                   "synchronisation spans fewer GPUs and nodes", [r for r in small if len(r["meshes"]) > len(_best_meshes(r))]),
            _names("the baseline's meshes with other cuts (better balanced stages)",
                   [r for r in small if r["speedup"] > 1.0005 and list(map(_short_mesh, r["meshes"])) == _best_meshes(r)]),
            _names("no gain (the plan has the baseline's layout)", [r for r in small if r["speedup"] <= 1.0005]),
        ) if part) + "."
    )
    if large:
        text += " More is gained where the model's parts differ most: " + "; ".join(
            f"{r['model']} on {r['nodes']} x {r['cluster']}, batch {r['global_batch']}: {r['speedup']:.3f} x, "
            f"plan {_stages_text(r)} against {r['baseline_method']} "
            f"{' '.join(map(_short_mesh, (r['baselines'].get(r['baseline_method']) or {}).get('meshes') or []))}"
            for r in large
        ) + "."
    return [text, ""]


def issue32_targets(runs: dict[str, Any] | None) -> list[str]:
    """Issue 32's targets on the published MoE / long-context runs (benchmarks.calibration.runs): per split and
    regime, median <= 0.10 and worst <= 0.25 abs(ln predicted/published); at most one flipped pair per family."""
    if not runs:
        return []
    lines = []
    for split in ("calibration", "holdout"):
        for regime, v in runs["summary"].get(split, {}).items():
            if regime == "all":
                continue
            met = v["median_abs_ln_ratio"] <= 0.10 and v["worst_abs_ln_ratio"] <= 0.25
            lines.append(
                f"| issue 32: published {regime} runs ({split}, {v['rows']} rows), layout forced, median / worst "
                f"abs(ln) <= 0.10 / 0.25 | {v['median_abs_ln_ratio']:.3f} / {v['worst_abs_ln_ratio']:.3f} "
                f"({v['worst_row']}) | {'yes' if met else 'no'} | |")
    for f in runs["families"]:
        met = len(f["flipped"]) <= 1
        lines.append(f"| issue 32: family {f['family']}, predicted order as measured (<= 1 flipped pair) | "
                     f"{len(f['flipped'])} of {f['pairs']} flipped | {'yes' if met else 'no'} | |")
    return lines


def write_report(out: Path, quick: bool) -> Path:
    solvers = json.loads((out / "solvers.json").read_text()) if (out / "solvers.json").exists() else []
    throughput = json.loads((out / "throughput.json").read_text()) if (out / "throughput.json").exists() else {}
    plans = json.loads((out / "plans.json").read_text()) if (out / "plans.json").exists() else []
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# partitioner benchmark report",
        "",
        f"Made by `python -m benchmarks.report{' --quick' if quick else ''}` on {now}, partitioner {__version__} "
        f"(commit {throughput_bench.machine()['commit'] or 'unknown'}).",
        f"Machine: {solver_bench.machine()}. Every figure below was measured on this machine; times are wall-clock "
        "unless said otherwise.",
        "",
        "## Targets (issue 3 and 6)",
        "",
        "| target | measured | met | what limits it |",
        "|---|---|---|---|",
    ]
    for label, method, limit in (
        ("L=64 N=32 layouts=all no transfers iteration", "dp", 1.0),
        ("L=64 N=32 layouts=all no transfers iteration", "cpsat", 10.0),
        ("L=256 N=256 layouts=all no transfers bottleneck", "dp", 10.0),
        ("L=256 N=256 layouts=all no transfers iteration", "dp", 10.0),
        ("L=256 N=256 layouts=all transfers bottleneck", "dp", 10.0),
    ):
        r = newer_row(out, label, method) or next((x for x in solvers if x["label"] == label and x["method"] == method), None)
        if r is None:
            continue
        proven = r["status"] == "optimal"
        met = proven and r["seconds"] <= limit
        gap = ""
        if not proven and r.get("bound") is not None and r.get("value"):
            gap = f", gap {100 * (r['value'] - r['bound']) / r['value']:.1f} %"
        lines.append(
            f"| {method} on {label}: proven optimum in <= {limit:g} s | {r['status']} in {r['seconds']:.2f} s{gap} | "
            f"{'yes' if met else 'no'} | {'' if met else _limit(method, r)} |"
        )
    dp_rate = (throughput.get("methods") or {}).get("dp")
    if dp_rate:
        rate = dp_rate.get("problems_per_hour_per_core")
        lines.append(
            f"| batch: >= 1,000 64-layer problems / hour / core (dp) | {_fmt(rate, 0)} | "
            f"{'yes' if rate and rate >= 1000 else 'no'} | |"
        )
    lines += issue13_targets(out)
    lines += issue24_targets(out)
    calibration = json.loads((out / "calibration.json").read_text()) if (out / "calibration.json").exists() else None
    if calibration:
        cs = calibration["summary"]
        met = cs["median_abs_ln_ratio"] <= 0.05 and cs["worst_abs_ln_ratio"] <= 0.15
        lines.append(
            f"| issue 26: SC'21 Table 1 as published, median / worst abs(ln predicted/published) <= 0.05 / 0.15 | "
            f"{cs['median_abs_ln_ratio']:.3f} / {cs['worst_abs_ln_ratio']:.3f} ({cs['worst_row']}) | {'yes' if met else 'no'} | |"
        )
        second = calibration.get("mlsys23")
        if second:
            ms = second["summary"]
            met = ms["median_abs_ln_ratio"] <= 0.05 and ms["worst_abs_ln_ratio"] <= 0.15
            lines.append(
                "| issue 26: Korthikanti et al. (MLSys'23) Table 5 as published, the same targets (no constant fitted) | "
                f"{ms['median_abs_ln_ratio']:.3f} / {ms['worst_abs_ln_ratio']:.3f} ({ms['worst_row']}) | "
                f"{'yes' if met else 'no'} | |"
            )
        lines += issue32_targets(calibration.get("published_runs"))
    first_run = out / "first_run.md"  # python -m benchmarks.first_run (a fresh clone, an empty cache, under load)
    if first_run.exists():
        lines += ["", *first_run.read_text().splitlines()]
    lines += issue28_targets(out)
    lines += issue34_targets(out)
    lines += issue25_targets(out)
    lines += targets_bench.section_lines(out)  # issue 27: plan --target T, export --to T, the framework's check
    lines += [
        "",
        "## 1. Solver time scaling",
        "",
        "Full tables: [solvers.md](solvers.md).",
        "",
        "![solver time against problem size](solvers.png)",
        "",
        "## 2. Batch throughput",
        "",
        "Full table: [throughput.md](throughput.md).",
        "",
    ]
    if throughput:
        lines += ["| method | problems/hour/core | problems/CPU-hour | statuses |", "|---|---|---|---|"]
        for name, m in throughput.get("methods", {}).items():
            statuses = ", ".join(f"{k} {v}" for k, v in sorted(m.get("statuses", {}).items()))
            lines.append(
                f"| {name} | {_fmt(m.get('problems_per_hour_per_core'), 0)} | "
                f"{_fmt(m.get('problems_per_cpu_hour'), 0)} | {statuses} |"
            )
        lines.append("")
    lines += [
        "## 3. Solver quality over presets x clusters x batch sizes",
        "",
        "Per-method summary, per-problem table and performance profile: [presets_compare.md](presets_compare.md).",
        "",
        "![performance profile](presets_profile.png)",
        "",
        "## 4. Plan quality: planned iteration time vs the baselines",
        "",
        "`partitioner.plan_model` (method `dp`, m by `auto`, memory knobs per stage and segment) against the two",
        "plans an engineer would otherwise run, each the best over its own choices and all memory knobs:",
        "*megatron-uniform* (vision encoder on stage 0, decoder layers split evenly, one (dp, tp) layout and one knob",
        "setting for every stage, best over stage counts, layouts and m) and *fsdp* (one stage, dp = all GPUs, ZeRO-3).",
        "Iterations are simulated under the schedule each keeps: `plan` keeps the fastest simulated of its candidates",
        "under 1F1B, ZB-H1, GPipe and interleaved (column *schedule*; part 5 lists them), a baseline cell is the best",
        "of that baseline under any schedule. Speed-up = best fitting baseline / plan.",
        "Knobs: Z*k* = ZeRO stage, +rs / +rf = selective / full activation recompute; per stage, segments joined by",
        "`/`, stages by ` · `, *n*x = n equal stages in a row. A baseline cell: simulated ms (stages; knobs; m).",
        "*Planning time* is that of the run that measured the row (in-process `plan_model`; `commit` in plans.json when",
        "recorded); the issue-13 table above has `partitioner plan`'s time per preset as measured with this report.",
        "",
        "| model | cluster, batch | plan: stages (GPUs:dp x tp) | m | schedule | plan ms | megatron-uniform ms | fsdp ms | best baseline | speed-up | plan knobs | planning time |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in plans:
        if r["status"] in ("dropped", "error"):
            lines.append(f"| {r['model']} | {r['nodes']} x {r['cluster']}, {r['global_batch']} | {r['status']}: {r['message']} "
                         f"| | | | | | | | | {r['seconds']:.0f} s |")
            continue
        bases = r.get("baselines") or {}
        lines.append(
            f"| {r['model']} | {r['nodes']} x {r['cluster']}, {r['global_batch']} | {' '.join(map(_short_mesh, r['meshes'])) or r['status']} | "
            f"{r['microbatches']} | {kept_schedule(r)} | {_fmt(r['simulated_ms'])} | {_base_cell(bases.get('megatron-uniform'))} | "
            f"{_base_cell(bases.get('fsdp'))} | {r.get('baseline_method') or 'none fits'} | {_speedup_cell(r)} | "
            f"{r.get('knobs', '')} | {r['seconds']:.0f} s |"
        )
    lines += ["", "![planned vs baselines](plans.png)", ""]
    lines += _plan_findings(plans)
    lines += [
        "## 5. Schedules",
        "",
        "The candidates `plan_model` weighs per case (`partitioner.planning.schedules.choice`, its `schedules` entry): *plan* =",
        "the 1F1B plan replayed under each plain schedule, *solved* = the method re-run under each schedule it models,",
        "*baseline* = the Megatron-style uniform split under every schedule (interleaved v = 2, 3, 4), *fsdp*; the",
        "fastest simulated *plan* or *solved* row is kept. Measured in the same run as part 4 and also written to",
        "[schedules.md](schedules.md).",
        "",
    ]
    sched = out / "schedules.md"
    if sched.exists():
        body = sched.read_text().splitlines()
        # drop its title and preamble (up to the first case); demote its case headings one level
        first = next((i for i, line in enumerate(body) if line.startswith("## ")), len(body))
        lines += [("#" + line) if line.startswith("## ") else line for line in body[first:]]
    lines.append("")
    cal = out / "calibration.md"
    if cal.exists():
        body = cal.read_text().splitlines()
        lines += ["## 6. " + body[0].lstrip("# "), ""] + [("#" + line) if line.startswith("## ") else line for line in body[1:]]
        lines.append("")
    limits = out / "limits.md"
    if limits.exists():  # python -m benchmarks.limits (issue 35): time limits held, measured under load
        body = limits.read_text().splitlines()
        lines += ["## 7. " + body[0].lstrip("# "), ""] + body[1:]
        lines.append("")
    path = out / "REPORT.md"
    path.write_text("\n".join(lines))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small versions of every part")
    parser.add_argument("--reuse", action="store_true", help="only rebuild REPORT.md from existing results")
    parser.add_argument("--time-limit", type=float, default=30.0, help="per solve, for the limited methods")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--cases", default="", help="plans: comma-separated models to re-measure; the other cases keep their rows"
    )
    parser.add_argument(
        "--case-timeout", type=float, default=None,
        help="plans: give up a case after this many seconds (the row says so); default: no limit",
    )
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)} to (re)measure"
    )
    args = parser.parse_args(argv)
    parts = {part.strip() for part in args.parts.split(",") if part.strip()}
    if parts - set(PARTS):
        parser.error(f"unknown part(s) {', '.join(sorted(parts - set(PARTS)))}; choose from {', '.join(PARTS)}")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if not args.reuse:
        quick = ["--quick"] if args.quick else []
        if "solvers" in parts:
            solver_bench.main(quick + ["--time-limit", str(args.time_limit), "--out", str(out)])
        if "throughput" in parts:
            throughput_bench.main(
                (["--count", "2", "--methods", "dp,greedy"] if args.quick else ["--count", "16"])
                + ["--time-limit", str(args.time_limit), "--out", str(out)]
            )
        if "presets" in parts:
            preset_quality(out, args.quick, args.time_limit)
        if "plans" in parts:
            only = {c.strip() for c in args.cases.split(',') if c.strip()} or None
            plan_quality(out, args.quick, args.case_timeout, only)
        if "calibration" in parts:
            calibration_bench.main(["--out", str(out)])
        if "issue13" in parts and not args.quick:
            solver_bench.main(["--sweeps", "issue13,plan", "--methods", "dp,cpsat", "--time-limit", "60",
                               "--out", str(out / "issue13")])
        if "issue25" in parts and not args.quick:
            solver_bench.main(["--sweeps", "plan,issue25", "--methods", "dp", "--out", str(out / "issue25")])
        if "targets" in parts:
            targets_bench.main((["--quick"] if args.quick else []) + ["--time-limit", f"{TARGETS_TIME_LIMIT:g}",
                                                                      "--out", str(out)])
        if "issue28" in parts and not args.quick:
            solver_bench.main(["--sweeps", "issue28", "--methods", "dp", "--time-limit", "60",
                               "--out", str(out / "issue28")])
        if "issue34" in parts and not args.quick:
            solver_bench.main(["--sweeps", "issue34", "--methods", "dp,cpsat", "--time-limit", "60",
                               "--out", str(out / "issue34")])
            startup_bench.main(["--repeat", "7", "--out", str(out / "issue34")])
    print(f"wrote {write_report(out, args.quick)}")


if __name__ == "__main__":
    main()
