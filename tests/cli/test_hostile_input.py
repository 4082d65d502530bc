"""Reliability under hostile input (issue 15): every class of the issue as a regression test.

What holds on every run:

* bad input is an input error: :class:`ProblemError`/:class:`SolverError` from
  the API, exit 2 with one line on stderr naming the file from the CLI; never a
  traceback, never exit 3;
* every command answers within its time limit plus load time, in bounded
  memory (peak RSS measured in a child process), or refuses early;
* no method reports "optimal" above a valid greedy plan or brute's optimum,
  also with the largest accepted magnitudes;
* every ``--json`` output and every ``to_dict()`` is strict JSON (no NaN or
  Infinity).

The limits themselves are :mod:`partitioner.core.limits` (docs/limits.md
states them for users).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checks import cpu_seconds
from partitioner import ProblemError, SolverError, evaluate, load_problem, plan_model, simulate, solve
from partitioner.core.documents import check_document
from partitioner.core.limits import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_GBPS,
    MAX_LAYERS,
    MAX_MICROBATCHES,
    MAX_STRING,
    MAX_TIME_MS,
    MIN_GBPS,
)
from partitioner.problem import Problem
from partitioner.solvers.base import REL_TOL, Candidate, SolveRequest, _cut_short, _fallback
from partitioner.solvers.tables import compensated_prefix, range_sum
from strategies import examples, small_problems

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "examples" / "vla_toy_2x4.json"
FUZZ = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A child process that runs the CLI and writes its exit code and peak RSS (KiB) to a side file,
# so the test sees stdout/stderr exactly as a user would. The peak is the process's own high-water
# mark (VmHWM, reset by exec); getrusage's ru_maxrss on Linux keeps the size of the forking parent
# across exec, which is the whole pytest process (1.2 GB once the framework tier has imported torch).
_RUNNER = textwrap.dedent(
    """
    import resource, runpy, sys

    def peak_kib():
        try:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            pass
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    side, args = sys.argv[1], sys.argv[2:]
    sys.argv = ["partitioner", *args]
    code = 0
    try:
        runpy.run_module("partitioner", run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    with open(side, "w") as f:
        f.write(f"{code} {peak_kib()}")
    sys.exit(code)
    """
)


def run_cli(tmp_path: Path, *args: str, timeout: float = 120) -> tuple[int, str, str, float, int]:
    """``(exit code, stdout, stderr, CPU seconds, peak RSS in MiB)`` of ``partitioner ARGS`` (CPU, not wall: the
    suite runs on loaded machines)."""
    side = tmp_path / "side.txt"
    start = cpu_seconds()
    proc = subprocess.run(
        [sys.executable, "-c", _RUNNER, str(side), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)},
    )
    seconds = cpu_seconds() - start
    code, rss = side.read_text().split() if side.exists() else (proc.returncode, 0)
    assert int(code) == proc.returncode, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr, seconds, int(rss) // 1024


def assert_input_error(code: int, err: str, name: str, *words: str) -> None:
    """Exit 2, exactly one line on stderr, naming the file and saying what is wrong."""
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{err}"
    assert name in lines[0], err
    for word in words:
        assert word in lines[0], err


def strict_json(text: str):
    """Parse ``text`` as strict JSON: NaN and Infinity are refused."""

    def refuse(token):
        raise AssertionError(f"non-strict JSON constant {token}")

    return json.loads(text, parse_constant=refuse)


def toy_doc() -> dict:
    return json.loads(TOY.read_text())


def write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc) if path.suffix == ".json" else doc)
    return path


# --------------------------------------------------------------------------- 1. magnitudes


def test_issue_example_a_1e18_sentinel_is_an_input_error_naming_the_field(tmp_path):
    doc = toy_doc()
    doc["stages"] = {"min": 1, "max": 6}
    doc["layers"][1]["costs"]["dp1tp1"]["fwd_ms"] = 1e18
    with pytest.raises(ProblemError) as err:
        Problem.from_dict(doc)
    assert err.value.path == "layers[1].costs.dp1tp1.fwd_ms"
    path = write(tmp_path / "sentinel.json", doc)
    code, _, stderr, _, _ = run_cli(tmp_path, "solve", str(path), "--method", "dp")
    assert_input_error(code, stderr, str(path), "layers[1].costs.dp1tp1.fwd_ms", "must be <=")


def _huge_toy(layer: int, key: str, field: str) -> Problem:
    doc = toy_doc()
    doc["stages"] = {"min": 1, "max": 6}
    doc["layers"][layer]["costs"][key][field] = MAX_TIME_MS
    return Problem.from_dict(doc)


@pytest.mark.parametrize("layer,key,field", [(1, "dp1tp1", "fwd_ms"), (0, "dp2tp1", "bwd_ms"), (3, "dp1tp4", "fwd_ms")])
def test_largest_accepted_time_no_optimal_is_beaten_by_greedy_or_brute(layer, key, field):
    problem = _huge_toy(layer, key, field)
    greedy = solve(problem, "greedy")
    brute = solve(problem, "brute")
    assert brute.status == "optimal"
    assert greedy.ok
    assert brute.value <= greedy.value * (1 + REL_TOL)
    for method in ("dp", "cpsat", "milp"):
        result = solve(problem, method, time_limit=60)
        assert result.ok, result.message
        json.dumps(result.to_dict(), allow_nan=False)
        if result.status == "optimal":
            assert result.value <= greedy.value * (1 + REL_TOL), (method, result.value, greedy.value)
            assert result.value == pytest.approx(brute.value, rel=REL_TOL), (method, result.value, brute.value)
        if result.bound is not None:
            assert result.bound <= brute.value * (1 + 1e-6), (method, result.bound, brute.value)


@FUZZ
@given(st.data())
def test_huge_entries_on_random_problems_dp_matches_brute_and_greedy_never_beats_an_optimum(data):
    problem = data.draw(small_problems(max_layers=6))
    doc = problem.to_dict()
    for _ in range(data.draw(st.integers(1, 3))):
        layer = data.draw(st.sampled_from(doc["layers"]))
        key = data.draw(st.sampled_from(sorted(layer["costs"])))
        field = data.draw(st.sampled_from(["fwd_ms", "bwd_ms"]))
        layer["costs"][key][field] = data.draw(st.sampled_from([MAX_TIME_MS, MAX_TIME_MS / 3, 1e7 + 0.1]))
    problem = Problem.from_dict(doc)
    brute = solve(problem, "brute")
    dp = solve(problem, "dp")
    greedy = solve(problem, "greedy")
    assert dp.status == brute.status or {dp.status, brute.status} <= {"optimal"}, (dp.message, brute.message)
    if brute.status == "optimal":
        assert dp.value == pytest.approx(brute.value, rel=REL_TOL)
        if greedy.ok:
            assert brute.value <= greedy.value * (1 + REL_TOL)
    for result in (brute, dp, greedy):
        json.dumps(result.to_dict(), allow_nan=False)


@FUZZ
@given(
    st.lists(
        st.one_of(st.sampled_from([0.0, MAX_TIME_MS, 1e-9, 7.913]), st.floats(0, MAX_TIME_MS, allow_nan=False)),
        min_size=1,
        max_size=200,
    ),
    st.data(),
)
def test_range_sums_are_accurate_to_the_range_not_the_prefix(values, data):
    hi, lo = compensated_prefix(values)
    a = data.draw(st.integers(0, len(values) - 1))
    b = data.draw(st.integers(a, len(values) - 1))
    exact = math.fsum(values[a : b + 1])
    got = float(range_sum(hi, lo, a, b + 1))
    # one rounding of the range itself, plus eps^2 of the prefix for the accumulated error terms
    assert abs(got - exact) <= 4e-16 * exact + 1e-30 * len(values) * math.fsum(values) + 1e-300


@pytest.mark.parametrize(
    "change",
    [
        {"intra_node_GBps": MIN_GBPS, "inter_node_GBps": MIN_GBPS},
        {"intra_node_GBps": MAX_GBPS, "inter_node_GBps": MAX_GBPS},
        {"gpu_memory_bytes": MAX_BYTES},
    ],
)
def test_extreme_accepted_values_give_strict_json(tmp_path, change):
    doc = toy_doc()
    doc["cluster"].update(change)
    for layer in doc["layers"]:
        layer["out_bytes"] = MAX_BYTES
        for cost in layer["costs"].values():
            cost["fwd_ms"] = MAX_TIME_MS
    doc["training"]["microbatches"] = MAX_MICROBATCHES
    path = write(tmp_path / "extreme.json", doc)
    for method in ("greedy", "dp"):
        result = solve(path, method, time_limit=30)
        assert result.ok, result.message
        strict_json(json.dumps(result.to_dict()))
        assert result.to_dict()["value"] is not None
    code, out, err, _, _ = run_cli(tmp_path, "solve", str(path), "--method", "greedy", "--json")
    assert code == 0, err
    doc = strict_json(out)
    assert "simulation_skipped" in doc  # 2 x 100000 microbatches x stages is more than a solve replays


# --------------------------------------------------------------------------- 2/3. hostile files


def _yaml_fields(*skip: str) -> str:
    """The toy problem's fields as YAML lines (flow style), without ``skip``."""
    return "\n".join(f"{k}: {json.dumps(v)}" for k, v in toy_doc().items() if k not in skip) + "\n"


def _billion_laughs() -> str:
    lines = ['version: 1', "meta:", '  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, 10):
        refs = ", ".join([f"*l{i - 1}"] * 9)
        lines.append(f"  l{i}: &l{i} [{refs}]")
    doc = toy_doc()
    doc["layers"] = doc["layers"][:2]
    for key in ("cluster", "training", "layers"):
        lines.append(f"{key}: {json.dumps(doc[key])}")
    return "\n".join(lines) + "\n"


def _with(mutate) -> str:
    doc = toy_doc()
    mutate(doc)
    return json.dumps(doc)


HOSTILE = {
    # name: (file name, content or callable(path), words the one-line error must contain)
    "nodes-in-the-millions": ("p.json", _with(lambda d: d["cluster"].update(nodes=3_000_000)), ["cluster.nodes", "<= 131072"]),
    # 100,000 nodes are within MAX_NODES (131,072): the device count (x gpus_per_node) is what is refused
    "nodes-100000": ("p.json", _with(lambda d: d["cluster"].update(nodes=100_000)),
                     ["cluster", "nodes * gpus_per_node", "more than the 131072 accepted"]),
    "microbatches-1e7": ("p.json", _with(lambda d: d["training"].update(microbatches=10**7)), ["training.microbatches"]),
    "nodes-1e308": ("p.json", _with(lambda d: d["cluster"].update(nodes=1e308)), ["cluster.nodes"]),
    "memory-2^63": ("p.json", _with(lambda d: d["cluster"].update(gpu_memory_bytes=2**63)), ["cluster.gpu_memory_bytes"]),
    "weight-2^64": (
        "p.json",
        _with(lambda d: d["layers"][0]["costs"]["dp1tp1"].update(weight_bytes=2**64)),
        ["layers[0].costs.dp1tp1.weight_bytes"],
    ),
    "microbatches-1e308": ("p.json", _with(lambda d: d["training"].update(microbatches=1e308)), ["training.microbatches"]),
    "fwd-1e307": ("p.json", _with(lambda d: d["layers"][2]["costs"]["dp1tp1"].update(fwd_ms=1e307)), ["fwd_ms"]),
    "fwd-overflow-literal": ("p.json", TOY.read_text().replace('"fwd_ms": 7.913', '"fwd_ms": 1e400', 1), ["fwd_ms", "finite"]),
    "nan-in-meta": ("p.json", _with(lambda d: d.update(meta={"x": float("nan")})), ["meta.x", "finite"]),
    "huge-int-literal": ("p.json", TOY.read_text().replace('"microbatches": 8', '"microbatches": ' + "9" * 5000, 1), ["JSON"]),
    "deep-json": ("p.json", "[" * 100_000 + "]" * 100_000, ["nested"]),
    "deep-json-meta": ("p.json", _with(lambda d: d.update(meta={})).replace('"meta": {}', '"meta": ' + "[" * 500 + "]" * 500), ["nested", "meta"]),
    "deep-yaml": ("p.yaml", "[" * 100_000 + "]" * 100_000, ["nested"]),
    "deep-yaml-block": ("p.yaml", "- " * 20_000 + "x\n", ["nested"]),
    "billion-laughs": ("p.yaml", _billion_laughs(), ["values", "aliases"]),
    "recursive-alias": ("p.yaml", "meta: &m {self: *m}\n" + _yaml_fields(), ["meta.self", "itself"]),
    "duplicate-key-json": ("p.json", TOY.read_text().replace('"version": 1,', '"version": 1, "version": 2,', 1), ["duplicate key 'version'"]),
    "duplicate-key-yaml": ("p.yaml", "version: 1\nname: a\nname: b\n", ["duplicate key 'name'"]),
    "yaml-date-in-meta": ("p.yaml", "meta: {when: 2024-01-01}\n" + _yaml_fields(), ["meta.when", "date"]),
    "yaml-python-tag": ("p.yaml", "version: !!python/object/apply:os.system ['true']\n", ["YAML"]),
    "long-name": ("p.json", _with(lambda d: d.update(name="x" * 40_000_000)), ["name", "characters"]),
    "long-key": ("p.json", _with(lambda d: d.update(meta={"k" * 10_000: 1})), ["meta", "key"]),
    "too-many-layers": (
        "p.json",
        _with(lambda d: d.update(layers=[{"costs": {"dp1tp1": {"fwd_ms": 1, "bwd_ms": 1, "weight_bytes": 0, "act_bytes": 0}}}] * (MAX_LAYERS + 1))),
        ["layers", "100000"],
    ),
    "too-many-bytes-in-total": (
        "p.json",
        _with(lambda d: [c.update(weight_bytes=MAX_BYTES) for l in d["layers"] * 2 for c in l["costs"].values()] and d.update(layers=d["layers"] * 2)),
        ["weight_bytes", "2^53"],
    ),
    "bandwidth-tiny": ("p.json", _with(lambda d: d["cluster"].update(inter_node_GBps=1e-300)), ["cluster.inter_node_GBps"]),
    "file-too-large": ("p.json", lambda path: os.truncate(path, 300 * 2**20), ["256 MiB"]),
    "binary": ("p.json", "\x00\xff garbage", []),
    "not-utf8": ("p.json", lambda path: path.write_bytes(b"\xff\xfe\x00garbage"), ["UTF-8"]),
    "empty": ("p.yaml", "", ["object"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_file_is_refused_early_in_bounded_memory(tmp_path, case):
    name, content, words = HOSTILE[case]
    path = tmp_path / name
    if callable(content):
        path.write_bytes(b"")
        content(path)
    else:
        path.write_text(content, encoding="utf-8", errors="surrogateescape")
    code, out, err, seconds, rss = run_cli(tmp_path, "solve", str(path), "--method", "dp", "--time-limit", "5", "--json")
    assert_input_error(code, err, str(path), *words)
    assert out == ""
    assert seconds < 60, f"{case}: {seconds:.1f} s of CPU"
    assert rss < 1024, f"{case}: peak {rss} MiB"


def test_hostile_documents_from_the_api_are_problem_errors():
    deep: dict = {}
    node = deep
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    doc = toy_doc()
    doc["meta"] = deep
    with pytest.raises(ProblemError, match="nested too deeply"):
        Problem.from_dict(doc)
    cyclic: list = []
    cyclic.append(cyclic)
    doc["meta"] = {"loop": cyclic}
    with pytest.raises(ProblemError, match="refers to itself"):
        Problem.from_dict(doc)
    shared = ["lol"] * 10
    for _ in range(8):
        shared = [shared] * 10
    doc["meta"] = {"bomb": shared}
    start = cpu_seconds()
    with pytest.raises(ProblemError, match="more than"):
        Problem.from_dict(doc)
    assert cpu_seconds() - start < 5
    doc["meta"] = {"n": 10**400}
    with pytest.raises(ProblemError, match="meta.n"):
        Problem.from_dict(doc)
    doc["meta"] = {"s": "x" * (MAX_STRING + 1)}
    with pytest.raises(ProblemError, match="meta.s"):
        Problem.from_dict(doc)


def test_document_limits_accept_what_they_promise():
    doc = {"a": [[1, 2.5, "x" * MAX_STRING, None, True]], "b": -(2**63 - 1)}
    check_document(doc)
    nested: list = []
    for _ in range(MAX_DEPTH - 1):
        nested = [nested]
    check_document(nested)
    with pytest.raises(ProblemError, match="nested"):
        check_document([nested])


@pytest.mark.slow
@FUZZ
@given(st.data())
def test_mutated_problems_load_or_fail_with_a_problem_error_and_solve_to_strict_json(data):
    doc = toy_doc()
    hostile = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([1e308, -1e308, 2**63, 1e18, 1e9, 1e-300, 0, -1, 0.5]),
        st.text(max_size=20),
        st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
    )
    for _ in range(data.draw(st.integers(1, 3))):
        node, key = _random_slot(data, doc)
        node[key] = data.draw(hostile)
    try:
        problem = Problem.from_dict(doc)
    except ProblemError:
        return
    for method in ("greedy", "dp"):
        result = solve(problem, method, time_limit=20)
        strict_json(json.dumps(result.to_dict()))


def _random_slot(data, doc):
    """A (container, key) of the document, drawn by walking down from the root."""
    node = doc
    while True:
        key = data.draw(st.sampled_from(list(node) if isinstance(node, dict) else list(range(len(node)))))
        child = node[key]
        if not isinstance(child, (dict, list)) or not child or data.draw(st.integers(0, 3)) == 0:
            return node, key
        node = child


# --------------------------------------------------------------------------- 5. the API at the door


def test_solve_takes_a_dict_or_a_path():
    by_dict = solve(toy_doc(), "greedy")
    by_path = solve(str(TOY), "greedy")
    by_pathlib = solve(TOY, "greedy")
    assert by_dict.value == by_path.value == by_pathlib.value
    problem = load_problem(TOY)
    assert evaluate(problem, by_dict.to_dict()).value == pytest.approx(by_dict.value)
    assert evaluate(problem, by_dict).value == pytest.approx(by_dict.value)
    assert simulate(problem, by_dict.plan).makespan_ms > 0


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda p: solve(42), ProblemError, "expected a Problem"),
        (lambda p: solve(None), ProblemError, "expected a Problem"),
        (lambda p: evaluate(p, None), ProblemError, "expected a Plan"),
        (lambda p: evaluate(p, 3.5), ProblemError, "expected a Plan"),
        (lambda p: simulate(p, None), ProblemError, "expected a Plan"),
        (lambda p: solve(p, "dp", time_limit=float("nan")), SolverError, "time limit"),
        (lambda p: solve(p, "dp", time_limit=float("inf")), SolverError, "time limit"),
        (lambda p: solve(p, "dp", time_limit=-1), SolverError, "time limit"),
        (lambda p: solve(p, "dp", time_limit=0), SolverError, "time limit"),
        (lambda p: solve(p, "dp", time_limit="5"), SolverError, "time limit"),
        (lambda p: solve(p, "dp", seed=-1), SolverError, "seed"),
        (lambda p: solve(p, "nope"), SolverError, "unknown method"),
        (lambda p: solve(p, "dp", options=[1]), SolverError, "options"),
        (lambda p: solve("/nonexistent/p.json"), ProblemError, "file not found"),
    ],
)
def test_the_api_says_what_it_expected(call, error, words):
    problem = load_problem(TOY)
    with pytest.raises(error, match=words):
        call(problem)


def test_plan_model_with_zero_nodes_names_nodes():
    with pytest.raises(ProblemError) as err:
        plan_model("openvla-7b", "dgx-a100-80g", nodes=0, global_batch=64)
    assert err.value.path == "nodes"


def test_more_devices_than_accepted_is_a_refusal_not_an_infeasible_plan(tmp_path):
    """114 x gb200-nvl72 is 8,208 GPUs: over the accepted devices, which is bad input (exit 2, naming nodes),
    not a property of the problem (it answered ``infeasible: no plan found`` before, issue 35)."""
    from partitioner.core.limits import MAX_DEVICES
    from partitioner.presets import load_cluster

    gpus = load_cluster("gb200-nvl72").gpus_per_node
    nodes = MAX_DEVICES // gpus + 1
    with pytest.raises(ProblemError) as err:
        plan_model("llava-1.5-7b", "gb200-nvl72", nodes=nodes, global_batch=nodes * gpus)
    assert err.value.path == "nodes" and f"more than the {MAX_DEVICES} accepted" in str(err.value)
    code, out, err_text, _, _ = run_cli(tmp_path, "plan", "--model", "llava-1.5-7b", "--cluster", "gb200-nvl72",
                                        "--nodes", str(nodes), "--global-batch", str(nodes * gpus))
    assert_input_error(code, err_text, "nodes", "devices")
    assert "infeasible" not in out + err_text


# --------------------------------------------------------------------------- 6. quality under a limit


def test_an_exact_method_cut_short_returns_the_greedy_plan_with_its_bound():
    problem = load_problem(TOY)
    request = SolveRequest("iteration", time_limit=5.0)
    cut = Candidate("error", bound=100.0, message="dp: time limit reached before the recursion finished", timed_out=True)
    assert _cut_short(cut, request)
    found = _fallback(problem, "dp", request, cut, time.perf_counter())
    assert found.status == "feasible" and found.plan is not None and found.bound == 100.0
    assert evaluate(problem, found.plan, "iteration").value >= 100.0
    assert "greedy" in found.message and found.extra["fallback"] == "greedy"


def test_other_solver_errors_are_not_hidden_by_the_fallback():
    request = SolveRequest("iteration", time_limit=5.0)
    assert not _cut_short(Candidate("error", message="dp: the tables need 9 GiB, more than the budget"), request)
    assert not _cut_short(Candidate("infeasible", message="no plan fits"), request)
    no_limit = SolveRequest("iteration", time_limit=None)
    assert not _cut_short(Candidate("error", message="dp: time limit reached"), no_limit)


def test_dp_under_a_short_limit_on_an_86_layer_model_returns_a_plan():
    from partitioner.costs import build_problem
    from partitioner.presets import load_cluster, load_model

    problem = build_problem(load_model("openvla-7b"), load_cluster("dgx-a100-80g"), nodes=8, global_batch=2048, microbatches=64)
    greedy = solve(problem, "greedy")
    result = solve(problem, "dp", time_limit=1.0)
    assert result.plan is not None, result.message
    assert result.status in ("optimal", "feasible")
    if result.status == "optimal":
        assert result.value <= greedy.value * (1 + REL_TOL)
    evaluate(problem, result.plan)


_LIMIT_RUNNER = textwrap.dedent(
    """
    import json, sys, time
    from partitioner import load_problem, solve
    start = time.process_time()
    problem = load_problem(sys.argv[1])
    rows = {"load": time.process_time() - start}
    for method in sys.argv[3:]:
        began = time.process_time()  # CPU seconds, every thread: the wall clock stretches under load
        result = solve(problem, method, time_limit=float(sys.argv[2]))
        strict = json.dumps(result.to_dict(), allow_nan=False)  # raises on NaN or Infinity
        rows[method] = [time.process_time() - began, result.status, len(strict)]
    with open("/proc/self/status") as status:
        rows["peak_kib"] = next(int(l.split()[1]) for l in status if l.startswith("VmHWM:"))
    print(json.dumps(rows))
    """
)


@pytest.mark.slow
def test_every_method_keeps_its_time_limit_on_the_largest_accepted_model_in_bounded_memory(tmp_path):
    """MAX_LAYERS layers x 4 configs, ``time_limit=5``: each method answers (plan or reason) within the limit
    plus slack, after the load, and the process stays under 2 GiB (issue 15: cpsat, milp and greedy took
    46-70 s here; dp's tables would need 447 GiB)."""
    costs = {f"dp{d}tp1": {"fwd_ms": 1.0 / d, "bwd_ms": 2.0 / d, "weight_bytes": 1000, "act_bytes": 100} for d in (1, 2, 4, 8)}
    doc = {
        "version": 1,
        "cluster": {"nodes": 1, "gpus_per_node": 8, "gpu_memory_bytes": 10**12, "intra_node_GBps": 100.0, "inter_node_GBps": 10.0},
        "training": {"microbatches": 8},
        "layers": [{"name": f"l{i}", "out_bytes": 1000, "costs": costs} for i in range(MAX_LAYERS)],
    }
    path = write(tmp_path / "big.json", doc)
    methods = ["greedy", "cpsat", "milp", "dp", "brute", "uniform", "balanced"]
    proc = subprocess.run(
        [sys.executable, "-c", _LIMIT_RUNNER, str(path), "5", *methods],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    for method in methods:
        seconds, status, _ = rows[method]
        assert seconds <= 5 + 10, f"{method}: {seconds:.1f} s of CPU under a 5 s limit"
        assert status in ("optimal", "feasible", "error"), (method, status)
    assert rows["greedy"][1] == "feasible" and rows["uniform"][1] == "feasible"
    for method in ("cpsat", "milp", "dp"):  # exact methods cut short answer their best known plan
        assert rows[method][1] == "feasible", method
    assert rows["peak_kib"] < 2 * 2**20, f"peak {rows['peak_kib'] // 1024} MiB"


# --------------------------------------------------------------------------- 3/4. environment and output contract

_FSIZE_RUNNER = textwrap.dedent(
    """
    import resource, runpy, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, like a full disk
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    sys.argv = ["partitioner", *sys.argv[2:]]
    runpy.run_module("partitioner", run_name="__main__")
    """
)


def _sweep(tmp_path: Path) -> Path:
    examples = ROOT / "examples"
    problems = [str(examples / name) for name in ("vla_toy_2x4.json", "rebalance_4gpu.json", "colocated_1node.json")]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"problems": problems, "methods": ["greedy", "uniform"]}))
    return path


