"""Solver benchmark: value and time of every method as layers, GPUs and layouts grow.

Seeded synthetic VLA-shaped problems (:mod:`benchmarks.synthetic`) are solved
by each method with a time limit; the results go to
``benchmarks/results/solvers.md`` (tables), ``solvers.json`` (raw records)
and ``solvers.png`` (time against size). The issue-3 targets are measured
too: 64 layers on 4 x 8 GPUs without transfers (iteration objective), and
256 layers on 256 GPUs.

Run from the repository root::

    python -m benchmarks.solvers            # the full sweep
    python -m benchmarks.solvers --quick    # a smaller sweep, for a smoke test
    python -m benchmarks.solvers --sweeps v2 --methods dp,greedy,balanced --out benchmarks/results/v2
    python -m benchmarks.solvers --sweeps issue28 --methods dp --out benchmarks/results/issue28
    python -m benchmarks.solvers --sweeps issue34 --methods dp,cpsat --out benchmarks/results/issue34

Times are wall-clock seconds of one ``solve`` call in this process (CP-SAT
with as many workers as cores); the machine is stated in the report.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script or module from a checkout
    sys.path.insert(0, str(ROOT))

from benchmarks.synthetic import (  # noqa: E402
    synthetic_problem,
    synthetic_v2_problem,
    synthetic_v3_problem,
    vla_problem,
    vla_v3_problem,
)
from partitioner import __version__, solve  # noqa: E402
from partitioner.solvers import methods as registered_methods  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_METHODS = ("dp", "cpsat", "milp", "greedy", "balanced", "uniform")
V2_SUFFIX = " v2 (3 variants, per-segment configs)"  # ends the label of a point's format-v2 twin
V3_SUFFIX = " v3 (cp 1/2/4, MoE layers ep 1/2/4/8)"  # ends the label of a point's format-v3 twin (issue 24)


@dataclass(frozen=True)
class Point:
    sweep: str  # "layers", "gpus", "layouts", "target"
    layers: int
    nodes: int
    gpus_per_node: int = 8
    layouts: int | None = None  # None: every layout the cluster allows
    transfers: bool = True
    objective: str = "iteration"
    microbatches: int = 8
    version: int = 1  # 2: the v2 twin (3 variants, one config per module segment); 3: the v3 twin (cp, ep)
    only: tuple[str, ...] | None = None  # the methods measured on this point (None: every method asked for)
    shape: str = "synthetic"  # "vla": :func:`benchmarks.synthetic.vla_problem` (three modules, own layouts)

    @property
    def label(self) -> str:
        if self.shape == "vla":
            v, llm, act = self.vla_layers
            return (f"VLA {v}/{llm}/{act} layers N={self.nodes * self.gpus_per_node} m={self.microbatches} "
                    f"{'transfers' if self.transfers else 'no transfers'} {self.objective}"
                    + (" 5D keys (cp 1/2/4, ep 1..8 on the language layers)" if self.version == 3 else ""))
        lay = "all" if self.layouts is None else str(self.layouts)
        return (
            f"L={self.layers} N={self.nodes * self.gpus_per_node} layouts={lay} "
            f"{'transfers' if self.transfers else 'no transfers'} {self.objective}"
            + {2: V2_SUFFIX, 3: V3_SUFFIX}.get(self.version, "")
        )

    @property
    def vla_layers(self) -> tuple[int, int, int]:
        """(vision, llm, action) layers of a "vla" point: an eighth each for vision and action."""
        return self.layers // 8, self.layers - 2 * (self.layers // 8), self.layers // 8

    def problem(self, seed: int = 0):
        if self.shape == "vla":
            generate_vla = vla_v3_problem if self.version == 3 else vla_problem
            return generate_vla(*self.vla_layers, self.nodes, self.gpus_per_node, self.transfers, seed=seed,
                                microbatches=self.microbatches, objective=self.objective)
        generate = {2: synthetic_v2_problem, 3: synthetic_v3_problem}.get(self.version, synthetic_problem)
        return generate(
            self.layers,
            self.nodes,
            self.gpus_per_node,
            self.layouts,
            self.transfers,
            seed=seed,
            microbatches=self.microbatches,
            objective=self.objective,
        )


# (layers, nodes of 8 GPUs) of the comm-free sweep
COMMFREE = ((20, 2), (24, 4), (32, 2), (36, 8), (40, 4), (48, 8), (56, 2), (64, 4), (64, 8), (72, 8))


def sweep(quick: bool) -> list[Point]:
    layers = (16, 32, 64) if quick else (16, 32, 64, 128, 256)
    nodes = (1, 2, 4) if quick else (1, 2, 4, 8, 16, 32)
    layouts = (1, 2) if quick else (1, 2, 3, None)
    points = [Point("layers", L, 4) for L in layers]
    points += [Point("gpus", 64, n) for n in nodes]
    points += [Point("layouts", 64, 4, layouts=k) for k in layouts]
    points += [Point("target", 64, 4, transfers=False)]
    # format v2 against v1 on the same problem (issue 10): 64 layers, 4 x 8 GPUs, 4 modules, 3 variants
    points += [
        Point("v2", 64, 4, transfers=transfers, objective=objective, version=version)
        for transfers in (True, False)
        for objective in ("iteration", "bottleneck")
        for version in (1, 2)
    ]
    # issue 13: cpsat on comm-free problems of 20-72 layers and 16-64 GPUs (the arc-flow model's reach)
    points += [Point("commfree", L, n, transfers=False) for L, n in COMMFREE]
    if not quick:
        points += [
            Point("target", 256, 32, transfers=False, objective="bottleneck"),
            Point("target", 256, 32, transfers=False, objective="iteration"),
            Point("target", 256, 32, transfers=True, objective="bottleneck"),
        ]
    return points


def issue13_points() -> list[Point]:
    """Issue 13's solver targets, each with the methods it is about, and their format-v2 twins (variants on)."""
    dp_rows = [
        Point("issue13", 256, 32, transfers=False, objective="iteration", only=("dp",)),
        Point("issue13", 64, 32, transfers=True, objective="iteration", only=("dp",)),
        Point("issue13", 256, 32, transfers=True, objective="bottleneck", only=("dp",)),
    ]
    # the comm-free problems (64 layers on 4 x 8 GPUs among them: the cpsat target)
    cpsat_rows = [Point("issue13", L, n, transfers=False, only=("cpsat", "dp")) for L, n in COMMFREE]
    twins = [replace(p, version=2) for p in dp_rows + [Point("issue13", 64, 4, transfers=False, only=("cpsat", "dp"))]]
    return dp_rows + cpsat_rows + twins


