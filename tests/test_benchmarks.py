"""The benchmark scripts run and write their reports (tiny versions; the real runs are in benchmarks/results)."""
from __future__ import annotations

import json

import pytest

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


def test_solver_report_says_what_compiling_the_kernels_took(tmp_path):
    rows = [{"sweep": "compile", "label": "compile the dp kernels (cold cache)", "method": "dp", "status": "ok",
             "seconds": 9.5, "value": None, "bound": None},
            {"sweep": "compile", "label": "warm the package's kernel cache", "method": "dp", "status": "ok",
             "seconds": 1.25, "value": None, "bound": None}]
    solvers.write_report(rows, ["dp"], 10, tmp_path)
    text = (tmp_path / "solvers.md").read_text()
    assert "compile the dp kernels (cold cache): ok, 9.50 s; warm the package's kernel cache: ok, 1.25 s" in text


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


def test_compact_knobs_collapses_equal_stages():
    seg = lambda zero, rec: {"layers": [0, 1], "dp": 8, "tp": 1, "zero": zero, "recompute": rec}  # noqa: E731
    knobs = [
        {"stage": 0, "segments": [seg(1, "none"), seg(1, "selective")]},
        {"stage": 1, "segments": [seg(1, "none")]},
        {"stage": 2, "segments": [seg(1, "none")]},
        {"stage": 3, "segments": [seg(3, "full")]},
    ]
    assert report.compact_knobs(knobs) == "Z1/Z1+rs · 2x Z1 · Z3+rf"
    assert report.compact_knobs([]) == ""


def test_report_plan_quality_and_schedules_sections(tmp_path):
    base = {"simulated_ms": 1100.0, "iteration_ms": 1100.0, "predicted_ms": 1100.0, "microbatches": 16,
            "meshes": ["16:16x1"], "knobs": "Z3", "mfu": 0.5, "message": ""}
    row = {"model": "pi0", "cluster": "dgx-h100", "nodes": 2, "global_batch": 1024, "status": "optimal", "message": "",
           "seconds": 3.0, "meshes": ["8:8x1", "8:8x1"], "knobs": "2x Z1", "microbatches": 32, "simulated_ms": 1000.0,
           "baseline_method": "fsdp", "baselines": {"fsdp": base, "megatron-uniform": {"message": "no fit"}},
           "speedup": 1.1,
           "schedules": {"rows": [
               {"schedule": "1f1b", "virtual_stages": 1, "plan_source": "plan", "ok": True, "iteration_ms": 1050.0},
               {"schedule": "zb-h1", "virtual_stages": 1, "plan_source": "plan", "ok": True, "iteration_ms": 1000.0},
               {"schedule": "interleaved", "virtual_stages": 2, "plan_source": "baseline", "ok": True, "iteration_ms": 900.0},
           ]}}
    dropped = {"model": "qwen2-vl-72b", "cluster": "dgx-h200", "nodes": 16, "global_batch": 1024, "status": "dropped",
               "message": "not measured in this run: planning took more than 240 s", "seconds": 240.0}
    (tmp_path / "plans.json").write_text(json.dumps([row, dropped]))
    (tmp_path / "schedules.md").write_text("# Schedules on the presets\n\npreamble\n\n## pi0 on 2 x dgx-h100\n\n| plan |\n")
    text = report.write_report(tmp_path, quick=True).read_text()
    # the kept schedule is the fastest plan row's (a baseline row is not the plan's)
    assert ("| pi0 | 2 x dgx-h100, 1024 | 8:8x1 8:8x1 | 32 | zb-h1 | 1,000.0 | does not fit (no fit) | "
            "1,100.0 (16:16x1; Z3; m 16) | fsdp | 1.100 x | 2x Z1 | 3 s |") in text
    assert "| qwen2-vl-72b | 16 x dgx-h200, 1024 | dropped: not measured in this run" in text
    assert "## 5. Schedules" in text and "### pi0 on 2 x dgx-h100" in text and "preamble" not in text
    assert "On 0 of 1 measured cases" in text
    assert "pi0 on 2 x dgx-h100, batch 1024: 1.100 x, plan 8:8x1 + 8:8x1 against fsdp 16:16x1" in text


