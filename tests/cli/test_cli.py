"""The CLI contract: solve / evaluate exit codes and JSON, never a traceback."""
from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_solve_lesson16_brute_json(cli, examples):
    proc = cli("solve", examples / "rebalance_4gpu.json", "--method", "brute", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "optimal" and doc["value"] == 22.0 and doc["method"] == "brute"
    assert doc["objective"] == "bottleneck" and doc["bound"] == 22.0
    stages = doc["plan"]["stages"]
    assert [s["last_layer"] - s["first_layer"] + 1 for s in stages] == [4, 11, 11, 8]
    for s in stages:
        assert set(s) >= {"first_layer", "last_layer", "devices", "dp", "tp", "device_ids", "time_ms", "fwd_ms", "bwd_ms", "memory_bytes"}
    assert doc["simulation"]["makespan_ms"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("method", ["brute", "dp"])
def test_solve_vla_toy(cli, examples, method):
    proc = cli("solve", examples / "vla_toy_2x4.json", "--method", method, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "optimal"
    assert doc["value"] == pytest.approx(256.21445621333334, rel=1e-12)


@pytest.mark.slow
def test_solve_table_marks_the_bottleneck(cli, examples):
    proc = cli("solve", examples / "vla_toy_2x4.json", "--method", "dp")
    assert proc.returncode == 0, proc.stderr
    assert "bottleneck" in proc.stdout and "dp x tp" in proc.stdout and "*" in proc.stdout
    assert "simulated 1F1B makespan" in proc.stdout


@pytest.mark.slow
def test_infeasible_exits_1_with_a_reason(cli, tmp_path, examples):
    doc = json.loads((examples / "vla_toy_2x4.json").read_text())
    doc["cluster"]["gpu_memory_bytes"] = 10**8
    path = tmp_path / "tight.json"
    path.write_text(json.dumps(doc))
    proc = cli("solve", path, "--method", "dp", "--json")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["status"] == "infeasible" and out["plan"] is None
    assert "needs at least" in out["message"] and "needs at least" in proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,words",
    [
        (["--method", "nope"], "--method: must be one of"),
        (["--objective", "speed", "--method", "dp"], "--objective: must be one of"),
        (["--time-limit", "-1", "--method", "dp"], "time limit must be > 0"),
        (["--method", "dp", "--option", "bogus=1"], "has no option 'bogus'"),
    ],
)
def test_bad_options_exit_2(cli, examples, args, words):
    proc = cli("solve", examples / "rebalance_4gpu.json", *args)
    assert proc.returncode == 2
    assert words in proc.stderr and "Traceback" not in proc.stderr


def test_missing_file_exits_2(cli, tmp_path):
    proc = cli("solve", tmp_path / "nothing.json", "--method", "dp")
    assert proc.returncode == 2 and "file not found" in proc.stderr


@pytest.mark.slow
def test_evaluate_command(cli, tmp_path, examples):
    proc = cli("solve", examples / "vla_toy_2x4.json", "--method", "dp", "--json")
    result = tmp_path / "r.json"
    result.write_text(proc.stdout)
    ok = cli("evaluate", examples / "vla_toy_2x4.json", result, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["value"] == pytest.approx(256.21445621333334, rel=1e-12)
    doc = json.loads(proc.stdout)
    doc["plan"]["stages"][0]["dp"], doc["plan"]["stages"][0]["tp"] = 1, 2
    result.write_text(json.dumps(doc))
    bad = cli("evaluate", examples / "vla_toy_2x4.json", result)
    assert bad.returncode == 1 and "rule 5" in bad.stderr
    garbage = tmp_path / "g.json"
    garbage.write_text("[")
    assert cli("evaluate", examples / "vla_toy_2x4.json", garbage).returncode == 2
