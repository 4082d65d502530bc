"""Batch throughput: problems per hour per core on seeded 64-layer problems.

Generates ``--count`` synthetic VLA-shaped problems (:mod:`benchmarks.synthetic`;
default 64 layers on 4 nodes x 8 GPUs, every layout the cluster allows,
transfers on, tight memory), then for each method runs them as one batch
sweep through :func:`partitioner.batch.run_jobs` on all cores -- worker
processes, results file, fsync per record, exactly as ``partitioner batch``
does -- and reports

* **problems / hour / core**: jobs finished / elapsed hours / cores used,
  the elapsed time including process start-up and dispatch;
* **problems / CPU-hour**: 3600 / the mean CPU seconds of a job (all its
  threads; parsing, solving and evaluating the plan) -- what a machine with
  no other load would reach per core, minus dispatch;
* the per-job wall time (mean, median, max) and statuses;
* the gap to the best value any method found on the same problem, from
  :func:`partitioner.batch.compare.compare`.

Writes ``throughput.md`` and ``throughput.json`` into ``--out`` (default
``benchmarks/results``), stating the machine and the date. Run from the
repository root::

    python -m benchmarks.throughput                 # all methods but brute
    python -m benchmarks.throughput --methods dp,greedy --count 8
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.synthetic import synthetic_problem  # noqa: E402
from partitioner import __version__, methods  # noqa: E402
from partitioner.batch import available_cores, make_jobs, read_results, run_jobs  # noqa: E402
from partitioner.batch.compare import compare  # noqa: E402

TARGET_PER_HOUR_PER_CORE = 1000.0
DEFAULT_METHODS = ("cpsat", "milp", "dp", "greedy", "uniform", "balanced")  # brute cannot take 64 layers
ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, Any]:
    """The machine and software the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    try:
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        memory_gb = None
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        load = None
    return {
        "cpu": cpu,
        "load_average": load,  # 1, 5, 15 min: other work on the machine slows every figure
        "cores": available_cores(),
        "memory_gb": round(memory_gb, 1) if memory_gb else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "partitioner": __version__,
        "commit": commit,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def run_throughput(
    *,
    count: int = 8,
    layers: int = 64,
    nodes: int = 4,
    gpus_per_node: int = 8,
    layouts: int | None = None,
    transfers: bool = True,
    objective: str = "iteration",
    method_list: Sequence[str] | None = None,
    workers: int | None = None,
    time_limit: float = 600.0,
    work_dir: Path | None = None,
) -> dict[str, Any]:
    """Run the throughput benchmark; return the report document (see the module docstring)."""
    host = machine()  # before the run: the load average then says what else was running
    available = methods()
    method_list = [m for m in (method_list or DEFAULT_METHODS) if m in available]
    if not method_list:
        raise SystemExit(f"none of the methods is registered (available: {', '.join(available)})")
    work_dir = Path(work_dir or Path(tempfile.gettempdir()) / "partitioner-bench" / "throughput")
    if work_dir.exists():
        shutil.rmtree(work_dir)  # every run measures from scratch: no resumed jobs
    work_dir.mkdir(parents=True)
    problems = [
        synthetic_problem(layers, nodes, gpus_per_node, layouts, transfers, seed=seed, objective=objective)
        for seed in range(count)
    ]
    cores = available_cores()
    per_method: dict[str, Any] = {}
    all_records: list[dict[str, Any]] = []
    for method in method_list:
        jobs = [job for p in problems for job in make_jobs(p, p.name, [method], time_limit=time_limit)]
        out = work_dir / f"{method}.jsonl"
        print(f"{method}: {len(jobs)} problems ...", file=sys.stderr, flush=True)
        start = time.monotonic()
        summary = run_jobs(jobs, out, workers=workers)
        elapsed = time.monotonic() - start
        records = read_results(out)
        all_records.extend(records)
        used = summary.workers * summary.threads
        walls = [r["wall_seconds"] for r in records]
        cpus = [r["cpu_seconds"] for r in records if r.get("cpu_seconds") is not None]
        per_method[method] = {
            "jobs": len(records),
            "statuses": dict(summary.statuses),
            "elapsed_seconds": elapsed,
            "workers": summary.workers,
            "threads_per_job": summary.threads,
            "cores_used": used,
            "problems_per_hour_per_core": len(records) / (elapsed / 3600) / used,
            "job_seconds_mean": statistics.fmean(walls),
            "job_seconds_median": statistics.median(walls),
            "job_seconds_max": max(walls),
            "job_cpu_seconds_mean": statistics.fmean(cpus) if cpus else None,
            # CPU time does not grow when other programs share the cores: the rate a quiet machine would see
            "problems_per_cpu_hour": 3600 / statistics.fmean(cpus) if cpus and statistics.fmean(cpus) > 0 else None,
        }
        print(
            f"{method}: {per_method[method]['problems_per_hour_per_core']:.0f} problems/hour/core "
            f"({elapsed:.1f} s for {len(records)} on {used} cores)",
            file=sys.stderr,
            flush=True,
        )
    quality = compare(all_records)
    for method, stats in quality.methods.items():
        per_method[method].update(
            solved=stats.solved, optimal=stats.optimal, mean_gap=stats.mean_gap, max_gap=stats.max_gap
        )
    return {
        "benchmark": "throughput",
        "machine": host,
        "cores": cores,
        "problems": {
            "count": count,
            "layers": layers,
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "layouts": list(problems[0].meta["layouts"]) if problems else [],
            "layouts_per_size": layouts,
            "transfers": transfers,
            "objective": objective,
            "microbatches": problems[0].microbatches if problems else None,
            "time_limit": time_limit,
            "generator": "benchmarks.synthetic.synthetic_problem, seeds 0..count-1",
        },
        "target_problems_per_hour_per_core": TARGET_PER_HOUR_PER_CORE,
        "methods": per_method,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else ("0" if x == 0 else f"{100 * x:.2f} %")


def to_markdown(doc: dict[str, Any]) -> str:
    m, p = doc["machine"], doc["problems"]
    lines = [
        "# Batch throughput",
        "",
        f"Measured {m['date']} on {m['cpu']} ({m['cores']} cores available"
        + (f", {m['memory_gb']} GB RAM" if m.get("memory_gb") else "")
        + f"), {m['platform']}, Python {m['python']}, partitioner {m['partitioner']}"
        + (f" (commit {m['commit']})" if m.get("commit") else "")
        + "."
        + (f" Load average before the run: {' / '.join(map(str, m['load_average']))} (1 / 5 / 15 min)." if m.get("load_average") else ""),
        "",
        f"Problems: {p['count']} seeded synthetic VLA-shaped problems ({p['generator']}), "
        f"{p['layers']} layers on {p['nodes']} x {p['gpus_per_node']} GPUs, {len(p['layouts'])} layouts per layer, "
        f"transfers {'on' if p['transfers'] else 'off'}, m = {p['microbatches']}, objective {p['objective']}, "
        f"time limit {p['time_limit']:g} s per job. Each method runs as one batch sweep on all cores "
        "(`partitioner.batch`: worker processes, one fsynced JSON line per job); *problems/hour/core* is "
        "jobs / elapsed hours / cores used, start-up and dispatch included; *problems/CPU-hour* is 3600 / the "
        "mean CPU seconds of a job, which other load on the machine does not inflate. "
        f"Target: >= {doc['target_problems_per_hour_per_core']:,.0f} problems/hour/core.",
        "",
        "| method | problems/hour/core | target met | problems/CPU-hour | jobs | statuses "
        "| job time mean / median / max (s) | cores x threads | mean gap | max gap |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in doc["methods"].items():
        rate = s["problems_per_hour_per_core"]
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(s["statuses"].items()))
        cpu_rate = s.get("problems_per_cpu_hour")
        lines.append(
            f"| {name} | {rate:,.0f} | {'yes' if rate >= doc['target_problems_per_hour_per_core'] else 'no'} "
            f"| {'-' if cpu_rate is None else f'{cpu_rate:,.0f}'} | {s['jobs']} | {statuses} | {s['job_seconds_mean']:.3g} / {s['job_seconds_median']:.3g} / "
            f"{s['job_seconds_max']:.3g} | {s['workers']} x {s['threads_per_job']} | {_pct(s.get('mean_gap'))} "
            f"| {_pct(s.get('max_gap'))} |"
        )
    lines += [
        "",
        "Gaps are to the best value any listed method found on the same problem "
        "(`partitioner.batch.compare`); a method that proves optimality has gap 0 wherever it finished.",
        "",
        "Reproduce: `python -m benchmarks.throughput "
        + f"--count {p['count']} --layers {p['layers']} --nodes {p['nodes']} --gpus-per-node {p['gpus_per_node']} "
        + (f"--layouts {p['layouts_per_size']} " if p.get("layouts_per_size") else "")
        + ("" if p["transfers"] else "--no-transfers ")
        + f"--objective {p['objective']} --time-limit {p['time_limit']:g} --methods {','.join(doc['methods'])}`",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=8, help="problems (seeds 0..count-1)")
    parser.add_argument("--layers", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--layouts", type=int, default=None, help="layouts per stage size (default: all)")
    parser.add_argument("--no-transfers", action="store_true")
    parser.add_argument("--objective", default="iteration", choices=("iteration", "bottleneck"))
    parser.add_argument("--methods", default=None, help="comma-separated (default: every registered method but brute)")
    parser.add_argument("--workers", type=int, default=None, help="concurrent jobs (default: the cores)")
    parser.add_argument("--time-limit", type=float, default=600.0, help="seconds per job")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--work", type=Path, default=None, help="scratch directory for the results files")
    args = parser.parse_args(argv)
    doc = run_throughput(
        count=args.count,
        layers=args.layers,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        layouts=args.layouts,
        transfers=not args.no_transfers,
        objective=args.objective,
        method_list=args.methods.split(",") if args.methods else None,
        workers=args.workers,
        time_limit=args.time_limit,
        work_dir=args.work,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "throughput.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.out / "throughput.md").write_text(to_markdown(doc))
    print(to_markdown(doc))


if __name__ == "__main__":
    main()