def issue24_points() -> list[Point]:
    """Issue 24's speed rows: the v3 twins (every layout also with cp = 2 and 4, the MoE layers with ep in
    {1, 2, 4, 8}) of issue 13's dp rows without the bottleneck one and of its cpsat row."""
    return [
        Point("issue24", 256, 32, transfers=False, objective="iteration", version=3, only=("dp",)),
        Point("issue24", 64, 32, transfers=True, objective="iteration", version=3, only=("dp",)),
        Point("issue24", 64, 4, transfers=False, objective="iteration", version=3, only=("cpsat",)),
    ]


def issue28_points() -> list[Point]:
    """Issue 28's dp at its memory budget: the VLA shape (vision 32 / llm 192 / action 32 layers, each
    module with its own layouts) on 32 x 8 GPUs with transfers, m = 32, iteration: 52 placement states and
    32 stage-count levels, whose tables (5.0 GiB) exceed dp's 3 GiB default budget."""
    return [Point("issue28", 256, 32, microbatches=32, only=("dp",), shape="vla")]


def issue34_points() -> list[Point]:
    """Issue 34's solver rows: dp on 128 layers x 1,024 GPUs with transfers within its default budget; the VLA
    shape with 5D keys (every layout also at cp 2 and 4, ep 1..8 on the language layers: about 1,650 keys a
    layer) on 256 GPUs, m = 32, and its 2D twin; cpsat on 32 layers x 256 GPUs with transfers."""
    return [
        Point("issue34", 128, 128, transfers=True, objective="iteration", only=("dp",)),
        Point("issue34", 256, 32, transfers=False, microbatches=32, version=3, only=("dp",), shape="vla"),
        Point("issue34", 256, 32, transfers=False, microbatches=32, version=1, only=("dp",), shape="vla"),
        Point("issue34", 64, 32, transfers=True, microbatches=32, version=3, only=("dp",), shape="vla"),
        Point("issue34", 64, 32, transfers=True, microbatches=32, version=1, only=("dp",), shape="vla"),
        Point("issue34", 32, 32, transfers=True, objective="iteration", only=("cpsat",)),
    ]


