"""Format v3 on screen and on file: CLI tables, simulator labels, Gantt chart, trace, batch records, compare.

Where a config has cp, ep or etp other than 1 it is shown by its canonical
key's axes (``dp2tp1cp4``, ``dp2tp4cp2ep4``); v1 and v2 output is unchanged.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from partitioner import evaluate, load_problem, simulate, solve
from partitioner.batch.compare import compare, plan_layouts, to_markdown
from partitioner.plan import Plan, Stage
from partitioner.problem import Layout, Problem
from partitioner.simulate.breakdown import config_cell
from partitioner.simulate.viz import chrome_trace, save_gantt

ROOT = Path(__file__).resolve().parents[2]
COLOCATED = ROOT / "examples" / "v3_cp_colocated.json"


def _colocated():
    p = load_problem(COLOCATED)
    return p, solve(p, "brute").plan


def test_cli_solve_and_simulate_tables_name_cp(cli, tmp_path):
    proc = cli("solve", COLOCATED, "--method", "brute")
    assert proc.returncode == 0, proc.stderr
    assert "layout" in proc.stdout and "vision dp2tp1cp4" in proc.stdout and "llm dp2tp4" in proc.stdout
    result = tmp_path / "r.json"
    result.write_text(cli("solve", COLOCATED, "--method", "brute", "--json").stdout)
    proc = cli("simulate", COLOCATED, result)
    assert proc.returncode == 0, proc.stderr
    assert "vision dp2tp1cp4" in proc.stdout


def test_config_cell_spells_v3_configs_by_their_axes_and_keeps_v2():
    p, plan = _colocated()
    assert config_cell(p, evaluate(p, plan).stages[0]) == "vision dp2tp1cp4\nllm dp2tp4"
    doc = p.to_dict()
    doc["layers"] = [dict(layer, costs={"dp2tp4cp1ep4": layer["costs"]["dp2tp4"], "dp2tp2cp2ep4": layer["costs"]["dp2tp2cp2"]})
                     for layer in doc["layers"]]
    moe = Problem.from_dict(doc)
    ev = evaluate(moe, Plan((Stage.from_configs(0, 4, 8, [Layout.parse("dp2tp2cp2ep4"), Layout.parse("dp2tp4ep4")]),)))
    assert config_cell(moe, ev.stages[0]) == "vision dp2tp2cp2ep4\nllm dp2tp4ep4"
    lesson = load_problem(ROOT / "examples" / "colocated_1node.json")
    ev = evaluate(lesson, Plan((Stage.from_configs(0, 6, 8, [Layout(8, 1), Layout(2, 4)]),)))
    assert config_cell(lesson, ev.stages[0]) == "vision 8 x 1\nllm 2 x 4"


def test_simulator_labels_gantt_and_trace_name_cp(tmp_path):
    p, plan = _colocated()
    sim = simulate(p, plan)
    assert "vision dp2tp1cp4" in sim.stage_labels[0] and "llm dp2tp4" in sim.stage_labels[0]
    doc = json.loads(json.dumps(chrome_trace(sim)))
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] in ("segment", "reshard")}
    assert names == {"vision dp2tp1cp4", "reshard dp2tp1cp4 -> dp2tp4", "llm dp2tp4"}
    threads = [e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert "dp2tp1cp4" in threads[0]
    png = save_gantt(sim, tmp_path / "v3.png", "v3")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_layouts_shows_v3_axes_only():
    v3 = {"stages": [{"configs": [{"dp": 2, "tp": 1, "cp": 4}, {"dp": 2, "tp": 4}]}, {"dp": 4, "tp": 2, "ep": 8, "etp": 1}]}
    assert plan_layouts(v3) == "dp2tp1cp4+dp2tp4 | dp4tp2ep8"
    assert plan_layouts({"stages": [{"dp": 8, "tp": 1}, {"configs": [{"dp": 2, "tp": 4, "variant": "zero3"}]}]}) == ""
    assert plan_layouts(None) == "" and plan_layouts({"stages": "x"}) == ""


def test_batch_records_and_compare_show_cp(cli, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "problems": [str(COLOCATED), str(ROOT / "examples" / "v3_long_context_cp2.json")],
        "methods": ["dp", "brute", "greedy"], "time_limit": 60,
    }))
    out = tmp_path / "results.jsonl"
    proc = cli("batch", sweep, "--out", out, "--workers", "1")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert len(records) == 6
    for record in records:
        assert record["format_version"] == 3 and record["status"] in ("optimal", "feasible")
        assert any(c.get("cp") for s in record["plan"]["stages"] for c in s["configs"])
    comparison = compare(records)
    layouts = {row.problem.split("/")[-1]: row.best_layout for row in comparison.problems}
    assert layouts == {"v3_cp_colocated.json": "dp2tp1cp4+dp2tp4", "v3_long_context_cp2.json": "dp8tp1+dp1tp4cp2"}
    text = to_markdown(comparison)
    assert "best layouts" in text and "dp2tp1cp4+dp2tp4" in text
    proc = cli("compare", out)
    assert proc.returncode == 0, proc.stderr
    assert "best layouts" in proc.stdout and "dp1tp4cp2" in proc.stdout
