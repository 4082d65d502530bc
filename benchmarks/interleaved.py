"""Interleaved (VPP) plans on the MoE presets: ``plan --schedule interleaved``, timed (issue 33).

From the repository root::

    python -m benchmarks.interleaved                 # every case below (a few minutes on 2 cores)
    python -m benchmarks.interleaved --cases glm-4.5v

Each case runs ``partitioner plan --schedule interleaved --time-limit 60
--json`` (:data:`TIME_LIMIT_S`, issue 33's target for the whole command, the
per-framework lines included) in a child process of its own and
records its wall and CPU seconds, the machine's load average before it, and
from the result: the kept plan's group count P, v, microbatches, the expert
parallelism it uses, its simulated iteration, the best interleaved
baseline's (``megatron-uniform``: Megatron-LM's uniform split, one layout)
and the interleaved search's proven bound. When the kept plan runs ep 1,
``plan`` also states the best interleaved plan with ep > 1 on every layer
that offers it (its ``axes_not_chosen``: the interleaved search re-run on
the problem with EP forced); the row keeps its ep degrees and estimate next
to the kept plan's. A case with a published recipe also runs ``partitioner
estimate`` on the recipe's layout and records its simulated iteration
(:data:`RECIPES`), and per framework whether its line (``plan --target T``
in the same command, interleaved pinned) has a plan. It writes ``interleaved.json``
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
import re
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

__all__ = ["CASES", "RECIPES", "run_case", "run_recipe", "to_markdown", "splice_report", "main"]

# (model, cluster, nodes, global batch, v or None for plan's choice)
CASES: list[tuple[str, str, int, int, int | None]] = [
    ("qwen3-vl-30b-a3b", "dgx-h100", 2, 512, None),
    ("qwen3-vl-30b-a3b", "dgx-h100", 2, 512, 12),
    ("qwen3-vl-235b-a22b", "dgx-b200", 16, 1024, None),
    ("glm-4.5v", "dgx-h200", 16, 1024, None),
]
# Published recipes of a case, as ``partitioner estimate`` options: (label, options, source)
RECIPES: dict[tuple[str, str, int, int, int | None], tuple[str, tuple[str, ...], str]] = {
    ("qwen3-vl-30b-a3b", "dgx-h100", 2, 512, 12): (
        "PP2 VP12 EP8", ("--tp", "1", "--pp", "2", "--vpp", "12", "--ep", "8", "--etp", "1", "--mbs", "1",
                         "--distributed-optimizer"),
        "Megatron-Bridge perf_recipes/qwen_vl/h100/qwen3_vl.py (/work/shared/research/5d-moe.md section 4.5)"),
}
BEGIN, END = "<!-- interleaved: begin (python -m benchmarks.interleaved) -->", "<!-- interleaved: end -->"
_KILL_S = 900.0  # a case still running after this is killed (its row says so)
TIME_LIMIT_S = 60.0  # plan's --time-limit per case: issue 33's "interleaved with EP plans ... in <= 60 s"


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
        "ep_forced": _ep_forced(doc),
        "targets": {name: _target(line) for name, line in (doc.get("targets") or {}).items()},
        "message": (doc.get("message") or "")[:400],
    }


def _target(line: dict) -> str:
    """A framework's line in a few words: ``v2 19,039.4`` (its plan's v and iteration), else its status."""
    plan = line.get("plan") or {}
    if line.get("iteration_ms") is None:
        return str(line.get("status"))
    return f"v{plan.get('virtual_stages')} {_num(line['iteration_ms'])}" + (" (cut)" if line.get("cut") else "")


def _ep_forced(doc: dict) -> dict | None:
    """The result's best plan with EP forced (``axes_not_chosen``, axis ep): status, estimate, ep degrees, the
    kept plan's estimate; None when the kept plan uses EP or the problem offers none."""
    for alt in doc.get("axes_not_chosen") or []:
        if alt.get("axis") != "ep":
            continue
        degrees = sorted({int(m) for lay in alt.get("layouts") or [] for m in re.findall(r"ep(\d+)", lay)})
        return {"status": alt.get("status"), "value": alt.get("value"), "kept_value": alt.get("kept_value"),
                "ep": degrees, "message": (alt.get("message") or "")[:300]}
    return None


def run_recipe(case: Sequence[Any]) -> dict | None:
    """``partitioner estimate`` of the case's published recipe (:data:`RECIPES`), in a child process; None without one."""
    recipe = RECIPES.get(tuple(case))
    if recipe is None:
        return None
    label, options, source = recipe
    model, cluster, nodes, batch, _v = case
    cmd = [sys.executable, "-m", "partitioner", "estimate", "--model", model, "--cluster", cluster, "--nodes",
           str(nodes), "--global-batch", str(batch), *options, "--json"]
    code, out, err, wall, _usage = run_child(cmd, _KILL_S)
    row: dict[str, Any] = {"label": label, "source": source, "wall_s": round(wall, 2)}
    try:
        doc = json.loads(out)
    except ValueError:
        row.update(error=f"estimate exited {code} without a result: {err[-300:]}")
        return row
    row.update(iteration_ms=doc.get("iteration_ms"), estimate_ms=doc.get("estimate_ms"), fits=doc.get("fits"))
    return row


