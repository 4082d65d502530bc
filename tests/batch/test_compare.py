"""Solver comparison: every summary definition on hand-made records, and a real sweep end to end."""
from __future__ import annotations

import json
import math

import pytest
import yaml

from benchmarks.synthetic import synthetic_problem
from conftest import EXAMPLES, run_cli
from partitioner import load_problem, methods
from partitioner.batch import available_cores
from partitioner.batch.compare import compare, performance_profile, to_markdown
from partitioner.problem import Problem, ProblemError, dump_problem


def rec(problem, method, status, value=None, bound=None, seconds=1.0, key=None, objective="bottleneck", **extra):
    return {
        "key": key or f"{problem}/{method}/{objective}",
        "problem": problem,
        "problem_hash": f"h-{problem}",
        "objective": objective,
        "method": method,
        "status": status,
        "value": value,
        "bound": bound,
        "solve_seconds": seconds,
        **extra,
    }


def test_gaps_wins_and_statuses_follow_the_definitions():
    records = [
        # p1: exact reaches 10 in 2 s, greedy 12 in 0.01 s, milp times out
        rec("p1", "dp", "optimal", 10.0, 10.0, seconds=2.0),
        rec("p1", "greedy", "feasible", 12.0, seconds=0.01),
        rec("p1", "milp", "timeout", seconds=8.0, time_limit=10.0),  # charged its time limit
        # p2: greedy reaches the optimum fastest; milp only a feasible plan with a bound
        rec("p2", "dp", "optimal", 4.0, 4.0, seconds=0.5),
        rec("p2", "greedy", "feasible", 4.0, seconds=0.25),
        rec("p2", "milp", "feasible", 5.0, 3.0, seconds=4.0),
        # p3: infeasible, and every method says so but milp, which errs
        rec("p3", "dp", "infeasible", seconds=0.1),
        rec("p3", "greedy", "infeasible", seconds=0.1),
        rec("p3", "milp", "error", seconds=0.1, message="boom"),
    ]
    c = compare(records)
    dp, greedy, milp = c.methods["dp"], c.methods["greedy"], c.methods["milp"]
    assert (dp.jobs, dp.solved, dp.optimal, dp.infeasible, dp.infeasible_agreed) == (3, 2, 2, 1, 1)
    assert dp.mean_gap == 0 and dp.max_gap == 0 and dp.wins == 1 and dp.conflicts == 0
    assert greedy.mean_gap == pytest.approx(0.1) and greedy.max_gap == pytest.approx(0.2)
    assert greedy.wins == 1 and greedy.optimal == 0 and greedy.infeasible_agreed == 1
    assert (milp.solved, milp.errors, milp.timeouts, milp.wins) == (1, 1, 1, 0)
    assert milp.mean_gap == pytest.approx(0.25)
    assert dp.geomean_seconds == pytest.approx((2.0 * 0.5 * 0.1) ** (1 / 3))
    assert milp.geomean_seconds == pytest.approx((10.0 * 4.0 * 0.1) ** (1 / 3))

    rows = {row.problem: row for row in c.problems}
    assert (rows["p1"].best_value, rows["p1"].verdict) == (10.0, "feasible")
    assert (rows["p2"].best_value, rows["p2"].best_bound) == (4.0, 4.0)
    assert (rows["p3"].best_value, rows["p3"].verdict) == (None, "infeasible")
    assert rows["p1"].entries["greedy"].gap == pytest.approx(0.2)

    doc = c.to_dict()
    assert set(doc) >= {"methods", "problems"}
    for stats in doc["methods"].values():
        assert {"jobs", "solved", "optimal", "mean_gap", "max_gap", "geomean_seconds", "wins"} <= set(stats)
    json.dumps(doc)  # plain JSON

    # Dolan-More ratios over the two instances with a best value: p1 (dp alone reaches it), p2 (greedy fastest)
    profile = performance_profile(c)
    assert profile["dp"] == [1.0, 2.0]
    assert profile["greedy"] == [1.0, math.inf]
    assert profile["milp"] == [math.inf, math.inf]


def test_conflicts_flag_impossible_claims_but_not_heuristic_misses():
    records = [
        rec("p", "greedy", "feasible", 10.0),
        rec("p", "dp", "optimal", 11.0, 11.0),  # "optimal" but a better plan exists
        rec("p", "milp", "feasible", 12.0, 10.5),  # a lower bound above a known plan
        rec("p", "cpsat", "infeasible"),  # an exact method's infeasibility proof, contradicted
        rec("q", "greedy", "infeasible"),  # a heuristic giving up: disputed, not a conflict
        rec("q", "dp", "optimal", 3.0, 3.0),
    ]
    c = compare(records)
    assert {(x["problem"], x["method"]) for x in c.conflicts} == {("p", "dp"), ("p", "milp"), ("p", "cpsat")}
    assert c.methods["dp"].conflicts == 1 and c.methods["greedy"].conflicts == 0
    assert c.methods["greedy"].infeasible_disputed == 1 and c.methods["cpsat"].infeasible_disputed == 1
    assert "## Conflicts" in to_markdown(c)


