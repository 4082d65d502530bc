"""dp's kernel paths (:mod:`partitioner.solvers.dp.compiled.engine`): the Python functions, their ahead-of-time
module and their just-in-time twins fill the same tables bit for bit; the compiled set covers every signature
the dp calls; the rule that picks a path; and a cold numba cache, where nothing compiles under a time limit it
cannot keep."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitioner import load_problem, solve
from partitioner.problem import Problem
from partitioner.solvers.dp import recursion as dp_recursion
from partitioner.solvers.dp.compiled import engine
from partitioner.solvers.dp.options import GPipeSpec, ZeroBubbleSpec
from partitioner.solvers.dp.solver import DPModel
from partitioner.solvers.errors import OutOfTime
from strategies import small_problems, small_v2_problems

ROOT = Path(__file__).resolve().parents[3]
TOY = ROOT / "examples" / "vla_toy_2x4.json"


def bits(array: np.ndarray) -> np.ndarray:
    """The float64 array's bit patterns (so -0.0 and 0.0 differ, as do NaNs)."""
    return np.ascontiguousarray(array, dtype=np.float64).view(np.int64)


def with_transfers(problem: Problem, floor: int, schedule: str) -> Problem:
    doc = problem.to_dict()
    for n, layer in enumerate(doc["layers"]):
        layer["out_bytes"] = max(layer["out_bytes"], floor * (n + 1))
    doc["training"]["schedule"] = schedule
    return Problem.from_dict(doc)


def everything(problem: Problem, parts, kind: str, mode: str, quantile: float) -> list[np.ndarray]:
    """What the kernels compute for ``problem``: every level of the recursion's tables (level 1 first),
    then the stage tables at every stash (the options too, under ``parts``) and the device band."""
    model = DPModel(problem)
    model.parts = parts
    model.prepare()
    out = []
    for i in range(len(model.sizes)):
        for stash in sorted(set(model.stash_of_level[1:])):
            out.append(model.costs.matrix(i, stash))
            if parts:
                out += list(model.costs.options(i, stash, parts))
    finite = [v for i in range(len(model.sizes)) for v in model.compute_matrix(i, 1).ravel() if math.isfinite(v)]
    limit = math.inf if not math.isfinite(quantile) or not finite else float(np.quantile(finite, quantile))
    if parts:
        limit *= 3 * model.m
        model.spec = {"uw": ZeroBubbleSpec(model.m, 1, every_level=True), "fb": GPipeSpec("B")}[parts]
    else:
        out.append(dp_recursion.prefix_devices(model, limit).astype(np.float64))
    auto = model._automaton_for(model.natural_placement() if kind == "natural" else kind)
    X = model._transfer_table(auto) if kind != "none" else np.zeros((model.L, len(auto.categories)))
    tables = model.recursion(auto, X, mode, limit, None)
    kept = [x[level].copy() for level in range(1, tables.top + 1) for x in (tables.R, tables.lo, tables.hi,
                                                                              tables.first_rows)]
    model.keep_rows, model._pool, model._free_table = True, None, None  # every row too, as the tests keep them
    rows = model.recursion(auto, X, mode, limit, None)
    return kept + [rows.rows[level].copy() for level in range(1, rows.top + 1)] + out


def only_declared_signatures() -> None:
    """No kernel of the compiled set compiled a signature beyond :data:`.engine.SIGNATURES` (a call whose
    types differ from the declared ones would compile on the spot, which warmup could not have done). The
    ahead-of-time module holds the declared signatures only: a call of other types raises there."""
    for label, disp, _ in engine._entries(engine.compiled_kernels(compile=True)):
        if not hasattr(disp, "signatures"):
            continue  # an entry point of the ahead-of-time module
        part, name = label.split(".")
        assert len(disp.signatures) == len(engine.SIGNATURES[(part, name)]), (label, disp.signatures)


