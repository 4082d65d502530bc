"""The campaign at ``export``'s door: a result edited, or given with another problem, is refused, naming the plan.

Issue 35: ``export --problem`` printed settings (exit 0) for results that
``evaluate`` refuses -- a segment's ``tp`` of 0, a plan given with another
model's problem. The export door now checks the plan against the problem it
is given (rules 1-5 of ``evaluate``; memory, rule 6, is the cost model's
estimate and stays ``evaluate``'s to report).
"""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from partitioner import load_problem, solve
from partitioner.frameworks.export import TARGETS, export_result
from partitioner.plan import PlanError, evaluate
from partitioner.problem import ProblemError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _result(name: str) -> tuple[dict, object]:
    problem = load_problem(EXAMPLES / name)
    result = solve(problem, "greedy")
    assert result.plan is not None, result.message
    return result.to_dict(), problem


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("segment", [0, 1])
def test_a_segment_with_tp_0_is_refused_at_the_door(target, segment):
    doc, problem = _result("colocated_1node.json")
    edited = copy.deepcopy(doc)
    edited["plan"]["stages"][0]["configs"][segment]["tp"] = 0
    with pytest.raises(PlanError):  # what evaluate says of it
        evaluate(problem, edited)
    with pytest.raises(ProblemError) as info:
        export_result(edited, target, problem)
    assert info.value.path == "plan" and "rule 5" in info.value.reason


@pytest.mark.parametrize("target", TARGETS)
def test_a_plan_given_with_another_problem_is_refused(target):
    doc, _ = _result("vla_toy_2x4.json")
    foreign = load_problem(EXAMPLES / "colocated_1node.json")
    with pytest.raises(ProblemError) as info:
        export_result(doc, target, foreign)
    assert info.value.path == "plan" and "rule" in info.value.reason


def test_the_unedited_result_still_exports():
    doc, problem = _result("colocated_1node.json")
    evaluate(problem, doc)  # valid
    assert any(export_result(doc, target, problem).expressible for target in TARGETS)


def test_the_command_refuses_it_in_one_line_exit_2(tmp_path, capsys, monkeypatch):
    import json

    from partitioner.cli import main
    from tests.campaign.doors import assert_refused

    doc, _ = _result("colocated_1node.json")
    doc["plan"]["stages"][0]["configs"][1]["tp"] = 0
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr("sys.argv", ["partitioner", "export", str(path), "--to", "megatron",
                                     "--problem", str(EXAMPLES / "colocated_1node.json")])
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_refused(info.value.code if isinstance(info.value.code, int) else 1, captured.err, "plan", "rule 5",
                   str(path), codes=(2,))