@pytest.mark.slow
def test_a_full_disk_during_batch_is_one_line_naming_the_file_and_the_resume_loses_nothing(tmp_path):
    sweep, out = _sweep(tmp_path), tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["batch", str(sweep), "--out", str(out), "--workers", "1", "--no-progress"]
    full = subprocess.run([sys.executable, "-c", _FSIZE_RUNNER, "1500", *args], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert_input_error(full.returncode, full.stderr, str(out), "cannot write a record")
    assert out.stat().st_size <= 1500
    resumed = subprocess.run([sys.executable, "-m", "partitioner", *args, "--json"], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert resumed.returncode == 0, resumed.stderr
    summary = strict_json(resumed.stdout)
    assert summary["dropped_bytes"] > 0  # the half-written line of the failed write was cut
    records = [strict_json(line) for line in out.read_text().splitlines()]
    assert len(records) == len({r["key"] for r in records}) == 6


def test_stdout_holds_only_the_json_while_a_sweep_runs(tmp_path):
    code = textwrap.dedent(
        """
        import os, subprocess, sys
        from partitioner.cli.common import stdout_to_stderr
        with stdout_to_stderr():
            print("noise from python")
            os.write(1, b"noise on fd 1\\n")
            subprocess.run([sys.executable, "-c", "print('noise from a child process')"])
        print('{"ok": true}')
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert strict_json(proc.stdout) == {"ok": True}
    assert proc.stderr.count("noise") == 3


@pytest.mark.slow
def test_batch_json_is_pure_strict_json(tmp_path):
    sweep, out = _sweep(tmp_path), tmp_path / "out.jsonl"
    code, stdout, stderr, _, _ = run_cli(tmp_path, "batch", str(sweep), "--out", str(out), "--workers", "1", "--json")
    assert code == 0, stderr
    summary = strict_json(stdout)
    assert summary["total"] == 6 and summary["ran"] == 6
    for line in out.read_text().splitlines():
        strict_json(line)


# --------------------------------------------------------------------------- 5. installing from a read-only checkout


@pytest.mark.slow
def test_building_the_package_writes_nothing_into_the_source_tree(tmp_path):
    source = tmp_path / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], capture_output=True, cwd=ROOT, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((ROOT / name).read_bytes())
    before = sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    args = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-q", "-w", str(tmp_path / "wheels"), str(source)]
    try:
        import wheel  # noqa: F401  (then the installed setuptools can build without an isolated environment)

        args.insert(4, "--no-build-isolation")
    except ImportError:
        pass
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    after = sorted(str(p.relative_to(source)) for p in source.rglob("*"))
    assert after == before, sorted(set(after) - set(before))[:10]
    assert list((tmp_path / "wheels").glob("partitioner-*.whl"))


def test_the_limits_page_states_the_limits_the_code_enforces():
    from partitioner.core import limits

    section = (ROOT / "docs" / "limits.md").read_text()
    assert section.startswith("# Accepted ranges and resource limits")
    stated = {
        "MAX_TIME_MS": "1e9 ms",
        "MAX_BYTES": "2^50",
        "MAX_TOTAL_BYTES": "2^53",
        "MIN_GBPS": "1e-6",
        "MAX_GBPS": "1e6 GB/s",
        "MAX_NODES": "..= 131 072,",
        "MAX_GPUS_PER_NODE": "..= 1024",
        "MAX_DEVICES": ", ..= 131 072 |",
        "MAX_LAYERS": "1 ..= 100 000",
        "MAX_MICROBATCHES": "..= 100 000",
        "MAX_VIRTUAL_STAGES": "..= 1024",
        "MAX_EDGES": "..= 1 000 000",
        "MAX_GLOBAL_BATCH": "1 ..= 16 777 216 (2^24)",
        "MIN_FPS": "0.001 ..= 1e6",
        "MAX_BLOCK_NORMS": "`block_norms`",
        "MAX_FILE_BYTES": "256 MiB",
        "MAX_DEPTH": "..= 64 levels",
        "MAX_VALUES": "2^24 values",
        "MAX_STRING": "..= 4096 characters",
        "SOLVE_REPLAY_OPS": "200 000 operations",
        "MAX_REPLAY_OPS": "1 000 000 operations",
    }
    values = {
        "MAX_TIME_MS": 1e9, "MAX_BYTES": 2**50, "MAX_TOTAL_BYTES": 2**53, "MIN_GBPS": 1e-6, "MAX_GBPS": 1e6,
        "MAX_NODES": 131_072, "MAX_GPUS_PER_NODE": 1024, "MAX_DEVICES": 131_072, "MAX_LAYERS": 100_000,
        "MAX_MICROBATCHES": 100_000, "MAX_VIRTUAL_STAGES": 1024, "MAX_EDGES": 1_000_000, "MAX_GLOBAL_BATCH": 2**24,
        "MIN_FPS": 1e-3, "MAX_BLOCK_NORMS": 8, "MAX_FILE_BYTES": 256 * 2**20,
        "MAX_DEPTH": 64, "MAX_VALUES": 2**24, "MAX_STRING": 4096, "SOLVE_REPLAY_OPS": 200_000, "MAX_REPLAY_OPS": 1_000_000,
    }
    for name, words in stated.items():
        assert getattr(limits, name) == values[name], f"{name} changed: update docs/limits.md"
        assert words in section, f"docs/limits.md does not state {name} ({words!r})"