def both_paths(monkeypatch, *args, paths=("python", "compiled")) -> list[list[np.ndarray]]:
    found = []
    for path in paths:
        engine.reset()
        monkeypatch.setenv("PARTITIONER_DP_KERNELS", path)
        found.append(everything(*args))
    engine.reset()
    only_declared_signatures()
    return found[0], found[1]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    st.one_of(small_problems(max_layers=7), small_v2_problems(max_layers=7)),
    st.sampled_from([("1f1b", None), ("zb-h1", "uw"), ("gpipe", "fb")]),
    st.sampled_from(["natural", "bins", "none"]),
    st.sampled_from(["minsum", "minmax"]),
    st.sampled_from([math.inf, 0.4, 0.8]),
    st.integers(0, 3000),
)
def test_python_and_compiled_kernels_compute_the_same_bits_on_random_problems(monkeypatch, problem, schedule, kind,
                                                                                mode, quantile, floor):
    name, parts = schedule
    problem = with_transfers(problem, floor, name)
    python, compiled = both_paths(monkeypatch, problem, parts, kind, mode, quantile)
    assert len(python) == len(compiled)
    for x, y in zip(python, compiled):
        assert x.shape == y.shape and np.array_equal(bits(x), bits(y))


@pytest.mark.parametrize("parts", [None, "uw", "fb"])
@pytest.mark.parametrize("kind, mode, quantile", [("natural", "minsum", 0.9), ("bins", "minmax", math.inf),
                                                   ("natural", "minmax", 0.85)])
def test_python_and_compiled_kernels_agree_on_a_bucketed_synthetic_problem(monkeypatch, parts, kind, mode, quantile):
    # 12 layers x 8 GPUs, three microbatches: several size groups, placement states and the self-feeding level;
    # the ahead-of-time module and the just-in-time twins against the Python functions
    from benchmarks.synthetic import synthetic_problem

    problem = synthetic_problem(12, 2, 4, layouts=None, transfers=True, seed=5, microbatches=3)
    python, *compiled = both_paths(monkeypatch, problem, parts, kind, mode, quantile,
                                   paths=("python", "compiled", "jit"))
    assert np.isfinite(python[1]).any() and np.isfinite(python[2]).any()  # levels 2 and 3 (the bucket)
    for other in compiled:
        assert len(other) == len(python)
        for x, y in zip(python, other):
            assert np.array_equal(bits(x), bits(y))


def test_the_compiled_set_covers_every_signature_the_dp_calls(monkeypatch):
    # compiled once with the declared signatures, solves of every schedule, objective, placement and format
    # add none: a warmed-up cache is all a later solve needs
    from benchmarks.synthetic import synthetic_problem

    monkeypatch.setenv("PARTITIONER_DP_KERNELS", "compiled")
    kernels = engine.compiled_kernels(compile=True)
    toy = load_problem(TOY)
    problems = [toy, synthetic_problem(10, 2, 4, layouts=None, transfers=True, seed=1, microbatches=3)]
    doc = toy.to_dict()
    doc["cluster"]["intra_node_GBps"] = doc["cluster"]["inter_node_GBps"] / 2  # the exact placement automaton
    problems.append(Problem.from_dict(doc))
    problems += [load_problem(ROOT / "examples" / name) for name in ("colocated_1node.json", "rebalance_4gpu.json")]
    for problem in problems:
        for schedule in ("1f1b", "zb-h1", "gpipe"):
            doc = problem.to_dict()
            doc["training"]["schedule"] = schedule
            for objective in ("iteration", "bottleneck"):
                assert solve(Problem.from_dict(doc), "dp", objective=objective).status == "optimal"
    assert engine.compiled_kernels() is kernels
    only_declared_signatures()


# --------------------------------------------------------------------------- the rule


@pytest.fixture
def cold(monkeypatch):
    """A process whose disk cache was probed cold; compiling is recorded, not done."""
    engine.reset()
    monkeypatch.delenv("PARTITIONER_DP_KERNELS", raising=False)
    calls = []
    fake = engine.Kernels(engine.PYTHON.levels, engine.PYTHON.stages, True)

    def compiled_kernels(compile: bool = True):
        calls.append(compile)
        if compile:
            engine._STATE.compiled = fake
            return fake
        engine._STATE.cold = True
        return None

    monkeypatch.setattr(engine, "compiled_kernels", compiled_kernels)
    monkeypatch.setattr(engine, "ahead_of_time", lambda: None)  # no module on disk
    yield calls, fake
    engine.reset()


def units(seconds: float) -> float:
    return seconds / engine.PYTHON_SECONDS_PER_UNIT