@pytest.mark.slow
def test_issue13_rows_run_in_their_own_process_with_their_own_peak_memory():
    point = solvers.Point("issue13", 8, 1, transfers=False, only=("dp",))
    records = solvers.run_point_isolated(point, ["dp", "greedy"], time_limit=10, seed=0)
    assert [r["method"] for r in records] == ["dp"]  # greedy is not measured on a dp-only point
    dp = records[0]
    assert dp["status"] == "optimal" and dp["label"] == point.label
    assert 10 < dp["peak_rss_mb"] < 3 * 1024 and dp["process_cpu_seconds"] >= dp["cpu_seconds"] > 0


@pytest.mark.slow
def test_plan_case_reports_errors_and_kills_a_slow_child():
    bad = solvers.run_plan_case(("no-such-model", "dgx-h100", 1, 256), timeout=120)
    assert bad["status"] == "error" and "unknown model" in bad["message"] and bad["peak_rss_mb"] > 0
    slow = solvers.run_plan_case(("seed-vla-8gpu", "dgx-a100-80g", 1, 256), timeout=0.5)
    assert slow["status"] == "timeout" and "killed after 0.5 s" in slow["message"] and slow["seconds"] < 60


def test_issue13_table_says_met_only_within_time_and_memory(tmp_path):
    twin = report.V2_TWIN
    label = "L=256 N=256 layouts=all no transfers iteration"
    rows = [
        {"sweep": "issue13", "label": label, "method": "dp", "status": "optimal", "seconds": 2.0, "cpu_seconds": 1.9,
         "peak_rss_mb": 500.0, "value": 1.0, "version": 1, "transfers": False},
        {"sweep": "issue13", "label": label + twin, "method": "dp", "status": "optimal", "seconds": 2.0,
         "cpu_seconds": 1.9, "peak_rss_mb": 4000.0, "value": 1.0, "version": 2, "transfers": False},
        {"sweep": "plan", "label": "plan pi0 on 2 x dgx-h100, batch 1024", "method": "plan", "model": "pi0",
         "cluster": "dgx-h100", "nodes": 2, "global_batch": 1024, "status": "feasible", "seconds": 12.0,
         "cpu_seconds": 11.0, "peak_rss_mb": 300.0, "value": 1000.0},
    ]
    (tmp_path / "issue13").mkdir()
    (tmp_path / "issue13" / "solvers.json").write_text(json.dumps(rows))
    text = "\n".join(report.issue13_targets(tmp_path))
    assert ("| dp, 256 layers x 256 GPUs, no transfers, iteration: optimal in <= 3 s | optimal in 2.00 s, cpu 1.90 s, "
            "peak 500 MB | yes |") in text
    assert "(v2 twin: 3 variants, per-segment configs): optimal in <= 3 s | optimal in 2.00 s, cpu 1.90 s, peak 4,000 MB | no |" in text
    assert "--nodes 2 --global-batch 1024`: <= 10 s, peak <= 3 GiB | feasible in 12.00 s, cpu 11.00 s, peak 300 MB | no |" in text
    assert "| dp, 64 layers x 256 GPUs with transfers, iteration: optimal in <= 10 s | not measured | no |" in text


def test_issue25_table_says_met_only_when_every_stage_fits_within_30_s(tmp_path):
    def row(label, status, seconds, message):
        return {"sweep": "issue25", "label": label, "method": "plan", "status": status, "seconds": seconds,
                "load_average": 2.0, "message": message}

    rows = [row("plan a", "optimal", 12.0, "schedule 1f1b, m 8, every stage fits"),
            row("plan b", "feasible", 31.0, "schedule 1f1b, m 8, every stage fits"),
            row("plan c", "feasible", 5.0, "schedule 1f1b, m 8, A STAGE DOES NOT FIT"),
            row("plan d", "timeout", 300.0, "killed after 300 s")]
    (tmp_path / "issue25").mkdir()
    (tmp_path / "issue25" / "solvers.json").write_text(json.dumps(rows))
    lines = [line for line in report.issue25_targets(tmp_path) if line.startswith("| plan")]
    assert [line.rsplit("|", 2)[-2].strip() for line in lines] == ["yes", "no", "no", "no"]
    assert report.issue25_targets(tmp_path / "nothing") == []


