"""The benchmark scripts run and write their reports (tiny versions; the real runs are in benchmarks/results)."""
from __future__ import annotations

import json

from benchmarks import report, solvers


def test_solver_benchmark_point_and_report(tmp_path):
    point = solvers.Point("layers", 8, 1)
    records = solvers.run_point(point, ["dp", "greedy", "uniform"], time_limit=10, seed=0)
    assert [r["method"] for r in records] == ["dp", "greedy", "uniform"]
    dp = records[0]
    assert dp["status"] == "optimal" and dp["gap_to_best"] == 0.0
    assert all(r["gap_to_best"] is None or r["gap_to_best"] >= 0 for r in records)
    solvers.write_report(records, ["dp", "greedy", "uniform"], 10, tmp_path)
    text = (tmp_path / "solvers.md").read_text()
    assert "L=8 N=8" in text and "optimal" in text and "Machine:" in text
    assert (tmp_path / "solvers.png").stat().st_size > 0
    assert json.loads((tmp_path / "solvers.json").read_text())[0]["method"] == "dp"


def test_report_assembles_the_parts(tmp_path):
    target = solvers.Point("target", 64, 4, transfers=False)
    records = [
        {"label": target.label, "method": "dp", "status": "optimal", "seconds": 0.5, "value": 1.0, "bound": 1.0},
        {"label": target.label, "method": "cpsat", "status": "feasible", "seconds": 10.0, "value": 2.0, "bound": 1.0},
    ]
    (tmp_path / "solvers.json").write_text(json.dumps(records))
    text = report.write_report(tmp_path, quick=True).read_text()
    assert "| dp on L=64 N=32 layouts=all no transfers iteration: proven optimum in <= 1 s | optimal in 0.50 s | yes |" in text
    assert "| cpsat on L=64 N=32 layouts=all no transfers iteration: proven optimum in <= 10 s | feasible in 10.00 s, gap 50.0 % | no |" in text