# issue 34: ``partitioner plan`` at scale -- (model, cluster, nodes, global batch, extra arguments)
LLAMA3_70B = str(Path(__file__).resolve().parent / "configs" / "llama-3-70b.json")
SCALE_PLAN_CASES = (
    (LLAMA3_70B, "dgx-h100", 2048, 2048, ("--time-limit", "120")),
    ("qwen3-vl-235b-a22b", "dgx-b200", 128, 1024, ("--time-limit", "120")),
    ("glm-4.5v", "dgx-h100", 128, 2048),  # the default plan (no --time-limit), batch as in benchmarks.limits
)


# issue 13: ``partitioner plan`` per preset (model, cluster, nodes, global batch), as in part 4 of the report
PLAN_CASES = (
    ("openvla-7b", "dgx-a100-80g", 8, 2048),
    ("pi0", "dgx-h100", 2, 1024),
    ("seed-vla-8gpu", "dgx-a100-80g", 1, 256),
    ("llava-1.5-7b", "dgx-h100", 4, 1024),
    ("llava-1.5-13b", "dgx-a100-80g", 4, 1024),
    ("qwen2-vl-7b", "dgx-h100", 4, 1024),
    ("qwen2-vl-7b-video", "dgx-h100", 4, 256),
    ("internvl-1.5-26b", "dgx-h200", 8, 1024),
    ("qwen2-vl-72b", "dgx-h200", 16, 1024),
)

# issue 25: ``partitioner plan`` on every new preset (model and cluster: dgx-b200 with the 235B), each within 30 s
V3_PLAN_CASES = (
    ("qwen3-vl-30b-a3b", "dgx-h100", 4, 1024),
    ("qwen2.5-vl-72b", "dgx-h200", 16, 1024),
    ("glm-4.5v", "dgx-h200", 16, 1024),
    ("qwen3-vl-235b-a22b", "dgx-b200", 16, 1024),
    ("qwen2.5-vl-7b-video-64f", "dgx-h100", 4, 256),
    ("qwen3-vl-30b-a3b", "gb200-nvl72", 1, 1024),
)


@dataclass(frozen=True)
class ChildUsage:
    """A child process's own resource usage, named as ``resource.struct_rusage`` names it."""

    ru_utime: float
    ru_stime: float
    ru_maxrss: int  # KiB, the child's own peak resident memory


# The launcher between a benchmark and its row: a fresh interpreter (small) forks the row's command and reports
# what ``os.wait4`` says of it. Linux counts the memory a child inherits at fork into its ``ru_maxrss`` even
# after exec, so a row forked straight from a large benchmark process (2 GB after building problems) would
# report the benchmark's peak as its own.
_LAUNCHER = """
import json, os, subprocess, sys, time
cmd, report = json.loads(sys.argv[1]), sys.argv[2]
start = time.perf_counter()
proc = subprocess.Popen(cmd)
_, status, usage = os.wait4(proc.pid, 0)
with open(report, "w") as f:
    json.dump({"code": os.waitstatus_to_exitcode(status), "seconds": time.perf_counter() - start,
               "utime": usage.ru_utime, "stime": usage.ru_stime, "maxrss": usage.ru_maxrss}, f)
"""