def test_a_small_call_runs_in_python_without_looking_at_the_cache(cold):
    calls, _ = cold
    assert engine.pick(units(engine.SMALL_SECONDS / 2), None) is engine.PYTHON
    assert calls == []


def test_small_calls_load_a_warm_cache_once_python_has_cost_more_than_the_load(monkeypatch):
    """Many small calls (a v2 solve's stage tables) must not stay in Python when a load would be cheaper."""
    engine.reset()
    monkeypatch.delenv("PARTITIONER_DP_KERNELS", raising=False)
    fake = engine.Kernels(engine.PYTHON.levels, engine.PYTHON.stages, True)
    calls = []

    def compiled_kernels(compile: bool = True):  # a warm disk cache: loading needs no compile
        calls.append(compile)
        engine._STATE.compiled = fake
        return fake

    monkeypatch.setattr(engine, "compiled_kernels", compiled_kernels)
    monkeypatch.setattr(engine, "ahead_of_time", lambda: None)  # numba's cache only, no module on disk
    small = units(engine.SMALL_SECONDS / 2)
    assert engine.pick(small, None) is engine.PYTHON and calls == []
    engine.account(engine.PYTHON, engine.LOAD_SECONDS)
    assert engine.pick(small, None) is fake and calls == [False]
    engine.reset()


def test_small_calls_stay_in_python_on_a_cold_cache(cold):
    calls, _ = cold
    engine.account(engine.PYTHON, engine.LOAD_SECONDS)
    assert engine.pick(units(engine.SMALL_SECONDS / 2), None) is engine.PYTHON  # probes the cache: cold
    assert engine.pick(units(engine.SMALL_SECONDS / 2), None) is engine.PYTHON
    assert calls == [False]


def test_a_cold_cache_compiles_when_python_would_cost_more_and_time_allows(cold):
    calls, fake = cold
    assert engine.pick(units(2 * engine.COMPILE_SECONDS), None) is fake
    assert calls == [False, True]
    assert "compiled the dp kernels" in engine.take_note()


def test_python_seconds_spent_count_toward_compiling(cold):
    calls, fake = cold
    work = units(engine.COMPILE_SECONDS / 3)
    assert engine.pick(work, None) is engine.PYTHON  # cheaper than compiling, so far
    engine.account(engine.PYTHON, engine.COMPILE_SECONDS * 0.9)
    assert engine.pick(work, None) is fake  # spent + this call's estimate passes the compile
    assert calls[-1] is True


def test_a_near_deadline_runs_python_when_it_fits_and_refuses_when_nothing_does(cold, monkeypatch):
    import time

    calls, _ = cold
    monkeypatch.setattr(engine, "slowdown", lambda: 1.0)  # an idle machine (the load average is the test's)
    deadline = time.perf_counter() + engine.COMPILE_SECONDS  # too little to compile (needs twice as much)
    assert engine.pick(units(engine.COMPILE_SECONDS / 4), deadline) is engine.PYTHON
    assert "Python" in engine.take_note()
    with pytest.raises(OutOfTime):
        engine.pick(units(4 * engine.COMPILE_SECONDS), deadline)
    assert "not compiled" in engine.take_note()
    assert True not in calls


def test_under_load_a_python_call_must_fit_the_time_left_at_the_machines_slowdown(cold, monkeypatch):
    """A Python kernel call cannot be interrupted: at a load of 8 on 2 cores (slowdown 4) a call whose idle
    estimate is a third of the time left would run past the deadline, so it is refused (issue 35)."""
    import time

    monkeypatch.setattr(engine, "slowdown", lambda: 4.0)
    deadline = time.perf_counter() + engine.COMPILE_SECONDS
    with pytest.raises(OutOfTime):
        engine.pick(units(engine.COMPILE_SECONDS / 3), deadline)
    assert engine.pick(units(engine.COMPILE_SECONDS / 8), deadline) is engine.PYTHON


# --------------------------------------------------------------------------- a cold cache, for real


def run(args: list[str], cache: Path, timeout: float = 300, **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(cache), **env}
    full.pop("PARTITIONER_DP_KERNELS", None)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=full, timeout=timeout)


