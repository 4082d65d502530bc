"""Time limits at scale and the constants the solvers hold them with, measured (issue 35).

::

    python -m benchmarks.limits                          # writes benchmarks/results/limits.{json,md}
    python -m benchmarks.limits --busy 4 --layers 200,1000,5000 --time-limit 5

Four parts, each row in a fresh child process:

1. **Overshoot**: ``partitioner solve FILE --method M --time-limit S --json --no-validate`` on the format-v3
   synthetic problems of ``--layers`` layers on 4 x 8 GPUs (``benchmarks/synthetic.py``,
   ``synthetic_v3_problem``, seed 1), for every method; the row gives the result's ``solve_seconds`` (the
   solve, after the problem is loaded: what the time limit bounds, docs/limits.md) and its overshoot past S,
   the process's wall time and the 1-minute load average around it. ``--busy`` Python busy loops run beside
   the rows (bounded: they stop with the script).
2. **Fallback costs**: CPU seconds of ``greedy`` over all its stage counts and of ``dp``'s per-layer tables
   (``DPModel``), per cost entry, on the same problems and openvla-7b on 8 x dgx-a100-80g: the sources of
   ``partitioner.solvers.greedy.RUN_SECONDS_PER_ENTRY`` and ``partitioner.solvers.dp.method.TABLE_SECONDS_PER_ENTRY``.
3. **brute's enumeration rate**: CPU seconds of ``brute`` on a problem whose work is its stages' config
   tuples (one stage, four layers of many 5D configs) and on one whose work is its cut x size combinations
   (one config per size, 8 layers on 2 x 8 GPUs), against :func:`partitioner.solvers.brute.enumeration_work`:
   the sources of ``ENTRIES_PER_SECOND`` and ``COMBINATIONS_PER_SECOND``.
4. **plan**: ``partitioner plan --model M --cluster C --nodes N --time-limit S`` on every model preset (on the
   cluster of :func:`plan_limit_cases`) and on 1,024 GPUs; the row gives the process's wall time against S
   (``--time-limit`` bounds the whole command, docs/limits.md), the exit code and the plan's status line.

``--parts`` runs a subset, e.g. ``--parts plan --busy 8`` for part 4 at a load of about 8.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
METHODS = ("dp", "greedy", "brute", "cpsat", "milp", "uniform", "balanced")

__all__ = ["overshoot_rows", "cost_rows", "rate_rows", "plan_rows", "EXTRA_PLAN_CASES", "plan_limit_cases", "to_markdown", "main"]

# part 4: (model preset, cluster preset, nodes, global batch) -- every model preset (issue 13's and 25's plan cases,
# the two MLA presets), then two 1,024-GPU jobs
EXTRA_PLAN_CASES = (
    ("deepseek-v3", "dgx-h100", 32, 1024),
    ("kimi-k2", "dgx-b200", 32, 1024),
    ("qwen3-vl-235b-a22b", "dgx-b200", 128, 1024),
    ("glm-4.5v", "dgx-h100", 128, 2048),
)


def plan_limit_cases() -> tuple[tuple[str, str, int, int], ...]:
    """Part 4's cases: :data:`benchmarks.solvers.PLAN_CASES` and ``V3_PLAN_CASES``, then :data:`EXTRA_PLAN_CASES`."""
    from benchmarks.solvers import PLAN_CASES, V3_PLAN_CASES

    return (*PLAN_CASES, *V3_PLAN_CASES, *EXTRA_PLAN_CASES)


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _load() -> float:
    return os.getloadavg()[0]


