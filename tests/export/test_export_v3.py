"""Exports of format-v3 plans: context and expert parallelism are not written yet, so such a plan is
declared not expressible (exit 1) rather than exported without its cp/ep, which would run another plan."""
from __future__ import annotations

from pathlib import Path

import pytest

from partitioner import load_problem, solve
from partitioner.export import export_result
from partitioner.problem import Problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("target", ["megatron", "torchtitan", "deepspeed"])
def test_a_plan_with_cp_is_not_expressible(target):
    p = load_problem(ROOT / "examples" / "v3_cp_colocated.json")
    out = export_result(solve(p, "brute"), target, p)
    assert not out.expressible
    assert out.reasons == ("stage 0 runs dp2tp1cp4: the exports do not write context or expert parallelism (format v3) yet",)


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
    assert "context or expert parallelism" in proc.stdout + proc.stderr