def run_case(case: Sequence[Any]) -> dict:
    """One case in a child process (a row, never a raise)."""
    model, cluster, nodes, batch, v = case
    cmd = [sys.executable, "-m", "partitioner", "plan", "--model", model, "--cluster", cluster, "--nodes", str(nodes),
           "--global-batch", str(batch), "--schedule", "interleaved", "--time-limit", f"{TIME_LIMIT_S:g}", "--json"]
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
    row["recipe"] = run_recipe(case)
    return row


def _num(x: Any, digits: int = 1) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def to_markdown(rows: list[dict], meta: dict) -> str:
    """The table of every row, with the machine, the date and the commit."""
    lines = [
        "# Interleaved (VPP) plans on the MoE presets: plan --schedule interleaved",
        "",
        f"Measured on {meta['machine']} on {meta['date']} (commit {meta['commit']}), each case in a process of its own "
        f"with `--time-limit {TIME_LIMIT_S:g}` (the whole command: the search over every plan gets half, each "
        "framework's line a share of the rest); *load* is the 1-minute load average before the case "
        "(other jobs shared the 2 cores). *iteration* is the kept plan's simulated iteration, *baseline* the best "
        "interleaved `megatron-uniform` plan (Megatron-LM's uniform split, one layout; v = 2, 3, 4, or the pinned v); "
        "*bound* the proven lower bound of the interleaved search's estimate at the kept m and v "
        "(the relaxation's, `optimal` only where the search proves it). `python -m benchmarks.interleaved` "
        "re-measures it.",
        "",
        "*best with ep > 1*: the plan's own answer to \"why not EP?\" (`axes_not_chosen`): the interleaved search "
        "re-run with ep > 1 forced on every layer that offers it (every ep degree and group count of the space), "
        "its ep degrees and estimate against the kept plan's estimate (estimates, not simulations; `feasible`: "
        "not proven, as the kept plan). *recipe*: `partitioner estimate` of the case's published layout, simulated. "
        "*per framework*: each line of the same command (`plan --target T`, interleaved pinned): its plan's v and "
        "simulated iteration (`cut`: its share ended the search), or why it has none (DeepSpeed runs 1F1B only).",
        "",
        "| case | wall s | CPU s | load | status | P x v, m | ep used | iteration ms | baseline ms | speed-up | bound ms "
        "| best with ep > 1: ep, estimate ms (kept's) | recipe: iteration ms | per framework |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        shape = "" if r.get("groups") is None else f"{r['groups']} x {r['virtual_stages']}, {r.get('microbatches')}"
        ep = ", ".join(map(str, r.get("ep") or []))
        speed = "" if r.get("speedup") is None else f"{r['speedup']:.3f}x"
        lines.append(f"| {r['case']} | {_num(r.get('wall_s'))} | {_num(r.get('cpu_s'))} | {_num(r.get('load_before'))} "
                     f"| {r.get('status')} | {shape} | {ep} | {_num(r.get('iteration_ms'))} | {_num(r.get('baseline_ms'))} "
                     f"| {speed} | {_num(r.get('exact_bound'))} | {_forced_cell(r.get('ep_forced'))} "
                     f"| {_recipe_cell(r.get('recipe'))} "
                     f"| {'; '.join(f'{n}: {t}' for n, t in (r.get('targets') or {}).items())} |")
    return "\n".join(lines) + "\n"


def _forced_cell(forced: dict | None) -> str:
    """``ep 2: 13,158.4 (12,287.1), +7.1%, feasible``; the status alone without a plan; "" when not stated."""
    if not forced:
        return ""
    if forced.get("value") is None:
        return f"none ({forced.get('status')}: {forced.get('message', '')[:80]})"
    kept, value = forced.get("kept_value"), forced["value"]
    rel = f", {value / kept - 1:+.1%}" if kept else ""
    eps = "/".join(map(str, forced.get("ep") or [])) or "?"
    return f"ep {eps}: {_num(value)} ({_num(kept)}){rel}, {forced.get('status')}"


def _recipe_cell(recipe: dict | None) -> str:
    """``PP2 VP12 EP8: 16,367.6`` (``does not fit`` when it does not), the error, or ""."""
    if not recipe:
        return ""
    if recipe.get("error"):
        return f"{recipe['label']}: {recipe['error'][:80]}"
    fits = "" if recipe.get("fits") else " (does not fit)"
    return f"{recipe['label']}: {_num(recipe.get('iteration_ms'))}{fits}"


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
