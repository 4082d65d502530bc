"""The first run after install, measured: a fresh clone, an empty numba cache, a loaded machine.

::

    python -m benchmarks.first_run             # writes benchmarks/results/first_run.{json,md}
    python -m benchmarks.first_run --load 4    # busy processes beside the runs (default 4; 'auto': up to load 4)

A fresh clone of this checkout's HEAD (``git clone``) runs from this interpreter with
``PYTHONPATH`` on the clone and ``NUMBA_CACHE_DIR`` on an empty directory, while ``--load``
Python busy loops (bounded: they stop with the script, or after ``--busy-seconds``) load the
cores. In order, each a fresh process, timed wall to wall:

1. ``solve examples/vla_toy_2x4.json --method dp --time-limit 1 --json`` on the empty cache;
2. ``plan --model pi0 --cluster dgx-h100 --nodes 2 --global-batch 1024`` on the empty cache
   (no warmup: the Python path, or a compile if the engine's rule asks for one);
3. ``warmup`` (what the README's install command runs after ``pip install``);
4. the same ``plan`` again, now warm (the first plan a user who followed the README runs);
5. the same ``plan`` once more (a warm one, the reference);
6. the toy ``solve`` again, warm.

The 1-minute load average is sampled around every run. :mod:`benchmarks.report` includes
``first_run.md`` in ``REPORT.md``.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"

__all__ = ["measure", "to_markdown", "main"]

TOY = ["solve", "examples/vla_toy_2x4.json", "--method", "dp", "--time-limit", "1", "--json"]
PLAN = ["plan", "--model", "pi0", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch", "1024"]


def _busy(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x = (x * 1103515245 + 12345) % 2**31


def _run(clone: Path, cache: Path, args: list[str], label: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(clone), "NUMBA_CACHE_DIR": str(cache)}
    env.pop("PARTITIONER_DP_KERNELS", None)
    before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "partitioner", *args], capture_output=True, text=True, cwd=clone,
                          env=env, timeout=1800)
    seconds = time.perf_counter() - start
    row = {"label": label, "command": "partitioner " + " ".join(args), "exit": proc.returncode,
           "seconds": round(seconds, 2), "load_before": round(before, 2), "load_after": round(os.getloadavg()[0], 2),
           "stderr": [line for line in proc.stderr.splitlines() if line.strip()][-3:]}
    if "--json" in args and proc.returncode in (0, 1):
        result = json.loads(proc.stdout)
        row.update(status=result["status"], solve_seconds=result["solve_seconds"], gap=result.get("gap"))
    print(f"{label:45s} {row['seconds']:7.2f} s  exit {row['exit']}  load {before:.1f}  {row.get('status', '')}",
          flush=True)
    return row


def measure(load: int, busy_seconds: float) -> dict:
    """Clone, load the machine, run the six commands (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        clone, cache = Path(tmp) / "clone", Path(tmp) / "numba-cache"
        cache.mkdir()
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
        busy = [mp.Process(target=_busy, args=(busy_seconds,), daemon=True) for _ in range(load)]
        for p in busy:
            p.start()
        try:
            time.sleep(20 if load else 0)  # let the load average rise
            rows = [
                _run(clone, cache, TOY, "solve toy, --time-limit 1, empty cache"),
                _run(clone, cache, PLAN, "plan pi0, empty cache, no warmup"),
                _run(clone, cache, ["warmup"], "warmup (the README's install step)"),
                _run(clone, cache, PLAN, "plan pi0, first after warmup"),
                _run(clone, cache, PLAN, "plan pi0, warm"),
                _run(clone, cache, TOY, "solve toy, --time-limit 1, warm"),
            ]
        finally:
            for p in busy:
                p.terminate()
    return {"commit": commit, "busy_processes": load, "cpus": os.cpu_count(), "cpu": _cpu_model(), "rows": rows,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def to_markdown(found: dict) -> str:
    rows = found["rows"]
    warm = next(r for r in rows if r["label"] == "plan pi0, warm")["seconds"]
    lines = ["## First run after install", "",
             f"`python -m benchmarks.first_run --load {found['busy_processes']}` on {found['date']}, commit "
             f"{found['commit']}: a fresh `git clone`, an empty `NUMBA_CACHE_DIR`, {found['busy_processes']} Python "
             f"busy loops beside the runs on {found['cpus']} cores of {found.get('cpu', 'an unrecorded CPU')} (load "
             "averages as sampled, other work on the machine included; this section alone was measured then, on "
             "that machine). "
             "Each command is a fresh process, timed wall to wall; the toy's wall time is mostly Python's start "
             "(imports, and in a fresh clone writing the package's bytecode), its solve time the solver's own.", "",
             "| run | command | wall s | x warm plan | load (1 min) | status |", "|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['seconds'] / warm:.2f}" if r["command"].startswith("partitioner plan") else ""
        status = r.get("status", "exit %d" % r["exit"])
        if "solve_seconds" in r:
            status += f", solve {r['solve_seconds']:.2f} s"
        lines.append(f"| {r['label']} | `{r['command']}` | {r['seconds']:.1f} | {ratio} | "
                     f"{r['load_before']:.1f} -> {r['load_after']:.1f} | {status} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", default="4", help="busy processes beside the runs, or 'auto': as many as "
                        "bring the 1-minute load average to 4 (none when other work already does)")
    parser.add_argument("--busy-seconds", type=float, default=900.0, help="the busy loops stop after this long")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load = max(0, 4 - round(os.getloadavg()[0])) if args.load == "auto" else int(args.load)
    found = measure(load, args.busy_seconds)
    (args.out / "first_run.json").write_text(json.dumps(found, indent=1) + "\n")
    (args.out / "first_run.md").write_text(to_markdown(found))


if __name__ == "__main__":
    main()
