"""Format v2 through the command line: solve, the stage table, batch and compare."""
from __future__ import annotations

import json

import pytest
import yaml

from partitioner import __version__, load_problem, solve
from partitioner.batch.compare import compare

LESSON15 = "colocated_1node.json"


def test_solve_lesson15_brute_json(cli, examples):
    proc = cli("solve", examples / LESSON15, "--method", "brute", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["version"] == 2 and doc["status"] == "optimal"
    assert doc["value"] == 16.36371456 and doc["bound"] == doc["value"]
    stage, = doc["plan"]["stages"]
    assert stage["configs"] == [{"dp": 8, "tp": 1}, {"dp": 2, "tp": 4}]
    assert "dp" not in stage and "tp" not in stage  # the segments' configs differ: no one-config shorthand
    assert stage["reshard_ms"] == pytest.approx(0.03145728, rel=1e-12)
    assert stage["device_ids"] == list(range(8))
    assert doc["simulation"]["makespan_ms"] == pytest.approx(2 * 16.36371456, rel=1e-12)


def test_v1_json_has_no_v2_fields(cli, examples):
    proc = cli("solve", examples / "rebalance_4gpu.json", "--method", "brute", "--json")
    doc = json.loads(proc.stdout)
    assert doc.get("version", 1) == 1
    assert all("configs" not in s and "reshard_ms" not in s for s in doc["plan"]["stages"])


@pytest.mark.slow
def test_batch_and_compare_take_v2_problems(cli, examples, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    methods = ["brute", "dp", "cpsat", "milp", "greedy", "uniform"]
    sweep.write_text(yaml.safe_dump({"problems": [str(examples / LESSON15)], "methods": methods}))
    out = tmp_path / "results.jsonl"
    proc = cli("batch", sweep, "--out", out, "--workers", "1", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    records = {r["method"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records["brute"]["plan"]["stages"][0]["configs"] == [{"dp": 8, "tp": 1}, {"dp": 2, "tp": 4}]
    # the result format survives next to the package version
    assert all(r["format_version"] == 2 for r in records.values())
    assert all(r["version"] == __version__ for r in records.values())
    proc = cli("compare", out, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    row, = doc["problems"]
    assert row["best_value"] == 16.36371456
    for method in ("brute", "dp", "cpsat", "milp"):  # every exact method proves the same v2 optimum
        assert row["results"][method]["status"] == "optimal" and row["results"][method]["gap"] == 0, method
        assert doc["methods"][method]["conflicts"] == 0
    assert row["results"]["greedy"]["gap"] == 0
    # Megatron-LM's one config for the whole model: 21.7008 ms, 32.6 % behind
    assert row["results"]["uniform"]["gap"] == pytest.approx(21.7008 / 16.36371456 - 1, rel=1e-9)


def test_compare_flags_a_v1_only_optimum_on_a_v2_problem(examples):
    """An exact method that searched one config per stage and claims optimal is contradicted by the v2 plan."""
    problem = load_problem(examples / LESSON15)
    best = solve(problem, "brute").to_dict()
    base = {"problem": LESSON15, "problem_hash": "h", "objective": "bottleneck", "solve_seconds": 0.01}
    records = [
        {**base, "key": "a", "method": "brute", "status": "optimal", "value": best["value"], "bound": best["value"]},
        {**base, "key": "b", "method": "dp", "status": "optimal", "value": 21.7008, "bound": 21.7008},
    ]
    comparison = compare(records)
    assert comparison.methods["dp"].conflicts == 1 and comparison.methods["brute"].conflicts == 0
    assert "claims optimal" in comparison.conflicts[0]["conflict"]


@pytest.mark.slow
def test_stage_tables_show_each_segments_config_and_the_reshard(cli, examples, tmp_path):
    proc = cli("solve", examples / LESSON15, "--method", "brute")
    assert proc.returncode == 0, proc.stderr
    assert "vision 8 x 1" in proc.stdout and "llm 2 x 4" in proc.stdout
    assert "reshard ms" in proc.stdout and "0.031" in proc.stdout
    result = tmp_path / "r.json"
    result.write_text(cli("solve", examples / LESSON15, "--method", "brute", "--json").stdout)
    gantt = tmp_path / "g.png"
    sim = cli("simulate", examples / LESSON15, result, "--gantt", gantt)
    assert sim.returncode == 0, sim.stderr
    assert "vision 8 x 1" in sim.stdout and "llm 2 x 4" in sim.stdout
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    valid = cli("validate", examples / LESSON15)
    assert valid.returncode == 0 and "valid v2 problem" in valid.stdout


@pytest.mark.slow
def test_v1_stage_table_is_unchanged(cli, examples):
    proc = cli("solve", examples / "vla_toy_2x4.json", "--method", "brute")
    assert proc.returncode == 0, proc.stderr
    assert "reshard" not in proc.stdout and "dp x tp" in proc.stdout and "2 x 1" in proc.stdout
    assert "valid v1 problem" in cli("validate", examples / "vla_toy_2x4.json").stdout
