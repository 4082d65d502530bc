"""CI's cold-start tier: the installed ``partitioner`` on an empty numba cache, under a time limit.

Run by the test suite (``tests/solvers/dp/test_cold_start.py``, marker ``cold_start``, so the README's
test command and ``.ci/run`` run it) as ``python .ci/cold_start.py --source CHECKOUT``, or on its own
with the venv's interpreter: ``python .ci/cold_start.py`` tests the installed package. Every command
runs ``python -m partitioner`` from a scratch directory with ``NUMBA_CACHE_DIR`` on a fresh, empty
directory:

1. ``solve examples/vla_toy_2x4.json --method dp --time-limit 1 --json``: ``optimal``, solved within 2 s,
   nothing compiled (the Python path);
2. ``plan --model pi0 --cluster dgx-h100 --nodes 2 --global-batch 1024 --time-limit 20 --json``: a plan,
   and no compile started under a limit too short for it;
3. ``warmup`` compiles every kernel (progress on stderr, nothing on stdout), a second ``warmup`` finds
   them cached, and the toy solve is ``optimal`` again, now on the compiled kernels (the ahead-of-time
   module where a C compiler is present, else numba's cache).

Exit 0 when every check holds; else one line per failed check and exit 1. ``--source DIR`` runs a
checkout (on ``PYTHONPATH``) instead of the installed package.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOY = str(ROOT / "examples" / "vla_toy_2x4.json")


SOURCE: str | None = None  # --source DIR: run that checkout instead of the installed package


def run(args: list[str], cache: Path, cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PARTITIONER_DP_KERNELS")}
    env["NUMBA_CACHE_DIR"] = str(cache)
    if SOURCE:
        env["PYTHONPATH"] = SOURCE
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "partitioner", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=1800)
    seconds = time.perf_counter() - start
    print(f"cold-start: partitioner {' '.join(args)}: exit {proc.returncode}, {seconds:.1f} s", flush=True)
    return proc, seconds


def compiled(cache: Path) -> list[Path]:
    """numba's cached kernels and the dp's ahead-of-time module (solvers/dp/compiled/aot.py)."""
    return sorted(p for p in cache.rglob("*") if p.suffix in (".nbc", ".so", ".pyd"))


def main() -> int:
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            failures.append(what)
            print(f"cold-start: FAILED: {what}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        cache, cwd = Path(tmp) / "numba-cache", Path(tmp) / "work"
        cache.mkdir()
        cwd.mkdir()
        proc, _ = run(["solve", TOY, "--method", "dp", "--time-limit", "1", "--json"], cache, cwd)
        result = json.loads(proc.stdout) if proc.returncode == 0 else {}
        check(result.get("status") == "optimal", f"toy solve on an empty cache: {result.get('status')} "
                                                 f"{result.get('message')} {proc.stderr.strip()[-300:]}")
        check(result.get("solve_seconds", 99) <= 2.0, f"toy solve took {result.get('solve_seconds')} s (2 s allowed)")
        check(compiled(cache) == [], "the toy solve compiled kernels")

        proc, seconds = run(["plan", "--model", "pi0", "--cluster", "dgx-h100", "--nodes", "2", "--global-batch",
                             "1024", "--time-limit", "20", "--json"], cache, cwd)
        plan = json.loads(proc.stdout) if proc.returncode == 0 else {}
        check(plan.get("plan") is not None, f"plan on an empty cache: exit {proc.returncode} {proc.stderr.strip()[-300:]}")
        check(compiled(cache) == [], "the plan compiled kernels under a 20 s limit")
        check("compiling" not in proc.stderr, "the plan announced a compile under a 20 s limit")

        proc, _ = run(["warmup"], cache, cwd)
        check(proc.returncode == 0 and proc.stdout == "", f"warmup: exit {proc.returncode}, stdout {proc.stdout!r}")
        check(len(compiled(cache)) > 0, "warmup wrote no compiled kernels")
        proc, _ = run(["warmup"], cache, cwd)
        check(proc.returncode == 0 and "compiled already" in proc.stderr, f"second warmup: {proc.stderr.strip()}")
        proc, _ = run(["solve", TOY, "--method", "dp", "--time-limit", "1", "--json"], cache, cwd)
        result = json.loads(proc.stdout) if proc.returncode == 0 else {}
        check(result.get("status") == "optimal", f"toy solve after warmup: {result.get('status')}")
    print("cold-start: " + ("ok" if not failures else f"{len(failures)} check(s) failed"), flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--source"] and len(sys.argv) == 3:
        SOURCE = str(Path(sys.argv[2]).resolve())
    sys.exit(main())