def run_child(cmd: list[str], timeout: float) -> tuple[int | None, str, str, float, ChildUsage]:
    """Run ``cmd`` in a child process: (exit code or None when killed after ``timeout`` s, stdout, stderr,
    wall seconds, the child's own resource usage from ``os.wait4``: its CPU time and peak memory).

    The child is started by a small launcher process (``_LAUNCHER``), so its peak memory is its own; on a
    timeout the launcher's whole session is killed."""
    import signal
    import subprocess
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "usage.json"
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _LAUNCHER, json.dumps(cmd), str(report)], stdout=out,
                                stderr=err, text=True, cwd=ROOT, start_new_session=True)
        killed = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            killed = True
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        if killed or not report.exists():  # no usage of the child to report (killed, or it never started)
            return None if killed else proc.returncode, out.read(), err.read(), seconds, ChildUsage(0.0, 0.0, 0)
        found = json.loads(report.read_text())
        usage = ChildUsage(found["utime"], found["stime"], found["maxrss"])
        return found["code"], out.read(), err.read(), found["seconds"], usage


def _own_peak_mb() -> float | None:
    """This process's peak resident memory (VmHWM of /proc/self/status) in MB, or None off Linux."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration, ValueError):
        return None


def _usage(usage: ChildUsage) -> dict:
    return {"cpu_seconds": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}


def plan_case_label(case: tuple) -> str:
    """The row label of a plan case: ``plan MODEL on NODES x CLUSTER, batch B`` and its further arguments."""
    model, cluster, nodes, batch, *more = case
    extra = list(more[0]) if more else []
    shown = Path(model).stem if model.endswith(".json") else model
    return f"plan {shown} on {nodes} x {cluster}, batch {batch}" + (f" ({' '.join(extra)})" if extra else "")


def run_plan_case(case: tuple, timeout: float, sweep: str = "plan") -> dict:
    """``partitioner plan ... --json`` in a child process, as a user runs it: wall, CPU and peak memory
    (interpreter start-up and imports included); killed after ``timeout`` seconds, and the row says so.
    ``case``: (model, cluster, nodes, global batch) and, optionally, further arguments."""
    model, cluster, nodes, batch, *more = case
    extra = list(more[0]) if more else []
    cmd = [sys.executable, "-m", "partitioner", "plan", "--model", model, "--cluster", cluster,
           "--nodes", str(nodes), "--global-batch", str(batch), "--json", *extra]
    code, stdout, stderr, seconds, usage = run_child(cmd, timeout)
    status, value, message = "error", None, ""
    if code is None:
        status, message = "timeout", f"killed after {timeout:g} s"
    elif code in (0, 1):
        try:
            doc = json.loads(stdout)
            status = doc["status"]
            value = (doc.get("throughput") or {}).get("iteration_ms")
            message = f"schedule {(doc.get('schedule') or {}).get('schedule')}, m {doc.get('microbatches')}"
            fits = _stages_fit(doc)
            if fits is not None:
                message += ", every stage fits" if fits else ", A STAGE DOES NOT FIT"
            if doc.get("bound") is not None and doc.get("gap") is not None:
                message += f", bound {doc['bound']:,.1f} ms (gap {100 * doc['gap']:.1f} %)"
            if status != "optimal":  # what the plan says was not proven, or cut short
                message += "; " + str(doc.get("message") or "").split("; ")[0]
        except (ValueError, KeyError) as exc:
            message = f"unreadable output: {exc}"
    else:
        message = (stderr.strip().splitlines() or [f"exit {code}"])[-1]
    return {"sweep": sweep, "label": plan_case_label(case), "method": "plan",
            "model": model, "cluster": cluster, "nodes": nodes, "global_batch": batch, "status": status,
            "value": value, "bound": None, "seconds": seconds, **_usage(usage),
            "load_average": os.getloadavg()[0], "message": message[:300]}


def _stages_fit(doc: dict) -> bool | None:
    """Whether the replayed plan of a ``plan --json`` result keeps every stage within its GPU memory (the
    simulator's ``fits_memory``, its peak against the problem's capacity; None: no simulated plan)."""
    sim = doc.get("simulation") or {}
    return sim.get("fits_memory")


# Solves that reach every compiled kernel of the dp (plain and option recursions, both modes, the bucket level)
WARM_UP = """
from partitioner.solvers.dp.compiled import engine
engine.warmup()  # every kernel signature (what `partitioner warmup` runs)
"""


def compile_kernels(timeout: float = 900.0) -> list[dict]:
    """The dp's numba kernels compiled once in a fresh cache directory (what the first dp solve after an
    install pays, measured), then once more into the package's own cache, so that every later row starts
    warm, as a user's second solve does."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for label, env in (("compile the dp kernels (cold cache)", {"NUMBA_CACHE_DIR": cache}),
                           ("warm the package's kernel cache", {})):
            cmd = [sys.executable, "-c", WARM_UP]
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                code, _, stderr, seconds, usage = run_child(cmd, timeout)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            rows.append({"sweep": "compile", "label": label, "method": "dp",
                         "status": "ok" if code == 0 else "error", "value": None, "bound": None,
                         "seconds": seconds, **_usage(usage), "load_average": os.getloadavg()[0],
                         "message": "" if code == 0 else (stderr.strip().splitlines() or [f"exit {code}"])[-1][:200]})
            print(f"{label:60s} {rows[-1]['status']:10s} {seconds:8.2f} s", flush=True)
    return rows


