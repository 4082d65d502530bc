"""Per preset x export target: ``plan --target T``, ``export --to T``, and the framework's own check (issue 27).

For each preset case and each target (Megatron-LM, torchtitan, DeepSpeed),
three child processes run one after the other:

1. ``partitioner plan ... --target T --time-limit S --json`` (wall time and
   peak memory of the child);
2. ``partitioner export PLAN.json --to T --json`` on its output;
3. ``python -m benchmarks.framework_checks PLAN.json EXPORT.json T``: the
   export through the framework's own code, as the framework tier checks it
   (:mod:`benchmarks.framework_checks`: megatron-core ``TransformerConfig``
   and rank generator; torchtitan ``ConfigManager``, ``Trainer`` batch
   arithmetic, ``ParallelDims``, schedule and pipeline split; DeepSpeed
   ``DeepSpeedConfig``). DeepSpeed's forked ``PipelineModule`` ranks of the
   tier (``tests/frameworks/ds_ranks.py``) are not run here: one world per
   plan of up to 16+ CPU ranks is too heavy for a 2-core benchmark.

Each row records the plan's status, simulated iteration, the best baseline
under T (``plan --target`` restricts the baselines to T's knobs too) and
the speed-up over it, the weight-memory count (``memory``), whether the
export is expressible (else why), whether the framework check passed (else
which check failed) and the wall times. A step that fails makes a row that
says why; the run goes on.

Usage::

    python -m benchmarks.targets [--quick] [--cases m1,m2] [--targets t1,t2] [--time-limit S] --out benchmarks/results

writes ``targets.json`` and ``targets.md`` in ``--out`` and splices the
table into ``REPORT.md`` there when it exists (:func:`splice_report`;
``python -m benchmarks.report --parts targets`` does the same).
``--cases`` re-measures only those models and keeps the other rows of
``targets.json``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import splice  # noqa: E402
from benchmarks.solvers import PLAN_CASES, V3_PLAN_CASES, machine, run_child  # noqa: E402

__all__ = ["CASES", "QUICK_CASES", "TARGETS", "job_files", "run_case", "run_checks", "to_markdown", "section_lines", "splice_report", "main"]

TARGETS = ("megatron", "torchtitan", "deepspeed")
# the solver benchmark's plan cases and the newer presets (MoE, 72B+ dense, video, B200, GB200)
CASES: tuple[tuple[str, str, int, int], ...] = tuple(PLAN_CASES) + tuple(V3_PLAN_CASES)
QUICK_CASES: tuple[tuple[str, str, int, int], ...] = (("pi0", "dgx-h100", 1, 64),)
BEGIN, END = "<!-- targets: begin (python -m benchmarks.targets) -->", "<!-- targets: end -->"
_SLACK_S = 300.0  # beyond the plan's own time limit: loading a preset and building its problems


def _label(case: Sequence[Any]) -> str:
    model, cluster, nodes, batch = case
    return f"{model} {nodes}x{cluster} b{batch}"


def _tail(text: str, n: int = 300) -> str:
    """The last line(s) of a child's stderr, at most ``n`` characters (what it said before failing)."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[-n:]


def _plan_fields(doc: dict) -> dict:
    """What a row keeps of a ``plan --json`` document."""
    base = doc.get("baseline") or {}
    plan = doc.get("plan") or {}
    stages = plan.get("stages") or []
    return {
        "status": doc.get("status"),
        "message": doc.get("message") or "",
        "iteration_ms": (doc.get("throughput") or {}).get("iteration_ms"),
        "mfu": (doc.get("throughput") or {}).get("mfu"),
        "microbatches": doc.get("microbatches"),
        "schedule": (doc.get("schedule") or {}).get("schedule"),
        "virtual_stages": (doc.get("schedule") or {}).get("virtual_stages"),
        "stages": len(stages) or None,
        "meshes": sorted({f"{c.get('dp')}x{c.get('tp')}" for s in stages for c in ([s] if "dp" in s else s.get("configs") or [])}),
        "baseline_method": base.get("method"),
        "baseline_ms": base.get("iteration_ms"),
        "speedup": doc.get("speedup"),
        "memory": (doc.get("memory") or {}).get("counts"),
    }


