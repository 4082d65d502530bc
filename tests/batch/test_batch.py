"""Batch sweeps: sweep files, job keys, the results file, resume after SIGKILL, failures, backends."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from benchmarks.synthetic import synthetic_problem
from conftest import EXAMPLES, ROOT, run_cli
from partitioner import __version__, load_problem, solve
from partitioner.batch import (
    ResultsFile,
    SweepError,
    available_cores,
    expand,
    job_key,
    load_sweep,
    make_jobs,
    problem_hash,
    read_results,
    run_sweep,
)
from partitioner.problem import ProblemError, dump_problem

REQUIRED = ("key", "problem", "method", "options", "status", "value", "bound", "gap", "solve_seconds", "plan",
            "message", "version", "host", "worker", "wall_seconds", "cpu_seconds")


def write_sweep(path: Path, **doc) -> Path:
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def write_synthetic(directory: Path, count: int, **kwargs) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    names = []
    for seed in range(count):
        problem = synthetic_problem(seed=seed, **kwargs)
        dump_problem(problem, directory / f"{problem.name}.json")
        names.append(f"{directory.name}/{problem.name}.json")
    return names


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- sweep files and keys


@pytest.mark.parametrize(
    "doc, field",
    [
        ({"problems": ["vla_toy_2x4.json"], "methods": ["brute"], "colour": 1}, "unknown field 'colour'"),
        ({"problems": ["vla_toy_2x4.json"]}, "methods: is missing"),
        ({"problems": ["vla_toy_2x4.json"], "methods": ["nope"]}, "methods[0]: unknown method 'nope'"),
        ({"problems": ["vla_toy_2x4.json"], "methods": ["brute"], "time_limit": 0}, "time_limit: must be a number"),
        ({"problems": ["vla_toy_2x4.json"], "methods": ["brute"], "objective": "fast"}, "objective: must be one of"),
        ({"problems": ["vla_toy_2x4.json"], "methods": ["greedy"], "options": {"greedy": {"x": 1}}},
         "options.greedy.x: method greedy has no option 'x'"),
        ({"problems": ["missing.json"], "methods": ["brute"]}, "problems[0]: "),
        ({"problems": ["*.nothing"], "methods": ["brute"]}, "problems[0]: pattern '*.nothing' matches no file"),
        ({"methods": ["brute"]}, "lists no problems"),
        ({"grid": {"model": "m", "cluster": "c", "nodes": 0, "global_batch": 8, "microbatches": 2}, "methods": ["greedy"]},
         "grid.nodes[0]: must be a positive integer"),
    ],
)
def test_bad_sweep_is_reported_with_file_and_field(tmp_path, doc, field):
    (tmp_path / "vla_toy_2x4.json").write_text((EXAMPLES / "vla_toy_2x4.json").read_text())
    sweep = write_sweep(tmp_path / "sweep.yaml", **doc)
    with pytest.raises(ProblemError) as info:
        expand(load_sweep(sweep))
    assert str(sweep) in str(info.value)
    assert field in str(info.value)


@pytest.mark.slow
def test_bad_sweep_exits_2_on_the_command_line(tmp_path):
    sweep = write_sweep(tmp_path / "sweep.yaml", problems=[str(EXAMPLES / "vla_toy_2x4.json")], methods=["nope"])
    proc = run_cli("batch", sweep, "--out", tmp_path / "r.jsonl")
    assert proc.returncode == 2
    assert "sweep.yaml: methods[0]: unknown method 'nope'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r.jsonl").exists()


def test_keys_follow_content_and_settings_not_file_or_runtime(tmp_path):
    problem = load_problem(EXAMPLES / "vla_toy_2x4.json")
    dump_problem(problem, tmp_path / "copy.yaml")
    again = load_problem(tmp_path / "copy.yaml")
    assert problem_hash(again) == problem_hash(problem)
    [a] = make_jobs(problem, "a.json", ["brute"])
    [b] = make_jobs(again, "elsewhere/b.yaml", ["brute"])
    assert a.key == b.key and len(a.key) == 32
    base = (a.problem_hash, "brute", "iteration", None, 0, {})
    assert job_key(*base) == a.key
    variants = [
        (a.problem_hash, "greedy", "iteration", None, 0, {}),
        (a.problem_hash, "brute", "bottleneck", None, 0, {}),
        (a.problem_hash, "brute", "iteration", 10.0, 0, {}),
        (a.problem_hash, "brute", "iteration", None, 1, {}),
        (a.problem_hash, "brute", "iteration", None, 0, {"max_combinations": 10}),
    ]
    assert len({job_key(*v) for v in variants} | {a.key}) == len(variants) + 1
    changed = synthetic_problem(layers=6, nodes=1, gpus_per_node=2, seed=1)
    assert problem_hash(changed) != problem_hash(synthetic_problem(layers=6, nodes=1, gpus_per_node=2, seed=2))
    assert problem_hash(changed) == problem_hash(synthetic_problem(layers=6, nodes=1, gpus_per_node=2, seed=1))


def test_glob_and_duplicates(tmp_path):
    write_synthetic(tmp_path / "probs", 3, layers=5, nodes=1, gpus_per_node=2)
    sweep = write_sweep(
        tmp_path / "sweep.yaml",
        problems=["probs/*.json", "probs/synthetic-L5-1x2-s0.json"],  # the second names s0 again
        methods=["greedy", "brute"],
    )
    expansion = expand(load_sweep(sweep))
    assert len(expansion.jobs) == 6 and expansion.duplicates == 2
    assert sorted({j.problem for j in expansion.jobs}) == [f"probs/synthetic-L5-1x2-s{s}.json" for s in range(3)]


# --------------------------------------------------------------------------- the results file


def test_results_file_cuts_a_half_written_tail_and_keeps_jsonl_valid(tmp_path):
    path = tmp_path / "r.jsonl"
    good = [json.dumps({"key": f"k{i}", "status": "optimal"}) for i in range(3)]
    path.write_text("\n".join(good) + '\n{"key": "k3", "stat')
    assert [r["key"] for r in read_results(path)] == ["k0", "k1", "k2"]  # reading alone does not modify
    assert path.read_text().endswith('"stat')
    with ResultsFile(path) as store:
        assert [r["key"] for r in store.records] == ["k0", "k1", "k2"]
        assert store.dropped_bytes == len('{"key": "k3", "stat')
        store.append({"key": "k3", "status": "feasible"})
    assert [r["key"] for r in lines_of(path)] == ["k0", "k1", "k2", "k3"]

    # a complete last record without its newline is kept, and the next one starts on a new line
    path.write_text("\n".join(good))
    with ResultsFile(path) as store:
        assert store.dropped_bytes == 0 and len(store.records) == 3
        store.append({"key": "k9", "status": "error"})
    assert [r["key"] for r in lines_of(path)] == ["k0", "k1", "k2", "k9"]

    # damage in the middle is not a crash artefact: refuse rather than guess
    path.write_text(good[0] + "\n{oops\n" + good[1] + "\n")
    with pytest.raises(ProblemError, match="line 2"):
        ResultsFile(path)


def test_a_second_writer_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultsFile(path):
        with pytest.raises(SweepError, match="another running sweep"):
            ResultsFile(path)
    with ResultsFile(path):  # released on close
        pass


# --------------------------------------------------------------------------- running sweeps


@pytest.mark.slow
def test_sweep_records_match_direct_solves_and_resume_skips(tmp_path):
    names = write_synthetic(tmp_path / "probs", 3, layers=6, nodes=2, gpus_per_node=2)
    sweep = write_sweep(
        tmp_path / "sweep.yaml", problems=[str(EXAMPLES / "vla_toy_2x4.json"), *names], methods=["brute", "greedy"],
        time_limit=60,
    )
    out = tmp_path / "results.jsonl"
    seen = []
    summary = run_sweep(sweep, out, workers=2, on_record=seen.append)
    assert summary.total == summary.ran == 8 and summary.skipped == 0
    records = lines_of(out)
    assert [r["key"] for r in records] == [r["key"] for r in seen]
    assert Counter((r["problem"], r["method"]) for r in records) == Counter(
        (p, m) for p in [str(EXAMPLES / "vla_toy_2x4.json"), *names] for m in ("brute", "greedy")
    )
    for r in records:
        assert set(REQUIRED) <= set(r)
        assert r["version"] == __version__ and r["time_limit"] == 60
        problem = load_problem(tmp_path / r["problem"] if not os.path.isabs(r["problem"]) else r["problem"])
        direct = solve(problem, r["method"])
        assert r["status"] == direct.status
        assert r["value"] == pytest.approx(direct.value, rel=1e-12)
        assert r["plan"] == direct.to_dict()["plan"]
        assert r["problem_hash"] == problem_hash(problem)
    toy = next(r for r in records if r["problem"].endswith("vla_toy_2x4.json") and r["method"] == "brute")
    assert toy["status"] == "optimal" and toy["value"] == pytest.approx(256.21445621333334)

    again = run_sweep(sweep, out, workers=2)
    assert again.ran == 0 and again.skipped == 8
    assert len(lines_of(out)) == 8


def _proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


@pytest.mark.slow
def test_sigkill_midway_then_resume_finishes_every_job_once(tmp_path):
    """Acceptance: kill -9 a running sweep, run it again, get every (problem, method) exactly once."""
    names = write_synthetic(tmp_path / "probs", 16, layers=12, nodes=2, gpus_per_node=4, layouts=2)
    sweep = write_sweep(tmp_path / "sweep.yaml", problems=names, methods=["brute", "dp"])
    out = tmp_path / "results.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "partitioner", "batch", str(sweep), "--out", str(out), "--workers", "2"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if out.exists() and out.read_text().count("\n") >= 6:
                break
            assert proc.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = lines_of(out)
    assert 6 <= len(before) < 32, "not killed midway"
    # the workers notice that the sweep is gone and exit
    pids = {r["worker"] for r in before}
    deadline = time.monotonic() + 60  # a liveness guard, generous for a loaded machine: an orphan never exits
    while time.monotonic() < deadline and any(_proc_state(p) not in (None, "Z") for p in pids):
        time.sleep(0.1)
    assert all(_proc_state(p) in (None, "Z") for p in pids), "orphaned workers kept running"
    # and a kill in the middle of a write leaves half a line: the rerun must cut it
    with open(out, "a") as f:
        f.write('{"key": "half-writ')

    proc2 = run_cli("batch", sweep, "--out", out, "--workers", "2", "--json")
    assert proc2.returncode == 0, proc2.stderr
    summary = json.loads(proc2.stdout)
    assert summary["skipped"] == len(before) and summary["ran"] == 32 - len(before)
    assert summary["dropped_bytes"] == len('{"key": "half-writ')
    records = lines_of(out)  # every line parses
    assert Counter((r["problem"], r["method"]) for r in records) == Counter((n, m) for n in names for m in ("brute", "dp"))
    assert len({r["key"] for r in records}) == 32
    assert not [r for r in records if r["status"] in ("error", "timeout")]
    assert {r["status"] for r in records} == {"optimal"}
    value = {(r["problem"], r["method"]): r["value"] for r in records}
    for name in names:  # the runs before and after the kill agree with each other
        assert value[name, "dp"] == pytest.approx(value[name, "brute"], rel=1e-9)


PLUGIN = '''
"""Test methods that misbehave on purpose, registered for a sweep through `imports:`."""
import os
import time

from partitioner.solvers.base import Candidate, register
from partitioner.solvers.greedy import solve_greedy


@register("boom")
def boom(problem, request):
    raise ValueError("boom on purpose")


@register("crash")
def crash(problem, request):
    os._exit(7)


@register("hang")
def hang(problem, request):
    time.sleep(3600)  # ignores its time limit: a sweep that does not kill it outlives the test's timeout
    return Candidate("error", message="should have been killed")


@register("threads", options=("num_workers",))
def threads(problem, request):
    found = solve_greedy(problem, request)
    return Candidate(found.status, found.plan, message=f"num_workers={request.option('num_workers', None)}")


@register("threads2", options=("threads", "hint"))
def threads2(problem, request):
    found = solve_greedy(problem, request)
    return Candidate(found.status, found.plan, message=f"threads={request.option('threads', None)}")
'''


@pytest.fixture
def plugin_env(tmp_path, monkeypatch):
    """A module of misbehaving methods on the CLI's PYTHONPATH (not imported into this test process)."""
    (tmp_path / "plugs").mkdir()
    (tmp_path / "plugs" / "batch_test_methods.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "plugs"))
    return tmp_path


@pytest.mark.slow
def test_exceptions_crashes_and_overruns_are_recorded_and_the_sweep_goes_on(plugin_env):
    tmp_path = plugin_env
    problems = [str(EXAMPLES / "vla_toy_2x4.json"), str(EXAMPLES / "rebalance_4gpu.json")]
    sweep = write_sweep(
        tmp_path / "sweep.yaml", problems=problems, methods=["boom", "crash", "hang", "greedy"], time_limit=0.5,
        imports=["batch_test_methods"],
    )
    out = tmp_path / "results.jsonl"
    # the hanging job sleeps an hour: the sweep ends within run_cli's timeout only if it kills it (no wall-clock
    # bound here: a loaded machine stretches a correct sweep's time, never to an hour)
    proc = run_cli("batch", sweep, "--out", out, "--workers", "2", "--grace", "0.5")
    assert proc.returncode == 0, proc.stderr
    records = lines_of(out)
    assert Counter((r["problem"], r["method"]) for r in records) == Counter(
        (p, m) for p in problems for m in ("boom", "crash", "hang", "greedy")
    )
    by_method = {m: [r for r in records if r["method"] == m] for m in ("boom", "crash", "hang", "greedy")}
    for r in by_method["boom"]:
        assert r["status"] == "error" and r["message"] == "ValueError: boom on purpose"
        assert "boom on purpose" in r["traceback"]
    for r in by_method["crash"]:
        assert r["status"] == "error"
        assert r["message"] == "worker process died (exit code 7) while solving"
    for r in by_method["hang"]:
        assert r["status"] == "timeout" and r["value"] is None
        assert r["message"].startswith("killed after") and "time limit of 0.5 s" in r["message"]
        assert 1.0 <= r["wall_seconds"] < 10
    assert {r["status"] for r in by_method["greedy"]} == {"feasible"}
    assert "ran 8 of 8 jobs" in proc.stdout

    # failed jobs are finished jobs: a rerun skips them, --retry-failed runs them again
    again = run_cli("batch", sweep, "--out", out, "--json")
    assert json.loads(again.stdout)["ran"] == 0
    retry = run_cli("batch", sweep, "--out", out, "--retry-failed", "--grace", "0.5", "--json")
    assert retry.returncode == 0, retry.stderr
    assert json.loads(retry.stdout)["ran"] == 6


@pytest.mark.slow
def test_thread_budget_goes_to_methods_that_declare_it(plugin_env):
    tmp_path = plugin_env
    sweep = write_sweep(
        tmp_path / "sweep.yaml", problems=[str(EXAMPLES / "vla_toy_2x4.json"), str(EXAMPLES / "rebalance_4gpu.json")],
        methods=["threads", "threads2", "greedy"], imports=["batch_test_methods"],
    )
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert run_cli("batch", sweep, "--out", one, "--workers", "1").returncode == 0
    assert run_cli("batch", sweep, "--out", two, "--workers", "2").returncode == 0
    cores = available_cores()
    for path, workers in ((one, 1), (two, 2)):
        for r in lines_of(path):
            if r["method"] == "threads":
                assert r["options"] == {"num_workers": max(1, cores // workers)}
                assert r["message"] == f"num_workers={max(1, cores // workers)}"
            elif r["method"] == "threads2":
                assert r["options"] == {"threads": max(1, cores // workers)}
                assert r["message"] == f"threads={max(1, cores // workers)}"
            else:
                assert r["options"] == {}  # greedy declares no thread option: none is passed
    # the thread count is a runtime setting, not part of what was solved
    assert {r["key"] for r in lines_of(one)} == {r["key"] for r in lines_of(two)}


@pytest.mark.slow
def test_cli_batch_end_to_end(tmp_path):
    sweep = write_sweep(
        tmp_path / "sweep.yaml", problems=[str(EXAMPLES / "vla_toy_2x4.json")], methods=["brute", "greedy"],
        objective="bottleneck", seed=3,
    )
    out = tmp_path / "deep" / "results.jsonl"
    proc = run_cli("batch", sweep, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "ran 2 of 2 jobs (feasible 1, optimal 1)" in proc.stdout
    assert "2/2" in proc.stderr  # the progress bar
    records = lines_of(out)
    assert {r["objective"] for r in records} == {"bottleneck"} and {r["seed"] for r in records} == {3}
    direct = solve(load_problem(EXAMPLES / "vla_toy_2x4.json"), "brute", objective="bottleneck")
    assert next(r for r in records if r["method"] == "brute")["value"] == pytest.approx(direct.value)


# --------------------------------------------------------------------------- Ray


@pytest.mark.slow
def test_ray_backend_matches_local_records_failures_and_resumes(plugin_env):
    pytest.importorskip("ray", reason="ray is not installed (optional: pip install 'partitioner[ray]')")
    tmp_path = plugin_env
    names = write_synthetic(tmp_path / "probs", 2, layers=6, nodes=2, gpus_per_node=2)
    sweep = write_sweep(tmp_path / "sweep.yaml", problems=names, methods=["brute", "greedy"], time_limit=60)
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    assert run_sweep(sweep, local, workers=2).ran == 4
    proc = run_cli("batch", sweep, "--out", remote, "--backend", "ray", "--workers", "2", "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ran"] == 4
    a = {r["key"]: r for r in lines_of(local)}
    b = {r["key"]: r for r in lines_of(remote)}
    assert a.keys() == b.keys()
    for key in a:
        assert (b[key]["status"], b[key]["value"], b[key]["plan"]) == (a[key]["status"], a[key]["value"], a[key]["plan"])
    # resuming a Ray results file skips the finished keys
    again = run_cli("batch", sweep, "--out", remote, "--backend", "ray", "--json", timeout=240)
    assert again.returncode == 0 and json.loads(again.stdout)["ran"] == 0

    # failures on Ray end like failures in local processes
    bad = write_sweep(
        tmp_path / "bad.yaml", problems=names[:1], methods=["boom", "crash", "hang", "greedy"], time_limit=0.5,
        imports=["batch_test_methods"],
    )
    proc = run_cli("batch", bad, "--out", remote, "--backend", "ray", "--workers", "2", "--grace", "1", "--json", timeout=240)
    assert proc.returncode == 0, proc.stderr
    # a dying Ray worker's messages (raylet, worker logs) stay off stdout: it holds the summary JSON alone
    assert json.loads(proc.stdout)["ran"] == 4, proc.stdout
    status = {r["method"]: r for r in lines_of(remote)[4:]}
    assert status.keys() == {"boom", "crash", "hang", "greedy"}
    assert (status["boom"]["status"], status["boom"]["message"]) == ("error", "ValueError: boom on purpose")
    assert status["crash"]["status"] == "error" and "died" in status["crash"]["message"]
    assert status["hang"]["status"] == "timeout"
    assert status["greedy"]["status"] == "feasible"


def test_ray_backend_without_ray_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    sweep = write_sweep(tmp_path / "sweep.yaml", problems=[str(EXAMPLES / "vla_toy_2x4.json")], methods=["greedy"])
    with pytest.raises(SweepError, match=r"pip install 'partitioner\[ray\]'"):
        run_sweep(sweep, tmp_path / "r.jsonl", backend="ray")


# --------------------------------------------------------------------------- grids over the cost model's presets


@pytest.mark.slow
def test_grid_sweep_builds_presets_records_unbuildable_points_and_resumes(tmp_path):
    from partitioner.costs import build_problem

    grid = {"model": ["openvla-7b"], "cluster": "dgx-h100", "nodes": [1, 2], "global_batch": [64, 250], "microbatches": 8}
    sweep = write_sweep(tmp_path / "sweep.yaml", grid=grid, methods=["greedy"], time_limit=120)
    out = tmp_path / "results.jsonl"
    proc = run_cli("batch", sweep, "--out", out, "--json")
    assert proc.returncode == 0, proc.stderr
    records = {r["problem"]: r for r in lines_of(out)}
    assert set(records) == {f"openvla-7b/dgx-h100/n{n}/gb{b}/m8" for n in (1, 2) for b in (64, 250)}
    for nodes in (1, 2):
        r = records[f"openvla-7b/dgx-h100/n{nodes}/gb64/m8"]
        problem = build_problem("openvla-7b", "dgx-h100", nodes=nodes, global_batch=64, microbatches=8)
        direct = solve(problem, "greedy")
        assert r["grid"] == {"model": "openvla-7b", "cluster": "dgx-h100", "nodes": nodes, "global_batch": 64,
                             "microbatches": 8}
        assert r["problem_hash"] == problem_hash(problem) and r["objective"] == "iteration"
        assert (r["status"], r["value"]) == (direct.status, pytest.approx(direct.value))
        # 250 samples do not split into 8 microbatches: the cost model says so, the sweep goes on
        bad = records[f"openvla-7b/dgx-h100/n{nodes}/gb250/m8"]
        assert bad["status"] == "error" and "not divisible" in bad["message"]
    again = run_cli("batch", sweep, "--out", out, "--json")
    assert json.loads(again.stdout)["ran"] == 0

    grid["model"] = ["openvla-7b", "openvla-8b"]
    typo = write_sweep(tmp_path / "typo.yaml", grid=grid, methods=["greedy"])
    proc = run_cli("batch", typo, "--out", tmp_path / "typo.jsonl")
    assert proc.returncode == 2
    assert "typo.yaml: grid: model 'openvla-8b': unknown model" in proc.stderr