_WARMUP = "from partitioner.solvers.dp.compiled import engine; engine.warmup()"


def run_point_isolated(point: Point, methods: list[str], time_limit: float, seed: int) -> list[dict]:
    """:func:`run_point` one method at a time in a child process, so that each row's peak memory is its own.

    dp's kernels are compiled (or found in the cache) first, in a child of their own: a row measures
    solving, and a compile inside the row's process would put LLVM's memory in its peak (the compile
    has its own row, :func:`compile_kernels`)."""
    records = []
    if "dp" in methods and (point.only is None or "dp" in point.only):
        run_child([sys.executable, "-c", _WARMUP], 900)
    for method in methods:
        if point.only is not None and method not in point.only:
            continue
        cmd = [sys.executable, "-m", "benchmarks.solvers", "--child", json.dumps(asdict(point)), "--methods", method,
               "--time-limit", str(time_limit), "--seed", str(seed)]
        allowed = time_limit * (10 if method == "dp" else 1) * 1.5 + 60
        code, stdout, stderr, seconds, usage = run_child(cmd, allowed)
        if code == 0:
            rows = json.loads(stdout.strip().splitlines()[-1])
        else:
            why = f"killed after {allowed:g} s" if code is None else (stderr.strip().splitlines() or [f"exit {code}"])[-1]
            rows = [{"sweep": point.sweep, "label": point.label, "layers": point.layers,
                     "gpus": point.nodes * point.gpus_per_node, "layouts": point.layouts, "transfers": point.transfers,
                     "objective": point.objective, "version": point.version, "method": method,
                     "status": "timeout" if code is None else "error", "value": None, "bound": None,
                     "seconds": seconds, "message": why[:200]}]
        for row in rows:  # the child's own peak memory and CPU time (imports and problem generation included)
            # Linux counts a parent's peak into its child's ru_maxrss at exec, so a child spawned from a large
            # process (a long pytest run) looks large: the child's own high-water mark is preferred
            row["peak_rss_mb"] = row.pop("own_peak_rss_mb", usage.ru_maxrss / 1024)
            row["process_cpu_seconds"] = usage.ru_utime + usage.ru_stime
            print(f"{point.label:60s} {method:9s} {row['status']:10s} {row['seconds']:8.2f} s "
                  f"peak {row['peak_rss_mb']:,.0f} MB", flush=True)
        records += rows
    return records


def run_point(point: Point, methods: list[str], time_limit: float, seed: int) -> list[dict]:
    problem = point.problem(seed)
    records = []
    for method in methods:
        if point.only is not None and method not in point.only:
            continue
        options = {"num_workers": os.cpu_count() or 1} if method == "cpsat" else None
        # the exact DP and the baselines have no search to stop early; give the DP a longer leash
        limit = time_limit * 10 if method == "dp" else time_limit
        start, cpu = time.perf_counter(), time.process_time()
        try:
            result = solve(problem, method, time_limit=limit, options=options)
            status, value, bound, message = result.status, result.value, result.bound, result.message
            stats = (result.extra or {}).get(method) if isinstance((result.extra or {}).get(method), dict) else None
        except Exception as err:  # a benchmark records failures instead of stopping
            status, value, bound, message = "error", None, None, f"{type(err).__name__}: {err}"
            stats = None
        records.append(
            {
                "sweep": point.sweep,
                "label": point.label,
                "layers": point.layers,
                "gpus": point.nodes * point.gpus_per_node,
                "layouts": point.layouts,
                "transfers": point.transfers,
                "objective": point.objective,
                "version": point.version,
                "method": method,
                "status": status,
                "value": value,
                "bound": bound,
                "seconds": time.perf_counter() - start,
                "cpu_seconds": time.process_time() - cpu,
                "load_average": os.getloadavg()[0],
                # the process's high-water mark so far (a row's own peak when it is the first to need that much)
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "message": message[:200],
                "stats": stats,  # the method's own counters (dp: placement states, levels, recursions)
            }
        )
        print(f"{point.label:60s} {method:9s} {status:10s} {value if value is None else round(value, 4)!s:>12} "
              f"{records[-1]['seconds']:8.2f} s", flush=True)
    best = min((r["value"] for r in records if r["value"] is not None), default=None)
    for r in records:
        r["gap_to_best"] = None if best is None or r["value"] is None else (r["value"] - best) / best
    return records