def test_plan_case_says_whether_the_replayed_plan_fits():
    assert solvers._stages_fit({"simulation": {"fits_memory": True}}) is True
    assert solvers._stages_fit({"simulation": {"fits_memory": False}}) is False
    assert solvers._stages_fit({"status": "infeasible"}) is None


@pytest.mark.slow
def test_targets_quick_runs_plan_export_and_the_framework_check(tmp_path):
    """benchmarks.targets --quick on one small case and target: every field of the row, the table, the splice."""
    from benchmarks import targets

    (tmp_path / "REPORT.md").write_text("# report\n\nintro\n\n## 1. Solver time scaling\n\nbody\n")
    rows = targets.main(["--quick", "--targets", "deepspeed", "--time-limit", "20", "--out", str(tmp_path)])
    assert len(rows) == 1
    r = rows[0]
    assert (r["model"], r["cluster"], r["nodes"], r["global_batch"], r["target"]) == (*targets.QUICK_CASES[0], "deepspeed")
    assert r["status"] in ("optimal", "feasible") and r["iteration_ms"] > 0 and r["schedule"] == "1f1b"
    assert r["baseline_method"] and r["baseline_ms"] >= r["iteration_ms"] * (1 - 1e-9)
    assert r["speedup"] == pytest.approx(r["baseline_ms"] / r["iteration_ms"])
    assert r["memory"] == {"zero0": "deepspeed-bf16", "zero1": "deepspeed-zero1"}  # DeepSpeed's bytes per parameter
    assert r["export"] == "ok" and r["export_reasons"] == []
    assert r["check"] == "ok" and "DeepSpeedConfig" in r["check_detail"], r["check_detail"]
    assert r["plan_wall_s"] > 0 and r["export_wall_s"] > 0 and r["check_wall_s"] > 0
    doc = json.loads((tmp_path / "targets.json").read_text())
    assert doc["rows"] == rows and doc["meta"]["seconds"] > 0
    assert "| pi0 | 1 x dgx-h100, 64 | deepspeed |" in (tmp_path / "targets.md").read_text()
    report_text = (tmp_path / "REPORT.md").read_text()
    assert report_text.index("## Targets (issue 27)") < report_text.index("## 1. Solver time scaling")
    assert "intro" in report_text and "body" in report_text


def test_a_failed_target_case_is_a_row_saying_why(tmp_path):
    from benchmarks import targets

    row = targets.run_case(("no-such-model", "dgx-h100", 1, 64), "megatron", 5, tmp_path)
    assert row["status"] == "error" and "no-such-model" in row["message"]
    assert row["export"] == "not run" and row["check"] == "not run" and row["plan_wall_s"] > 0
    text = targets.to_markdown([row], {"command": "x", "date": "d", "commit": None, "time_limit": 5, "seconds": 1.0,
                                       "machine": "m"})
    assert "| no-such-model | 1 x dgx-h100, 64 | megatron | error: " in text and "0 of 1 rows planned" in text


def test_targets_section_is_spliced_once_and_kept_by_a_full_report(tmp_path):
    from benchmarks import targets

    (tmp_path / "targets.md").write_text("# Title\n\ntable v1\n")
    (tmp_path / "REPORT.md").write_text("# report\n\n## Targets (issue 28)\n\nx\n\n## 1. Solver time scaling\n\nhand-written\n")
    targets.splice_report(tmp_path)
    (tmp_path / "targets.md").write_text("# Title\n\ntable v2\n")
    text = targets.splice_report(tmp_path).read_text()
    assert text.count(targets.BEGIN) == 1 and "table v2" in text and "table v1" not in text
    assert text.index("## Targets (issue 28)") < text.index("table v2") < text.index("## 1.") and "hand-written" in text
    assert "table v2" in report.write_report(tmp_path, quick=True).read_text()