def _empty(case: Sequence[Any], target: str) -> dict:
    model, cluster, nodes, batch = case
    return {"model": model, "cluster": cluster, "nodes": nodes, "global_batch": batch, "target": target,
            "status": "not run", "message": "", "iteration_ms": None, "mfu": None, "microbatches": None, "schedule": None,
            "virtual_stages": None, "stages": None, "meshes": [], "baseline_method": None, "baseline_ms": None,
            "speedup": None, "memory": None, "export": "not run", "export_reasons": [], "check": "not run",
            "check_detail": "", "plan_wall_s": None, "plan_cpu_s": None, "plan_peak_rss_mb": None,
            "export_wall_s": None, "check_wall_s": None}


def job_files(case: Sequence[Any], target: str, work: Path) -> tuple[Path, Path]:
    """The plan and export JSON files of one case and target in ``work`` (the whole name kept: models have dots)."""
    model, cluster, nodes, batch = case
    name = f"{model}-{nodes}x{cluster}-{batch}-{target}".replace("/", "_")
    return work / f"{name}.plan.json", work / f"{name}.export.json"


def run_case(case: Sequence[Any], target: str, time_limit: float, work: Path) -> dict:
    """One case under one target: plan, export, framework check, each in its own child process (a row, never a raise)."""
    model, cluster, nodes, batch = case
    row = _empty(case, target)
    plan_path, export_path = job_files(case, target, work)
    plan_cmd = [sys.executable, "-m", "partitioner", "plan", "--model", model, "--cluster", cluster, "--nodes", str(nodes),
                "--global-batch", str(batch), "--target", target, "--time-limit", f"{time_limit:g}", "--json"]
    code, out, err, wall, usage = run_child(plan_cmd, time_limit + _SLACK_S)
    row.update(plan_wall_s=wall, plan_cpu_s=usage.ru_utime + usage.ru_stime, plan_peak_rss_mb=usage.ru_maxrss / 1024)
    if code is None:
        row.update(status="killed", message=f"plan did not return within {time_limit + _SLACK_S:.0f} s")
        return row
    try:
        doc = json.loads(out)
    except ValueError:
        row.update(status="error", message=f"plan exited {code} without a result: {_tail(err)}")
        return row
    row.update(_plan_fields(doc))
    if doc.get("plan") is None:
        row.update(export="no plan", check="no plan")
        return row
    plan_path.write_text(out)
    code, out, err, wall, _ = run_child([sys.executable, "-m", "partitioner", "export", str(plan_path), "--to", target,
                                         "--json"], 600)
    row["export_wall_s"] = wall
    try:
        exported = json.loads(out)
    except ValueError:
        row.update(export="error", export_reasons=[f"export exited {code}: {_tail(err)}"], check="not run")
        return row
    if not exported.get("expressible"):
        row.update(export="not expressible", export_reasons=list(exported.get("reasons") or []), check="not run")
        return row
    row["export"] = "ok"
    export_path.write_text(out)
    row.update(check="pending", check_detail="", _files=[str(plan_path), str(export_path)])
    return row


def run_checks(rows: list[dict], work: Path) -> None:
    """The framework check of every row whose export is ok: one child process per target (frameworks imported once).

    A checker that dies or runs out of time fails the rows it did not answer, saying so.
    """
    for target in TARGETS:
        todo = [r for r in rows if r["check"] == "pending" and r["target"] == target]
        if not todo:
            continue
        jobs = work / f"checks-{target}.json"
        jobs.write_text(json.dumps([[*r["_files"], target] for r in todo]))
        code, out, err, wall, _ = run_child([sys.executable, "-m", "benchmarks.framework_checks", "--batch", str(jobs)],
                                            300 + 60 * len(todo))
        answers = []
        for line in out.strip().splitlines():
            try:
                answers.append(json.loads(line))
            except ValueError:
                continue
        for i, r in enumerate(todo):
            r["check_wall_s"] = wall / len(todo)
            if i < len(answers):
                v = answers[i]
                r.update(check="ok" if v.get("ok") else "failed",
                         check_detail="; ".join(v.get("checked") or []) if v.get("ok") else str(v.get("error")))
            else:
                why = "killed (out of time)" if code is None else f"exited {code}: {_tail(err)}"
                r.update(check="failed", check_detail=f"the checker stopped before this export: {why}")
    for r in rows:
        r.pop("_files", None)


