"""Exports of format-v3 plans read cp, ep and etp from the plan's configs (tests/export/test_knobs.py checks
the flags they become); the colocated cp example runs two layouts on one stage, which no framework
expresses, and the reason names the cp layout (exit 1) instead of exporting a plan without it."""
from __future__ import annotations

from pathlib import Path

import pytest

from partitioner import load_problem, solve
from partitioner.export import export_result
from partitioner.problem import Problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("target", ["megatron", "torchtitan", "deepspeed"])
def test_the_colocated_cp_plan_is_not_expressible_and_says_its_cp(target):
    p = load_problem(ROOT / "examples" / "v3_cp_colocated.json")
    out = export_result(solve(p, "brute"), target, p)
    assert not out.expressible
    assert any("dp 2 x tp 1 x cp 4" in reason for reason in out.reasons), out.reasons


def test_a_v3_plan_without_cp_or_ep_exports_as_before():
    p = load_problem(ROOT / "examples" / "colocated_1node.json")
    doc = p.to_dict()
    doc["version"] = 3
    v3 = Problem.from_dict(doc)
    a, b = export_result(solve(p, "brute"), "megatron", p), export_result(solve(v3, "brute"), "megatron", v3)
    assert a.to_dict() == b.to_dict()


def test_cli_export_exits_1(cli, tmp_path):
    example = ROOT / "examples" / "v3_cp_colocated.json"
    result = tmp_path / "r.json"
    result.write_text(cli("solve", example, "--method", "brute", "--json").stdout)
    proc = cli("export", result, "--to", "megatron", "--problem", example)
    assert proc.returncode == 1
    assert "dp 2 x tp 1 x cp 4" in proc.stdout + proc.stderr