def write_problems(directory: Path, layers: list[int]) -> dict[int, Path]:
    """The format-v3 synthetic problems, one file per layer count."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.synthetic import synthetic_v3_problem
    from partitioner.problem import dump_problem

    out = {}
    for L in layers:
        path = directory / f"v3_{L}.json"
        dump_problem(synthetic_v3_problem(L, 4, 8, seed=1), path)
        out[L] = path
    return out


def overshoot_rows(files: dict[int, Path], methods: list[str], time_limit: float) -> list[dict]:
    """Part 1: every method on every file, each in its own process."""
    from benchmarks.solvers import run_child

    rows = []
    for L, path in files.items():
        for method in methods:
            before = _load()
            cmd = [sys.executable, "-m", "partitioner", "solve", str(path), "--method", method,
                   "--time-limit", str(time_limit), "--json", "--no-validate"]
            code, out, err, wall, usage = run_child(cmd, timeout=30 * time_limit + 600)
            try:
                doc = json.loads(out)
            except json.JSONDecodeError:
                doc = {"status": f"exit {code}", "solve_seconds": None, "message": err.strip()[-200:]}
            solve_s = doc.get("solve_seconds")
            rows.append({
                "layers": L, "method": method, "status": doc.get("status"), "solve_seconds": solve_s,
                "overshoot": None if solve_s is None else max(0.0, solve_s - time_limit),
                "wall_seconds": round(wall, 2), "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
                "load": [round(before, 1), round(_load(), 1)], "message": (doc.get("message") or "")[:160],
            })
            print(json.dumps(rows[-1]), flush=True)
    return rows


_COSTS = """
import json, sys, time
from partitioner import load_problem
from partitioner.costs import build_problem
from partitioner.solvers.base import SolveRequest
from partitioner.solvers.dp.solver import DPModel
from partitioner.solvers.greedy import cost_entries, solve_greedy
p = build_problem('openvla-7b', 'dgx-a100-80g', nodes=8, global_batch=2048, microbatches=32) if sys.argv[1] == 'openvla' \\
    else load_problem(sys.argv[1])
solve_greedy(p, SolveRequest('bottleneck')); DPModel(p)  # first calls: imports and caches
c = time.process_time(); solve_greedy(p, SolveRequest('bottleneck')); greedy = time.process_time() - c
c = time.process_time(); DPModel(p); tables = time.process_time() - c
print(json.dumps({"entries": cost_entries(p), "greedy_cpu": greedy, "dp_tables_cpu": tables}))
"""


def cost_rows(files: dict[int, Path]) -> list[dict]:
    """Part 2: greedy's and dp's tables' CPU seconds per cost entry."""
    from benchmarks.solvers import run_child

    rows = []
    for name, arg in [("openvla-7b, 8 x dgx-a100-80g", "openvla")] + [(f"v3 synthetic, {L} layers", str(p)) for L, p in files.items()]:
        code, out, err, wall, _ = run_child([sys.executable, "-c", _COSTS, arg], timeout=1800)
        doc = json.loads(out) if code == 0 else {"entries": None, "greedy_cpu": None, "dp_tables_cpu": None}
        doc["problem"] = name
        rows.append(doc)
        print(json.dumps(doc), flush=True)
    return rows


_RATE = """
import json, sys, time
from partitioner import Problem, solve
from partitioner.solvers.brute import enumeration_work
from partitioner.solvers.feasibility import feasible_stage_counts
doc = json.loads(sys.argv[1])
p = Problem.from_dict(doc)
w = enumeration_work(p, feasible_stage_counts(p))
c = time.process_time()
r = solve(p, 'brute', options={'max_combinations': 10**12, 'max_seconds': 10**6})
t = time.process_time() - c
print(json.dumps({"status": r.status, "cpu": t, "combinations": w.combinations, "tuples": w.tuples, "entries": w.entries}))
"""