def _num(x: Any, digits: int = 1) -> str:
    return "" if x is None else f"{x:,.{digits}f}"


def _why(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= n else text[: n - 3] + "..."


def _row_line(r: dict) -> str:
    if r["export"] == "ok":
        export = "ok"
    elif r["export"] == "not expressible":
        export = "not expressible: " + _why("; ".join(r["export_reasons"]))
    else:
        export = r["export"] + (": " + _why("; ".join(r["export_reasons"])) if r["export_reasons"] else "")
    check = r["check"] if r["check"] != "failed" else "failed: " + _why(r["check_detail"])
    status = r["status"] if r["iteration_ms"] is not None or not r["message"] else f"{r['status']}: {_why(r['message'])}"
    sched = r["schedule"] or ""
    if sched == "interleaved" and r.get("virtual_stages"):
        sched += f" v{r['virtual_stages']}"
    shape = f"{r['stages']} x {'/'.join(r['meshes'])}" if r["stages"] else ""
    speed = f"{r['speedup']:.2f}x" if r["speedup"] else ""
    return (f"| {r['model']} | {r['nodes']} x {r['cluster']}, {r['global_batch']} | {r['target']} | {status} | {shape} | "
            f"{r['microbatches'] or ''} | {sched} | {_num(r['iteration_ms'])} | {r['baseline_method'] or 'none fits'} | "
            f"{_num(r['baseline_ms'])} | {speed} | {export} | {check} | {_num(r['plan_wall_s'])} |")


def to_markdown(rows: list[dict], meta: dict) -> str:
    """``targets.md``: the table, what each column means, and the run's totals."""
    planned = [r for r in rows if r["iteration_ms"] is not None]
    exported = [r for r in rows if r["export"] == "ok"]
    checked = [r for r in rows if r["check"] == "ok"]
    speedups = [r["speedup"] for r in rows if r["speedup"]]
    lines = [
        "# Plans per export target: plan --target T, export --to T, the framework's check",
        "",
        f"Made by `{meta['command']}` on {meta['date']} (commit {meta['commit'] or 'unknown'}), "
        f"{meta['time_limit']:g} s per plan (`--time-limit`, the whole command); the run took {meta['seconds'] / 60:.1f} min. "
        f"Machine: {meta['machine']}." + _rerun_note(meta),
        "",
        "Per case and target, in child processes: `partitioner plan --target T --json` (status, the plan's simulated "
        "iteration, the best baseline *under T* -- `plan --target` restricts the baselines to T's knobs too -- and the "
        "speed-up over it; weights charged with T's bytes per parameter), then `partitioner export --to T` on that JSON, "
        "then the export through the framework's own code as the framework tier checks it "
        "(`benchmarks/framework_checks.py`: megatron-core `TransformerConfig` + rank generator; torchtitan `ConfigManager`, "
        "`Trainer` batch arithmetic, `ParallelDims`, schedule and pipeline split; `DeepSpeedConfig`). "
        "*wall s* is the plan command's wall time.",
        "",
        f"Summary: {len(planned)} of {len(rows)} rows planned, {len(exported)} exported, {len(checked)} passed the "
        f"framework check" + (f"; speed-up over the best baseline under the target {min(speedups):.2f}x-"
                              f"{max(speedups):.2f}x" if speedups else "") + ".",
        "",
        "| model | cluster, batch | target | status | plan: stages x dp x tp | m | schedule | plan ms | best baseline under T | "
        "baseline ms | speed-up | export | framework check | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row_line(r) for r in rows]
    return "\n".join(lines) + "\n"


def _rerun_note(meta: dict) -> str:
    """Which rows a ``--cases`` run re-measured, and the run the others come from."""
    first = meta.get("first_run")
    if not meta.get("remeasured") or not first:
        return ""
    return (f" Only {', '.join(meta['remeasured'])} re-measured by this command (`--cases`); the other rows come from "
            f"`{first.get('command')}` on {first.get('date')} (commit {first.get('commit')}), which took "
            f"{first.get('seconds', 0) / 60:.1f} min for every case.")


def section_lines(out: Path) -> list[str]:
    """The REPORT.md section of ``targets.md`` (between markers, so it can be spliced again); [] when not measured."""
    return splice.section_lines(out / "targets.md", "Targets (issue 27)", BEGIN, END)


def splice_report(out: Path) -> Path | None:
    """Put :func:`section_lines` into ``out/REPORT.md`` (:func:`benchmarks.splice.splice_report`)."""
    return splice.splice_report(out, section_lines(out), BEGIN, END)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"one small case ({_label(QUICK_CASES[0])})")
    parser.add_argument("--cases", default="", help="comma-separated models to re-measure; the others keep their rows")
    parser.add_argument("--targets", default=",".join(TARGETS), help="comma-separated subset of " + ", ".join(TARGETS))
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per plan command (plan --time-limit)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--keep", type=Path, default=None, help="keep each plan and export JSON in this folder")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if set(targets) - set(TARGETS) or not targets:
        parser.error(f"--targets: choose from {', '.join(TARGETS)}")
    only = {c.strip() for c in args.cases.split(",") if c.strip()}
    cases = QUICK_CASES if args.quick else CASES
    if only - {c[0] for c in cases}:
        parser.error(f"--cases: unknown model(s) {', '.join(sorted(only - {c[0] for c in cases}))}")
    args.out.mkdir(parents=True, exist_ok=True)
    old: dict[tuple, dict] = {}
    old_meta: dict = {}
    subset = bool(only) or set(targets) != set(TARGETS)
    if subset and (args.out / "targets.json").exists():
        before = json.loads((args.out / "targets.json").read_text())
        old_meta = before.get("meta") or {}
        for r in before.get("rows", []):
            old[(r["model"], r["cluster"], r["nodes"], r["global_batch"], r["target"])] = r
    start = time.perf_counter()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for case in cases:
            for target in TARGETS:
                key = (*case, target)
                if (only and case[0] not in only) or target not in targets:  # not re-measured: its row is kept
                    if key in old:
                        rows.append(old[key])
                    continue
                try:
                    row = run_case(case, target, args.time_limit, work)
                except Exception as err:  # a failed case is a row saying why, never a crash
                    row = {**_empty(case, target), "status": "error", "message": f"{type(err).__name__}: {err}"}
                rows.append(row)
                print(f"{_label(case):45s} {target:10s} {row['status']:10s} speed-up {row['speedup']} export {row['export']} "
                      f"({row['plan_wall_s'] or 0:.1f} s)", flush=True)
                seen = {(r["model"], r["cluster"], r["nodes"], r["global_batch"], r["target"]) for r in rows}
                _save(args.out, rows + [r for k, r in old.items() if k not in seen], {"partial": True})  # a working state
        run_checks(rows, work)
    seconds = time.perf_counter() - start
    cmd = "python -m benchmarks.targets" + (" --quick" if args.quick else "") + f" --time-limit {args.time_limit:g}"
    meta = {"command": cmd, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": machine_commit(),
            "time_limit": args.time_limit, "seconds": seconds, "machine": machine(), "targets": targets}
    if subset and old_meta.get("seconds") and not old_meta.get("partial"):  # the other rows keep their run's record
        first = old_meta.get("first_run") or {k: old_meta[k] for k in ("command", "date", "commit", "seconds") if k in old_meta}
        which = sorted(only or {c[0] for c in cases})
        if set(targets) != set(TARGETS):
            which = [f"{m} ({', '.join(targets)})" for m in which]
        meta.update(first_run=first, remeasured=which)
    _save(args.out, rows, meta)
    (args.out / "targets.md").write_text(to_markdown(rows, meta))
    spliced = splice_report(args.out)
    print(f"wrote {args.out / 'targets.md'}" + (f" and spliced it into {spliced}" if spliced else "") +
          f" ({seconds / 60:.1f} min)")
    return rows


def _save(out: Path, rows: list[dict], meta: dict) -> None:
    clean = [{k: v for k, v in r.items() if k != "_files"} for r in rows]
    (out / "targets.json").write_text(json.dumps({"meta": meta, "rows": clean}, indent=1) + "\n")


def machine_commit() -> str | None:
    """The commit the run measured (``git rev-parse --short HEAD``), None outside a checkout."""
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


if __name__ == "__main__":
    main()
