"""The default run's per-target lines are ``plan --target T``'s answers (issue 33), and each is launchable.

Each case runs ``plan_model`` once with the default ``target="any"`` and once
per framework with ``target=T`` and the same options, and compares: a line
its time limit did not cut short has the target run's iteration time, plan
shape and status; a cut one says so. Every line's plan exports to its
framework (the framework's own rules accept it).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from partitioner import plan_model
from partitioner.core.deadline import Deadline
from partitioner.frameworks.export import export_result
from partitioner.planning.options import PlanOptions
from partitioner.planning.plan_model import _first_counts, _run_one, run_plan
from partitioner.planning.run import CostTables
from partitioner.planning.targets.rules import RULES
from partitioner.presets import Workload, load_model
from tests.conftest import run_cli

# small, fast cases: one m, one schedule, no simulation (the comparison is of the same function's answers)
DENSE = ("llava-1.5-7b", "dgx-h100", dict(nodes=1, global_batch=64, microbatches=8, schedule="1f1b", simulate=False))
VLA = ("pi0", "dgx-h100", dict(nodes=1, global_batch=64, microbatches=8, schedule="1f1b", simulate=False))
MOE = ("qwen3-vl-30b-a3b", "dgx-h100", dict(nodes=2, global_batch=256, microbatches=16, schedule="1f1b",
                                            simulate=False))
# a small MoE (DeepSeek-V3's architecture at small dimensions) over every microbatch count: nothing fits at m = 1
# and the fastest counts are not the smallest, so the target runs screen in another order than --target T's;
# without its multi-token prediction module, which DeepSpeed's pipeline cannot run (its line would say so)
SMALL_MOE = (load_model(str(Path(__file__).resolve().parents[2] / "fixtures" / "hf" / "deepseek-v3-small"),
                        Workload(mtp_layers=0)), "dgx-h100",
             dict(nodes=1, global_batch=2048, microbatches="auto", schedule="1f1b", simulate=False))


def _launchable(name: str, line) -> None:
    """The line has a plan, and the framework's own rules accept it."""
    assert line.result is not None and line.result.plan is not None, (name, line.message)
    exported = export_result(line.result, name, line.result.problem)
    assert exported.expressible, (name, exported.reasons)


def _check_lines_are_target_runs(model: str, cluster: str, kwargs: dict) -> None:
    default = plan_model(model, cluster, **kwargs)
    assert default.plan is not None and default.targets is not None
    assert list(default.targets) == list(RULES)
    for name, line in default.targets.items():
        alone = plan_model(model, cluster, target=name, **kwargs)
        assert line.result is not None, f"{name}: the line carries its run's result"
        if line.cut:  # the default budget stopped it: the line says so instead of contradicting --target
            assert line.note is not None and f"plan --target {name} with more time" in line.note
            continue
        assert line.status == alone.status, name
        assert line.iteration_ms == pytest.approx(alone.throughput.iteration_ms, rel=1e-9), name
        assert line.plan["stages"] == len(alone.plan.stages) and line.plan["microbatches"] == alone.microbatches
        assert line.result.plan.to_dict() == alone.plan.to_dict(), name
        assert line.result.microbatches_tried == alone.microbatches_tried, name  # every count screened alike
        _launchable(name, line)  # launchable: the framework's own rules accept the line's plan


def test_dense_vlm_lines_are_the_target_runs():
    _check_lines_are_target_runs(*DENSE)


def test_vla_lines_are_the_target_runs():
    _check_lines_are_target_runs(*VLA)


@pytest.mark.slow
def test_moe_lines_are_the_target_runs():
    _check_lines_are_target_runs(*MOE)


def test_small_moe_lines_are_the_target_runs():
    """The target runs screen the counts the search over every plan found fastest first: same answers."""
    model, cluster, kwargs = SMALL_MOE
    default = plan_model(model, cluster, per_target=False, **kwargs)
    order = _first_counts(default)
    assert order[0] == default.microbatches and list(order) != sorted(order)  # the premise: another order
    _check_lines_are_target_runs(model, cluster, kwargs)