def compiled_files(cache: Path) -> list[Path]:
    """numba's cache files and the ahead-of-time module, wherever under ``cache``."""
    return [p for p in cache.rglob("*") if p.suffix in (".nbc", ".nbi", ".so", ".pyd")]


def test_a_cold_cache_solves_the_toy_optimally_within_its_time_limit_compiling_nothing(tmp_path):
    """On an empty cache the toy runs the Python path: optimal within 1 s of CPU, nothing compiled. (The
    limit given is generous: what a loaded machine does to the wall clock is a benchmark, REPORT.md "First
    run after install"; here the work is bounded, in CPU seconds.)"""
    proc = run(["-m", "partitioner", "solve", str(TOY), "--method", "dp", "--time-limit", "30", "--json"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "optimal", result["message"]
    assert compiled_files(tmp_path) == []
    assert "compiling" not in proc.stderr
    script = ("import json, time\n"
              "from partitioner import load_problem, solve\n"
              f"p = load_problem({str(TOY)!r})\n"
              "c = time.process_time()\n"
              "r = solve(p, 'dp', time_limit=30)\n"
              "print(json.dumps([time.process_time() - c, r.status]))\n")
    proc = run(["-c", script], tmp_path)
    assert proc.returncode == 0, proc.stderr
    cpu, status = json.loads(proc.stdout)
    assert status == "optimal" and cpu <= 1.0, (cpu, status)
    assert compiled_files(tmp_path) == []


def test_probing_a_cold_cache_compiles_nothing(tmp_path):
    script = ("from partitioner.solvers.dp.compiled import engine\n"
              "k = engine._build()\n"
              "assert engine.load_cached(k) is None\n"
              "assert all(not d.signatures for _, d, _ in engine._entries(k))\n"
              "print('ok')\n")
    proc = run(["-c", script], tmp_path, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    assert [p for p in tmp_path.rglob("*.nbc")] == []


def test_a_large_solve_on_a_cold_cache_keeps_a_short_time_limit_and_says_why(tmp_path):
    # the Python path would need minutes and compiling more than the limit: the best known plan, at once,
    # with the reason; nothing compiled
    script = ("import json, time\n"
              "from partitioner import solve\n"
              "from partitioner.costs import build_problem\n"
              "p = build_problem('openvla-7b', 'dgx-a100-80g', nodes=8, global_batch=2048, microbatches=32)\n"
              "t = time.process_time()\n"
              "r = solve(p, 'dp', objective='iteration', time_limit=3)\n"
              "print(json.dumps([time.process_time() - t, r.status, r.message]))\n")
    proc = run(["-c", script], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cpu, status, message = json.loads(proc.stdout)  # CPU seconds of the solve, every thread (not wall: load)
    assert status == "feasible" and cpu <= 3 + 2, (cpu, message)
    assert "not compiled" in message
    assert compiled_files(tmp_path) == []


def test_warmup_says_what_it_did_on_stderr_only(cli):
    first = cli("warmup")
    assert first.returncode == 0, first.stderr
    assert first.stdout == ""
    assert "dp kernels" in first.stderr
    again = cli("warmup")
    assert again.returncode == 0 and "compiled already" in again.stderr


@pytest.mark.slow
def test_warmup_builds_a_module_that_later_processes_load_without_numba(tmp_path):
    # the start-up cost of a process (issue 34): the ahead-of-time module is one import, no numba
    built = run(["-c", "from partitioner.solvers.dp.compiled import engine\n"
                       "compiled, _ = engine.warmup()\n"
                       "assert compiled and engine._STATE.aot_failed is None, engine._STATE.aot_failed\n"], tmp_path,
                timeout=600)
    assert built.returncode == 0, built.stderr
    assert [p for p in compiled_files(tmp_path) if p.suffix in (".so", ".pyd")], "no module written"
    script = ("import sys, json\n"
              "from partitioner import load_problem, solve\n"
              "from partitioner.solvers.dp.compiled import engine\n"
              f"r = solve(load_problem({str(TOY)!r}), 'dp')\n"
              "k = engine.compiled_kernels(compile=False)\n"
              "print(json.dumps([r.status, k is not None, 'numba' in sys.modules]))\n")
    proc = run(["-c", script], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["optimal", True, False]