def machine() -> str:
    """One line: CPU, cores, memory, Python, OS (from :func:`benchmarks.throughput.machine`)."""
    from benchmarks.throughput import machine as details

    m = details()
    memory = f", {m['memory_gb']:.0f} GB RAM" if m.get("memory_gb") else ""
    return f"{m['cpu']}, {os.cpu_count()} cores{memory}, Python {m['python']}, {m['platform']}"


def write_report(records: list[dict], methods: list[str], time_limit: float, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "solvers.json").write_text(json.dumps(records, indent=1) + "\n")
    lines = [
        "# Solver benchmark",
        "",
        f"Generated by `python -m benchmarks.solvers` on {date.today().isoformat()}, partitioner {__version__}.",
        f"Machine: {machine()}.",
        f"Time limit per solve: {time_limit:g} s ({time_limit * 10:g} s for `dp`); CP-SAT with one worker per core.",
        "Problems: seeded synthetic VLA-shaped problems (`benchmarks/synthetic.py`, seed 0): vision, projector,",
        "LLM and action modules, memory set so that it binds. `gap` is the value's excess over the best value",
        "any method found on that problem; `status` *optimal* means proven.",
        "",
    ]
    compiled = [r for r in records if r["sweep"] == "compile"]
    if compiled:
        lines += ["The dp's compiled kernels (numba) before the timed rows: "
                  + "; ".join(f"{r['label']}: {r['status']}, {r['seconds']:.2f} s" for r in compiled)
                  + ". Every row below runs with the kernels in the package's cache, as every dp solve after "
                  "the first one on a machine does.", ""]
    for sweep_name, title in (
        ("layers", "Layers grow (4 nodes x 8 GPUs, every layout, transfers, iteration objective)"),
        ("gpus", "GPUs grow (64 layers, every layout, transfers, iteration objective)"),
        ("layouts", "Layouts per stage size grow (64 layers, 4 x 8 GPUs)"),
        ("target", "Issue-3 targets"),
        ("commfree", "Comm-free problems, 20-72 layers on 16-64 GPUs (issue 13: cpsat proven optimal in <= 60 s)"),
        ("v2", "Format v2 against v1 on the same problem (64 layers, 4 x 8 GPUs, 4 modules; v2 adds 3 variants and per-segment configs)"),
        ("issue13", "Issue-13 targets (each method in its own process: peak memory is the row's own)"),
        ("issue24", "Issue-24 targets: v3 twins (cp, ep), each method in its own process"),
        ("issue28", "Issue-28 target: dp at its memory budget (in its own process: peak memory is the row's own)"),
        ("issue34", "Issue-34 targets: dp at 1,024 GPUs, 5D keys, cpsat with transfers (each in its own process)"),
        ("issue34-plan", "Issue-34 targets: `partitioner plan` at 1,024 and 16,384 GPUs (a child process each)"),
        ("plan", "`partitioner plan` per preset (a child process each: wall, CPU and peak memory of the whole command)"),
        ("issue25", "Issue-25 target: `partitioner plan` on each new preset in <= 30 s, every stage fitting (a child "
                    "process each)"),
    ):
        rows = [r for r in records if r["sweep"] == sweep_name]
        if not rows:
            continue
        cols = ["plan"] if sweep_name in ("plan", "issue25", "issue34-plan") else methods
        lines += [f"## {title}", "", "| problem | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for label in dict.fromkeys(r["label"] for r in rows):
            cells = []
            for m in cols:
                r = next((x for x in rows if x["label"] == label and x["method"] == m), None)
                cells.append("" if r is None else _cell(r))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += _v2_against_v1(records)
    lines += [
        "Each cell: status, seconds, and the gap to the best value found (0 = best).",
        "",
        "![solver time against problem size](solvers.png)",
        "",
    ]
    (out / "solvers.md").write_text("\n".join(lines))
    _plot(records, methods, out / "solvers.png")


def _v2_against_v1(records: list[dict]) -> list[str]:
    """dp's optimum and time on each v2 problem next to its v1 twin (what the wider plan space buys and costs)."""
    rows = [r for r in records if r["sweep"] == "v2" and r["method"] == "dp"]
    pairs = []
    for r2 in (r for r in rows if r.get("version") == 2):
        twin = next(
            (r for r in rows if r.get("version") == 1 and (r["transfers"], r["objective"]) == (r2["transfers"], r2["objective"])),
            None,
        )
        if twin is not None:
            pairs.append((twin, r2))
    if not pairs:
        return []
    lines = [
        "### dp: v2 against v1 on the same problem",
        "",
        "| problem | v1 value | v2 value | v2 / v1 | v1 s (cpu) | v2 s (cpu) |",
        "|---|---|---|---|---|---|",
    ]
    for r1, r2 in pairs:
        ratio = r2["value"] / r1["value"] if r1["value"] and r2["value"] else None
        lines.append(
            f"| {'transfers' if r1['transfers'] else 'no transfers'} {r1['objective']} "
            f"| {_num(r1['value'])} ({r1['status']}) | {_num(r2['value'])} ({r2['status']}) "
            f"| {'' if ratio is None else f'{ratio:.3f}'} "
            f"| {r1['seconds']:.2f} ({r1['cpu_seconds']:.2f}) | {r2['seconds']:.2f} ({r2['cpu_seconds']:.2f}) |"
        )
    return lines + [""]


def _num(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _cell(r: dict) -> str:
    peak = (f", peak {r['peak_rss_mb']:,.0f} MB" if r["sweep"] in ("issue13", "issue28", "plan", "issue25", "issue34",
                                                                 "issue34-plan") and r.get("peak_rss_mb") else "")
    if r["value"] is None:
        return f"{r['status']} ({r['seconds']:.1f} s{peak})"
    cpu = f" (cpu {r['cpu_seconds']:.2f})" if r.get("cpu_seconds") is not None else ""
    if r["method"] == "plan":
        return f"{r['status']} {r['seconds']:.2f} s{cpu}{peak}; {r['value']:,.1f} ms ({r['message']})"
    gap = r.get("gap_to_best") or 0.0
    return f"{r['status']} {r['seconds']:.2f} s{cpu}{peak}, gap {100 * gap:.2f} %"


def _plot(records: list[dict], methods: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (sweep_name, key, xlabel) in zip(
        axes, (("layers", "layers", "layers"), ("gpus", "gpus", "GPUs"), ("layouts", "layouts", "layouts per size"))
    ):
        rows = [r for r in records if r["sweep"] == sweep_name]
        for m in methods:
            pts = [(r[key] if r[key] is not None else 5, r["seconds"]) for r in rows if r["method"] == m and r["value"] is not None]
            if pts:
                xs, ys = zip(*sorted(pts))
                ax.plot(xs, ys, marker="o", label=m)
        ax.set_xlabel(xlabel + (" (5 = all)" if sweep_name == "layouts" else ""))
        ax.set_ylabel("seconds")
        ax.set_yscale("log")
        if sweep_name != "layouts":
            ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"time as {xlabel} grow")
    if axes[0].get_legend_handles_labels()[0]:
        axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smaller sweep")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--sweeps", default=None,
        help="comma-separated sweeps to run (layers, gpus, layouts, target, commfree, v2, issue13, issue24, "
             "issue25, issue28, issue34, plan); default all but issue13, issue24, issue25, issue28, issue34 and plan",
    )
    parser.add_argument("--plan-timeout", type=float, default=900.0, help="seconds before a plan case is killed")
    parser.add_argument("--labels", default=None,
                        help="comma-separated label fragments: only the points (and plan cases) whose label holds one")
    parser.add_argument("--merge", action="store_true",
                        help="keep OUT/solvers.json's other rows: a row measured now replaces the row of the same "
                             "sweep, label and method")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # one point (JSON), records to stdout
    args = parser.parse_args(argv)
    known = set(registered_methods())
    methods = [m for m in args.methods.split(",") if m in known]
    if args.child is not None:
        fields = json.loads(args.child)
        fields["only"] = tuple(fields["only"]) if fields.get("only") else None
        rows = run_point(Point(**fields), methods, args.time_limit, args.seed)
        peak = _own_peak_mb()
        print(json.dumps([{**row, "own_peak_rss_mb": peak} for row in rows] if peak is not None else rows))
        return
    records = []
    chosen = None if args.sweeps is None else set(args.sweeps.split(","))
    wanted = None if args.labels is None else [f for f in args.labels.split(",") if f]

    def picked(label: str) -> bool:
        return wanted is None or any(f in label for f in wanted)

    if "dp" in methods or (chosen is not None and chosen & {"plan", "issue25", "issue34"}):
        records += compile_kernels()  # every timed row below starts with the kernels compiled
    for point in sweep(args.quick):
        if chosen is not None and point.sweep not in chosen:
            continue
        records += run_point(point, methods, args.time_limit, args.seed)
    if chosen is not None and "issue13" in chosen:
        for point in issue13_points():
            records += run_point_isolated(point, methods, args.time_limit, args.seed)
    if chosen is not None and "issue24" in chosen:
        for point in issue24_points():
            records += run_point_isolated(point, methods, args.time_limit, args.seed)
    if chosen is not None and "issue28" in chosen:
        for point in issue28_points():
            records += run_point_isolated(point, methods, args.time_limit, args.seed)
    if chosen is not None and "issue34" in chosen:
        for point in issue34_points():
            if picked(point.label):
                records += run_point_isolated(point, methods, args.time_limit, args.seed)
        for case in SCALE_PLAN_CASES:
            if not picked(plan_case_label(case)):
                continue
            records.append(run_plan_case(case, args.plan_timeout, sweep="issue34-plan"))
            r = records[-1]
            print(f"{r['label']:60s} {r['status']:10s} {r['seconds']:8.2f} s {r['message']}", flush=True)
    if chosen is not None and "plan" in chosen:
        for case in PLAN_CASES:
            records.append(run_plan_case(case, args.plan_timeout))
            r = records[-1]
            print(f"{r['label']:60s} {r['status']:10s} {r['seconds']:8.2f} s peak {r['peak_rss_mb']:,.0f} MB", flush=True)
    if chosen is not None and "issue25" in chosen:
        for case in V3_PLAN_CASES:
            records.append(run_plan_case(case, args.plan_timeout, sweep="issue25"))
            r = records[-1]
            print(f"{r['label']:60s} {r['status']:10s} {r['seconds']:8.2f} s {r['message']}", flush=True)
    if args.merge:
        records = merged(args.out / "solvers.json", records)
        methods += [m for m in dict.fromkeys(r.get("method") for r in records) if m in known and m not in methods]
    write_report(records, methods, args.time_limit, args.out)
    print(f"wrote {args.out / 'solvers.md'}")


def merged(path: Path, records: list[dict]) -> list[dict]:
    """The rows of ``path`` (a solvers.json) with each row of ``records`` in the place of the row of the same
    sweep, label and method (appended when there is none); the compile rows are the new ones."""
    old = json.loads(path.read_text()) if path.exists() else []
    new = {(r["sweep"], r["label"], r.get("method")): r for r in records if r["sweep"] != "compile"}
    out = [r for r in records if r["sweep"] == "compile"]
    for r in old:
        if r["sweep"] == "compile":
            continue
        out.append(new.pop((r["sweep"], r["label"], r.get("method")), r))
    return out + list(new.values())


if __name__ == "__main__":
    main()