def test_each_target_of_a_dotted_model_name_has_its_own_files(tmp_path):
    """llava-1.5-7b's three targets once shared one file (a suffix cut at the model's dot): each check read another's export."""
    from benchmarks import targets

    files = {f for t in targets.TARGETS for f in targets.job_files(("llava-1.5-7b", "dgx-h100", 4, 1024), t, tmp_path)}
    assert len(files) == 2 * len(targets.TARGETS) and all(f.parent == tmp_path for f in files)


def test_targets_subset_keeps_the_other_targets_rows(tmp_path, monkeypatch):
    """Re-measuring one target of one case keeps every other row (a subset run once dropped the other targets)."""
    from benchmarks import targets

    case = targets.CASES[0]
    other = targets.CASES[1]

    def fake(c, target, time_limit, work):
        return {**targets._empty(c, target), "status": "feasible", "message": f"run {target}"}

    monkeypatch.setattr(targets, "run_case", fake)
    monkeypatch.setattr(targets, "run_checks", lambda rows, work: None)
    monkeypatch.setattr(targets, "splice_report", lambda out: None)
    old = [{**targets._empty(c, t), "status": "optimal", "message": "old"} for c in (case, other) for t in targets.TARGETS]
    (tmp_path / "targets.json").write_text(json.dumps({"meta": {"seconds": 1.0, "command": "x"}, "rows": old}))
    rows = targets.main(["--cases", case[0], "--targets", "deepspeed", "--out", str(tmp_path)])
    by = {(r["model"], r["cluster"], r["target"]): r["message"] for r in rows}
    assert by[(case[0], case[1], "deepspeed")] == "run deepspeed"
    assert by[(case[0], case[1], "megatron")] == "old" and by[(other[0], other[1], "torchtitan")] == "old"
    assert len(rows) == 6


def test_interleaved_rows_state_the_best_plan_with_ep_forced():
    """A row keeps the plan's "why not EP?" answer (its axes_not_chosen entry) and the table prints it."""
    from benchmarks import interleaved

    doc = {"status": "feasible", "schedule": {"schedule": "interleaved", "virtual_stages": 2}, "microbatches": 256,
           "plan": {"stages": [{"dp": 2, "tp": 1}] * 4}, "simulation": {"makespan_ms": 1200.0},
           "axes_not_chosen": [{"axis": "ep", "status": "feasible", "value": 1315.8, "kept_value": 1228.7,
                                "layouts": ["dp2tp1/zero1", "dp2tp1ep2/zero1+dp2tp1ep2/zero3"], "message": "cut"}],
           "targets": {"megatron": {"status": "feasible", "iteration_ms": 1300.0, "cut": True,
                                    "plan": {"virtual_stages": 2}},
                       "deepspeed": {"status": "refused", "iteration_ms": None}}}
    row = {"case": "c", **interleaved._fields(doc)}
    assert row["ep"] == [1] and row["ep_forced"]["ep"] == [2] and row["ep_forced"]["value"] == 1315.8
    row["recipe"] = {"label": "PP2 VP12 EP8", "iteration_ms": 1636.7, "fits": True}
    line = interleaved.to_markdown([row], {"machine": "m", "date": "d", "commit": "c"}).splitlines()[-1]
    assert "ep 2: 1,315.8 (1,228.7), +7.1%, feasible" in line and "PP2 VP12 EP8: 1,636.7 |" in line
    assert line.endswith("| megatron: v2 1,300.0 (cut); deepspeed: refused |")
    assert interleaved._fields({"status": "infeasible"})["ep_forced"] is None