def _tuples_problem() -> dict:
    """One stage of four layers (vision, vision, llm, moe) with every (dp, tp, cp) of 8 GPUs, ep for the MoE layer."""
    import random

    rng = random.Random(1)
    meshes = [(8 // (tp * cp), tp, cp) for tp in (1, 2, 4, 8) for cp in (1, 2, 4, 8) if 8 % (tp * cp) == 0]
    layers = []
    for i, module in enumerate(("vision", "vision", "llm", "moe")):
        costs = {}
        for dp, tp, cp in meshes:
            eps = [(1, 1)] + ([(e, f) for e in (2, 4, 8) for f in (1, 2) if 8 % (e * f) == 0] if module == "moe" else [])
            for ep, etp in eps:
                for variant in ("", "/zero3"):
                    key = f"dp{dp}tp{tp}" + (f"cp{cp}" if cp > 1 else "") + (f"ep{ep}" if ep > 1 else "") \
                        + (f"etp{etp}" if etp > 1 else "") + variant
                    fwd = round(rng.uniform(1, 10) / 8, 3)
                    costs[key] = {"fwd_ms": fwd, "bwd_ms": 2 * fwd, "weight_bytes": rng.randint(10**8, 10**9) // (tp * ep),
                                  "act_bytes": rng.randint(10**7, 10**8) // 8}
        layers.append({"name": f"{module}.{i}", "module": module, "out_bytes": 10**6, "costs": costs})
    return {"version": 3, "name": "tuples", "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu_memory_bytes": 8 * 10**9,
            "intra_node_GBps": 300, "inter_node_GBps": 25}, "training": {"microbatches": 8}, "stages": 1,
            "variants": {"zero3": "sharded"}, "layers": layers}


def _cuts_problem() -> dict:
    costs = {f"dp{d}tp1": {"fwd_ms": 1.0 / d, "bwd_ms": 2.0 / d, "weight_bytes": 1, "act_bytes": 1} for d in (1, 2, 4, 8, 16)}
    return {"version": 1, "name": "cuts", "cluster": {"nodes": 2, "gpus_per_node": 8, "gpu_memory_bytes": 10**9,
            "intra_node_GBps": 100.0, "inter_node_GBps": 10.0}, "training": {"microbatches": 8},
            "layers": [{"name": f"l{i}", "out_bytes": 1000, "costs": costs} for i in range(8)]}


def rate_rows() -> list[dict]:
    """Part 3: brute's entries and combinations per CPU second."""
    from benchmarks.solvers import run_child

    rows = []
    for name, doc in (("config tuples (1 stage, 4 layers of 5D configs, 8 GPUs)", _tuples_problem()),
                      ("cut x size combinations (8 layers, 2 x 8 GPUs, one config per size)", _cuts_problem())):
        code, out, err, wall, _ = run_child([sys.executable, "-c", _RATE, json.dumps(doc)], timeout=1800)
        row = json.loads(out) if code == 0 else {"status": f"exit {code}", "cpu": None}
        row["problem"] = name
        if row.get("cpu"):
            row["entries_per_second"] = row["entries"] / row["cpu"]
            row["combinations_per_second"] = row["combinations"] / row["cpu"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def plan_rows(time_limit: float, cases=None) -> list[dict]:
    """Part 4: ``plan --time-limit S`` per case, each in its own process: wall time against S."""
    from benchmarks.solvers import run_child

    rows = []
    for model, cluster, nodes, batch in cases or plan_limit_cases():
        before = _load()
        cmd = [sys.executable, "-m", "partitioner", "plan", "--model", model, "--cluster", cluster, "--nodes",
               str(nodes), "--global-batch", str(batch), "--time-limit", f"{time_limit:g}"]
        code, out, err, wall, usage = run_child(cmd, timeout=10 * time_limit + 600)
        status = next((line.strip() for line in out.splitlines() if line.strip()), "")
        last_err = next((line.strip() for line in reversed(err.splitlines()) if line.strip()), "")
        last_err = next((line.strip() for line in err.splitlines() if line.startswith(f"{model}: ")), last_err)
        rows.append({
            "model": model, "cluster": cluster, "gpus": nodes * _gpus_per_node(cluster), "nodes": nodes,
            "exit": code, "wall_seconds": round(wall, 2), "over_seconds": round(max(0.0, wall - time_limit), 2),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2), "peak_mb": round(usage.ru_maxrss / 1024),
            "load": [round(before, 1), round(_load(), 1)], "first_line": status[:160],
            "infeasible": "infeasible" in out.lower() and code != 0, "error": last_err[:160] if code != 0 else "",
        })
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _gpus_per_node(cluster: str) -> int:
    from partitioner.costs import load_cluster

    return load_cluster(cluster).gpus_per_node


def _plan_markdown(found: dict) -> list[str]:
    rows = found.get("plans") or []
    if not rows:
        return []
    S = found["plan_time_limit"]
    lines = ["", f"`plan --time-limit {S:g}` per preset and at 1,024 GPUs (issue 35: each within S + 5 s at a load of 8; "
             "*wall s* is the whole process, imports included; *cpu s* its CPU time, so cpu / wall is the share of a core "
             "it got):", "",
             "| model | cluster | GPUs | exit | wall s | over S s | cpu s | peak MB | load | first line of the answer (exit 1: "
             "the error) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        first = (r["first_line"] or r["error"]).replace("|", "/")[:100]
        lines.append(f"| {r['model']} | {r['cluster']} | {r['gpus']:,} | {r['exit']} | {r['wall_seconds']:.1f} | "
                     f"{r['over_seconds']:.1f} | {r['cpu_seconds']:.1f} | {r['peak_mb']:,} | {r['load'][0]} -> {r['load'][1]} | "
                     f"{first} |")
    worst = max(r["over_seconds"] for r in rows)
    lines += ["", f"Largest overrun past S: {worst:.1f} s over {len(rows)} plans (target: at most 5 s); "
              f"answered with a plan (exit 0): {sum(r['exit'] == 0 for r in rows)} of {len(rows)}; "
              f"reported infeasible: {sum(r['infeasible'] for r in rows)}; exits other than 0 or 1: "
              f"{sum(r['exit'] not in (0, 1) for r in rows)}."]
    return lines


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "an unrecorded CPU"


def to_markdown(found: dict) -> str:
    head = [
        "## Targets (issue 35): time limits at scale, and the constants that hold them",
        "",
        f"`python -m benchmarks.limits --busy {found['busy']} --time-limit {found['time_limit']:g}` on {found['date']}, "
        f"commit {found['commit']}, {found['cpus']} cores of {found['cpu']}, {found['busy']} Python busy loops beside "
        "the rows (load averages as sampled before and after each row, other work on the machine included). Each row "
        "is a fresh process; *solve s* is the result's `solve_seconds` (after the problem is loaded: what "
        "`--time-limit` bounds), *wall s* the whole process (imports and loading the file included).",
        "",
    ]
    lines = head + _plan_markdown(found)
    if not found.get("overshoot"):
        return "\n".join(lines) + "\n"
    lines += ["", "| layers | method | status | solve s | overshoot s | wall s | cpu s | load | note |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in found["overshoot"]:
        solve_s = "" if r["solve_seconds"] is None else f"{r['solve_seconds']:.2f}"
        over = "" if r["overshoot"] is None else f"{r['overshoot']:.2f}"
        note = r["message"].replace("|", "/")[:90]
        lines.append(f"| {r['layers']:,} | {r['method']} | {r['status']} | {solve_s} | {over} | {r['wall_seconds']:.1f} | "
                     f"{r['cpu_seconds']:.1f} | {r['load'][0]} -> {r['load'][1]} | {note} |")
    worst = max((r["overshoot"] for r in found["overshoot"] if r["overshoot"] is not None), default=0.0)
    lines += ["", f"Largest overshoot: {worst:.2f} s (target: at most 5 s at a load of 8 on 2 cores).", "",
              "Fallback costs (CPU seconds, second call in the process):", "",
              "| problem | cost entries | greedy, all stage counts | us / entry | dp tables (DPModel) | us / entry |",
              "|---|---|---|---|---|---|"]
    for r in found["costs"]:
        if r.get("entries"):
            lines.append(f"| {r['problem']} | {r['entries']:,} | {r['greedy_cpu']:.3f} | {r['greedy_cpu'] / r['entries'] * 1e6:.2f} | "
                         f"{r['dp_tables_cpu']:.3f} | {r['dp_tables_cpu'] / r['entries'] * 1e6:.2f} |")
    lines += ["", "brute's enumeration rate (CPU seconds; `enumeration_work` counts):", "",
              "| problem | status | cpu s | cut x size combinations | config tuples | cost entries read | entries / s | combinations / s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in found["rates"]:
        if r.get("cpu"):
            lines.append(f"| {r['problem']} | {r['status']} | {r['cpu']:.2f} | {r['combinations']:,} | {r['tuples']:,} | "
                         f"{r['entries']:,} | {r['entries_per_second']:.3g} | {r['combinations_per_second']:.3g} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.limits", description=__doc__.split("\n")[0])
    parser.add_argument("--busy", type=int, default=0, help="Python busy loops beside the rows")
    parser.add_argument("--busy-seconds", type=float, default=3600.0)
    parser.add_argument("--layers", default="200,1000,5000")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--plan-time-limit", type=float, default=10.0, help="S of part 4's plan rows")
    parser.add_argument("--parts", default="overshoot,costs,rates,plan")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import subprocess

    parts = set(args.parts.split(","))

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    busy = [mp.Process(target=_busy, args=(args.busy_seconds,), daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    try:
        with tempfile.TemporaryDirectory(prefix="partitioner-limits-") as tmp:
            files = write_problems(Path(tmp), [int(x) for x in args.layers.split(",")])
            found = {
                "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit,
                "cpus": os.cpu_count(), "cpu": _cpu_model(), "busy": args.busy, "time_limit": args.time_limit,
                "plan_time_limit": args.plan_time_limit,
                "plans": plan_rows(args.plan_time_limit) if "plan" in parts else [],
                "overshoot": overshoot_rows(files, args.methods.split(","), args.time_limit) if "overshoot" in parts else [],
                "costs": cost_rows(files) if "costs" in parts else [],
                "rates": rate_rows() if "rates" in parts else [],
            }
    finally:
        for p in busy:
            p.terminate()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "limits.json").write_text(json.dumps(found, indent=1) + "\n")
    (args.out / "limits.md").write_text(to_markdown(found))
    print(to_markdown(found))


if __name__ == "__main__":
    main()