def test_ties_rounding_retries_and_instances():
    same = 7.0 * (1 + 1e-15)  # the same optimum summed in another order
    records = [
        rec("p", "dp", "optimal", 7.0, 7.0, seconds=0.5),
        rec("p", "brute", "optimal", same, same, seconds=0.5),  # tie on time too: both win
        rec("p", "greedy", "error", key="g"),
        rec("p", "greedy", "feasible", 7.7, key="g", seconds=0.1),  # a retry replaces the error
        # the same problem under another objective is another instance
        rec("p", "dp", "optimal", 20.0, 20.0, objective="iteration"),
    ]
    c = compare(records)
    assert c.methods["brute"].max_gap == 0 and c.methods["dp"].max_gap == 0
    assert c.methods["dp"].wins == 2 and c.methods["brute"].wins == 1  # dp is alone on the second instance
    assert c.methods["greedy"].jobs == 1 and c.methods["greedy"].errors == 0
    assert c.methods["greedy"].max_gap == pytest.approx(0.1)
    assert len(c.problems) == 2 and c.methods["dp"].jobs == 2
    with pytest.raises(ProblemError, match="no result records"):
        compare([])


def _small_problems(tmp_path):
    """Small problems the exact methods solve in well under a second, one of them infeasible."""
    paths = [str(EXAMPLES / "vla_toy_2x4.json"), str(EXAMPLES / "rebalance_4gpu.json")]
    shapes = [(6, 1, 4, None), (7, 2, 2, None), (8, 2, 4, 2), (6, 2, 4, 3)]
    for seed, (layers, nodes, gpus, layouts) in enumerate(shapes):
        for objective in ("iteration", "bottleneck"):
            problem = synthetic_problem(layers, nodes, gpus, layouts, transfers=seed != 1, seed=seed, objective=objective,
                                        name=f"small-{seed}-{objective}")
            dump_problem(problem, tmp_path / f"{problem.name}.json")
            paths.append(str(tmp_path / f"{problem.name}.json"))
    tight = load_problem(EXAMPLES / "vla_toy_2x4.json").to_dict()
    tight["name"] = "vla-toy-no-memory"
    tight["cluster"]["gpu_memory_bytes"] = 2**20
    dump_problem(Problem.from_dict(tight), tmp_path / "infeasible.json")
    paths.append(str(tmp_path / "infeasible.json"))
    return paths


EXACT = ("cpsat", "milp", "dp", "brute")


@pytest.mark.slow
def test_compare_json_on_a_real_sweep_shows_zero_gap_for_exact_methods(tmp_path):
    """Acceptance: a sweep over small problems; the exact methods agree to the last digit."""
    assert set(EXACT) <= set(methods())
    paths = _small_problems(tmp_path)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"problems": paths, "methods": [*EXACT, "greedy"], "time_limit": 120}))
    out = tmp_path / "results.jsonl"
    proc = run_cli("batch", sweep, "--out", out, "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    threads = max(1, available_cores() // 2)  # two workers share the cores
    for record in map(json.loads, out.read_text().splitlines()):
        expected = {
            "cpsat": {"num_workers": threads},
            "milp": {"threads": threads},
            "dp": {"threads": threads},
        }.get(record["method"], {})
        assert record["options"] == expected

    md, png = tmp_path / "report" / "compare.md", tmp_path / "report" / "profile.png"
    proc = run_cli("compare", out, "--json", "--markdown", md, "--profile", png)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    n = len(paths)
    assert len(doc["problems"]) == n
    for method in EXACT:
        stats = doc["methods"][method]
        assert stats["jobs"] == n
        assert stats["solved"] == stats["optimal"] == n - 1  # all but the infeasible one, proven
        assert stats["infeasible"] == stats["infeasible_agreed"] == 1
        assert stats["mean_gap"] == 0 and stats["max_gap"] == 0
        assert stats["conflicts"] == 0
    greedy = doc["methods"]["greedy"]
    assert greedy["optimal"] == 0 and greedy["max_gap"] >= greedy["mean_gap"] >= 0
    assert greedy["solved"] + greedy["infeasible"] == n
    assert sum(s["wins"] for s in doc["methods"].values()) >= n - 1
    infeasible = [p for p in doc["problems"] if p["verdict"] == "infeasible"]
    assert [p["problem"] for p in infeasible] == [str(tmp_path / "infeasible.json")]
    for p in doc["problems"]:
        if p["verdict"] == "feasible":
            values = {p["results"][m]["value"] for m in EXACT}
            assert len(values) == 1 or max(values) - min(values) <= 1e-9 * max(values)

    text = md.read_text()
    assert "| method | jobs | solved | proven optimal |" in text
    assert "![performance profile](profile.png)" in text
    assert "## Per problem" in text and "vla-toy" not in text.split("## Per problem")[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    table = run_cli("compare", out)
    assert table.returncode == 0 and "proven optimal" in table.stdout and "per problem" in table.stdout


@pytest.mark.slow
def test_compare_bad_input_exits_2(tmp_path):
    missing = run_cli("compare", tmp_path / "none.jsonl")
    assert missing.returncode == 2 and "none.jsonl: file not found" in missing.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    proc = run_cli("compare", empty)
    assert proc.returncode == 2 and "empty.jsonl: holds no result records" in proc.stderr
    assert "Traceback" not in proc.stderr
