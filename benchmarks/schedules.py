"""Schedules compared on the presets: simulated iteration, bubble and memory per schedule.

For every plan-quality case of :mod:`benchmarks.report` (a VLA/VLM preset on
a cluster that holds it), :func:`partitioner.plan_model` plans the model
(``--method``, ``greedy`` by default; m chosen by ``auto``) and picks the
schedule by simulation (:func:`partitioner.planning.schedules.choice.choose_schedule`):
the 1F1B plan replayed under ``1f1b``, ``zb-h1`` and ``gpipe``, the method
re-run where it models a schedule, and the Megatron-style uniform baseline
(and FSDP) under every schedule, ``interleaved`` with v = 2, 3, 4 (the best
over the screened m). Every candidate is a row.
Writes ``benchmarks/results/schedules.md`` and ``schedules.json``::

    python -m benchmarks.schedules            # every case
    python -m benchmarks.schedules --quick    # two cases
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import PLAN_CASES, QUICK_PLAN_CASES  # noqa: E402
from partitioner import plan_model  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
CASES, QUICK = PLAN_CASES, QUICK_PLAN_CASES  # the plan-quality cases of the report


def measure(cases, method: str) -> list[dict]:
    out = []
    for model, cluster, nodes, batch in cases:
        start = time.perf_counter()
        r = plan_model(model, cluster, nodes=nodes, global_batch=batch, method=method)
        entry = {"model": model, "cluster": cluster, "nodes": nodes, "global_batch": batch, "status": r.status,
                 "seconds": time.perf_counter() - start}
        if r.plan is not None:
            entry["microbatches"] = r.extra.get("microbatches")
            entry["rows"] = r.extra["schedules"]["rows"]
        out.append(entry)
        print(f"{model} on {nodes} x {cluster}: {r.status} ({entry['seconds']:.0f} s)", flush=True)
    return out


def to_markdown(entries: list[dict], method: str, command: str = "python -m benchmarks.schedules") -> str:
    lines = [
        "# Schedules on the presets",
        "",
        f"`{command}` (plans by `{method}`, m by `auto`). Per case, every candidate `plan` weighed: the 1F1B plan",
        "replayed under each schedule (plan), the method re-run where it models the schedule (solved), the",
        "Megatron-style uniform baseline (baseline; interleaved: its uniform split into P·v chunks) and FSDP (fsdp)",
        "under each schedule. Iteration = simulated makespan; memory = the largest per-GPU peak; `plan` keeps the first row.",
        "",
    ]
    for e in entries:
        lines.append(f"## {e['model']} on {e['nodes']} x {e['cluster']}, global batch {e['global_batch']}, m = {e.get('microbatches')}")
        lines.append("")
        if "rows" not in e:
            why = "not measured in this run" if e["status"] == "dropped" else "no plan"
            lines += [f"{why} ({e['status']})", ""]
            continue
        lines.append("| plan | schedule | v | iteration ms | estimate ms | bubble % | peak memory GiB |")
        lines.append("|---|---|---:|---:|---:|---:|---:|")
        for row in e["rows"]:
            if row["ok"]:
                lines.append(
                    f"| {row['plan_source']} | {row['schedule']} | {row['virtual_stages']} | {row['iteration_ms']:.1f} | "
                    f"{row['estimate_ms']:.1f} | {100 * max(row['bubble_ratio'], 0.0):.1f} | {row['peak_memory_bytes'] / 2**30:.1f} |"
                )
            else:
                lines.append(f"| {row['plan_source']} | {row['schedule']} | {row['virtual_stages']} | does not run: {row['reason']} | | | |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--method", default="greedy")
    args = ap.parse_args(argv)
    entries = measure(QUICK if args.quick else CASES, args.method)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "schedules.json").write_text(json.dumps(entries, indent=1) + "\n")
    (RESULTS / "schedules.md").write_text(to_markdown(entries, args.method) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
