"""Interleaved (VPP) plans on the MoE presets: ``plan --schedule interleaved``, timed (issue 33).

From the repository root::

    python -m benchmarks.interleaved                 # every case below (a few minutes on 2 cores)
    python -m benchmarks.interleaved --cases glm-4.5v

Each case runs ``partitioner plan --schedule interleaved --json`` (without
``--time-limit``: the default budget) in a child process of its own and
records its wall and CPU seconds, the machine's load average before it, and
from the result: the kept plan's group count P, v, microbatches, the expert
parallelism it uses, its simulated iteration, the best interleaved
baseline's (``megatron-uniform``: Megatron-LM's uniform split, one layout)
and the interleaved search's proven bound. It writes ``interleaved.json``
and ``interleaved.md`` in ``--out`` and splices the table into
``REPORT.md`` there (between markers, like :mod:`benchmarks.targets`).

The cases are the MoE presets at the sizes of ``docs/plan.md``'s table and,
for Qwen3-VL-30B-A3B, the 16 H100 of NVIDIA's Megatron-Bridge recipe
(PP2 VP12 EP8, global batch 512: ``/work/shared/research/5d-moe.md`` section
4.5, Megatron-Bridge ``perf_recipes/qwen_vl/h100/qwen3_vl.py``), once with v
chosen by ``plan`` (2, 3 or 4) and once pinned at the recipe's v = 12.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import splice  # noqa: E402
from benchmarks.solvers import machine, run_child  # noqa: E402
from benchmarks.targets import machine_commit  # noqa: E402

__all__ = ["CASES", "run_case", "to_markdown", "splice_report", "main"]

# (model, cluster, nodes, global batch, v or None for plan's choice)
CASES: list[tuple[str, str, int, int, int | None]] = [
    ("qwen3-vl-30b-a3b", "dgx-h100", 2, 512, None),
    ("qwen3-vl-30b-a3b", "dgx-h100", 2, 512, 12),
    ("qwen3-vl-235b-a22b", "dgx-b200", 16, 1024, None),
    ("glm-4.5v", "dgx-h200", 16, 1024, None),
]
BEGIN, END = "<!-- interleaved: begin (python -m benchmarks.interleaved) -->", "<!-- interleaved: end -->"
_KILL_S = 900.0  # a case still running after this is killed (its row says so)


def _label(case: Sequence[Any]) -> str:
    model, cluster, nodes, batch, v = case
    return f"{model} on {nodes} x {cluster}, batch {batch}" + ("" if v is None else f", v = {v}")


def _fields(doc: dict) -> dict:
    """What a row keeps of a ``plan --json`` result."""
    plan = doc.get("plan") or {}
    stages = plan.get("stages") or []
    sched = doc.get("schedule") or {}
    v = sched.get("virtual_stages") or 1
    configs = [c for s in stages for c in (s.get("configs") or [s])]
    base = doc.get("baseline") or {}
    exact = doc.get("exact") or {}
    return {
        "status": doc.get("status"),
        "groups": len(stages) // v if stages else None,
        "virtual_stages": v,
        "microbatches": doc.get("microbatches"),
        "ep": sorted({int(c.get("ep", 1)) for c in configs}),
        "iteration_ms": (doc.get("simulation") or {}).get("makespan_ms"),
        "baseline_ms": base.get("iteration_ms"),
        "baseline": base.get("method"),
        "speedup": doc.get("speedup"),
        "exact_bound": exact.get("bound"),
        "exact_status": exact.get("status"),
        "message": (doc.get("message") or "")[:400],
    }


def run_case(case: Sequence[Any]) -> dict:
    """One case in a child process (a row, never a raise)."""
    model, cluster, nodes, batch, v = case
    cmd = [sys.executable, "-m", "partitioner", "plan", "--model", model, "--cluster", cluster, "--nodes", str(nodes),
           "--global-batch", str(batch), "--schedule", "interleaved", "--json"]
    if v is not None:
        cmd += ["--virtual-stages", str(v)]
    load = os.getloadavg()[0]
    code, out, err, wall, usage = run_child(cmd, _KILL_S)
    row: dict[str, Any] = {"case": _label(case), "model": model, "cluster": cluster, "nodes": nodes, "batch": batch,
                           "pinned_v": v, "load_before": round(load, 2), "wall_s": round(wall, 2),
                           "cpu_s": round(usage.ru_utime + usage.ru_stime, 2)}
    if code is None:
        row.update(status="killed", message=f"plan did not return within {_KILL_S:.0f} s")
        return row
    try:
        row.update(_fields(json.loads(out)))
    except ValueError:
        row.update(status="error", message=f"plan exited {code} without a result: {err[-300:]}")
    return row


def _num(x: Any, digits: int = 1) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def to_markdown(rows: list[dict], meta: dict) -> str:
    """The table of every row, with the machine, the date and the commit."""
    lines = [
        "# Interleaved (VPP) plans on the MoE presets: plan --schedule interleaved",
        "",
        f"Measured on {meta['machine']} on {meta['date']} (commit {meta['commit']}), each case in a process of its own "
        "with `plan`'s default budget (no `--time-limit`); *load* is the 1-minute load average before the case "
        "(other jobs shared the 2 cores). *iteration* is the kept plan's simulated iteration, *baseline* the best "
        "interleaved `megatron-uniform` plan (Megatron-LM's uniform split, one layout; v = 2, 3, 4, or the pinned v); "
        "*bound* the proven lower bound of the interleaved search's estimate at the kept m and v "
        "(the relaxation's, `optimal` only where the search proves it). `python -m benchmarks.interleaved` "
        "re-measures it.",
        "",
        "| case | wall s | CPU s | load | status | P x v, m | ep used | iteration ms | baseline ms | speed-up | bound ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        shape = "" if r.get("groups") is None else f"{r['groups']} x {r['virtual_stages']}, {r.get('microbatches')}"
        ep = ", ".join(map(str, r.get("ep") or []))
        speed = "" if r.get("speedup") is None else f"{r['speedup']:.3f}x"
        lines.append(f"| {r['case']} | {_num(r.get('wall_s'))} | {_num(r.get('cpu_s'))} | {_num(r.get('load_before'))} "
                     f"| {r.get('status')} | {shape} | {ep} | {_num(r.get('iteration_ms'))} | {_num(r.get('baseline_ms'))} "
                     f"| {speed} | {_num(r.get('exact_bound'))} |")
    return "\n".join(lines) + "\n"


def section_lines(out: Path) -> list[str]:
    """The REPORT.md section of ``interleaved.md`` (between markers, so it can be spliced again); [] when not measured."""
    return splice.section_lines(out / "interleaved.md", "Targets (issue 33)", BEGIN, END)


def splice_report(out: Path) -> Path | None:
    """Put :func:`section_lines` into ``out/REPORT.md`` (:func:`benchmarks.splice.splice_report`)."""
    return splice.splice_report(out, section_lines(out), BEGIN, END)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated models to measure (default: every case)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    only = {c.strip() for c in args.cases.split(",") if c.strip()}
    cases = [c for c in CASES if not only or c[0] in only]
    if not cases:
        parser.error(f"--cases: choose from {', '.join(sorted({c[0] for c in CASES}))}")
    rows = []
    for case in cases:
        rows.append(run_case(case))
        print(json.dumps(rows[-1]), flush=True)
    meta = {"machine": machine(), "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "commit": machine_commit(),
            "command": "python -m benchmarks.interleaved" + (f" --cases {args.cases}" if args.cases else "")}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "interleaved.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (args.out / "interleaved.md").write_text(to_markdown(rows, meta))
    spliced = splice_report(args.out)
    print(f"wrote {args.out / 'interleaved.md'}" + (f" and spliced it into {spliced}" if spliced else ""))
    return rows


if __name__ == "__main__":
    main()