def test_a_spent_limit_still_gives_every_target_a_launchable_plan():
    """Deterministic (a frozen clock past the command's limit): the search over every plan and each target's
    run build until their first count with a plan (FIRST_PLAN_GRACE_SECONDS, which never passes here), the
    target runs starting from the count the search kept; every line has a plan its framework runs."""
    model, cluster, kwargs = SMALL_MOE
    now = [0.0]
    clock = Deadline(1.0, clock=lambda: now[0])
    now[0] = 2.0  # passed before anything ran
    opts = PlanOptions(**kwargs)
    result = run_plan(model, cluster, opts, deadline=clock)
    assert result.plan is not None and result.targets is not None, result.message
    assert list(result.targets) == list(RULES)
    for name, line in result.targets.items():
        assert line.cut and "share of --time-limit" in (line.note or ""), name
        _launchable(name, line)
    # the premise: a target run with neither the grace nor the order has nothing to show at this limit
    spent = Deadline(0.0, clock=lambda: now[0])
    alone, cut = _run_one(model, cluster, replace(opts, target="torchtitan"), spent, CostTables())
    assert alone.plan is None and cut


def test_no_per_target_has_no_targets_section():
    model, cluster, kwargs = DENSE
    result = plan_model(model, cluster, per_target=False, **kwargs)
    assert result.targets is None and "targets" not in result.to_dict()


def test_a_time_limit_is_shared_and_a_cut_line_says_so():
    """With a limit too short for the targets, each line is cut short and says what --target T would do."""
    model, cluster, kwargs = DENSE
    result = plan_model(model, cluster, time_limit=0.01, **kwargs)
    if result.plan is None:
        pytest.skip("nothing fitted in the grace solve")  # the limit, not the code: no plan to report on
    for name, line in (result.targets or {}).items():
        assert line.seconds is not None and line.seconds <= 0.01
        if line.cut:
            assert "share of --time-limit" in (line.note or "") and f"--target {name}" in (line.note or "")


def test_the_cli_prints_one_line_per_target_and_writes_their_plans(tmp_path):
    folder = tmp_path / "plans"
    r = run_cli("plan", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "64",
                "--microbatches", "8", "--schedule", "1f1b", "--target-plans", str(folder))
    assert r.returncode == 0, r.stderr
    assert "each line is what plan --target T answers" in r.stdout
    for name in RULES:
        assert f"  {name}: " in r.stdout
        doc = json.loads((folder / f"{name}.json").read_text())
        assert doc["exports"][name]["expressible"], doc["exports"][name]
        e = run_cli("export", str(folder / f"{name}.json"), "--to", name)
        assert e.returncode == 0, e.stderr


def test_a_share_of_the_limit_names_the_commands_limit_and_the_share():
    from partitioner.core.deadline import Deadline

    d = Deadline(2.0, clock=lambda: 0.0, whole=4.0)
    assert d.message() == ""
    d.cut("dp solves not started", "m=8")
    assert d.message() == ("time limit of 4 s reached; cut short: dp solves not started: m=8 (the search over every "
                           "plan had 2 s of it, the frameworks' runs the rest)")


def test_a_target_run_that_found_nothing_by_its_deadline_still_gets_the_grace_solve():
    """As plan's own solves: one short solve after the deadline when nothing (not even a baseline) was found."""
    from partitioner.core.deadline import GRACE_SECONDS, Deadline
    from partitioner.costs import build_problem
    from partitioner.planning.options import PlanOptions
    from partitioner.planning.records import ScreenedCount
    from partitioner.planning.search.target_solve import solve_for_target
    from partitioner.planning.targets.rules import restrict

    rules = RULES["megatron"]
    problem = restrict(build_problem("pi0", "dgx-h100", nodes=1, global_batch=64, microbatches=8,
                                     options={"variants": ["zero1"]}), rules)
    entry = ScreenedCount(8, problem, problem)  # no baseline
    now = [0.0]
    spent = Deadline(1.0, clock=lambda: now[0])
    now[0] = 2.0  # passed
    solved = solve_for_target(entry, PlanOptions(nodes=1, global_batch=64), rules, spent)
    assert solved.has_plan, solved.result.message
    assert not spent.has_grace and any("grace" in c for c in spent.cuts)
    now[0] = 0.0
    again = Deadline(1.0, clock=lambda: now[0])
    now[0] = 2.0  # passed, and the run's grace already spent: nothing is solved
    again.grace()
    assert not solve_for_target(entry, PlanOptions(nodes=1, global_batch=64), rules, again).has_plan
    assert GRACE_SECONDS > 0


def test_the_cli_skips_the_per_target_runs_when_asked():
    r = run_cli("plan", "--model", "pi0", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "64",
                "--microbatches", "8", "--schedule", "1f1b", "--no-per-target", "--json")
    assert r.returncode == 0, r.stderr
    assert "targets" not in json.loads(r.stdout)
