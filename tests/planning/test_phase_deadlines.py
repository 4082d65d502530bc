"""Every long phase of ``plan`` draws from the one deadline and names what it cut (issue 35).

The Megatron-style baseline search (its floors, then its evaluations), the
FSDP baseline and a problem build's last check
stop once the deadline has passed and record the cut. No timed assertion:
the deadlines are spent before the call, or flip on a fake clock at a step
the test chooses.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

import partitioner.costs.build as build_module
import partitioner.planning.baselines as baselines_module
from partitioner.core.deadline import Deadline, TimeLimitReached
from partitioner.costs import ProblemBuilder
from partitioner.plan import evaluate
from partitioner.planning import fsdp_baseline, megatron_baselines
from partitioner.planning.baselines import StageSums
from partitioner.planning.reports.axes import forced_problem
from partitioner.presets import load_cluster, load_model
from tests.planning.test_baselines_5d import moe_problem

SPENT = 1000.0


def _spent() -> Deadline:
    return Deadline(0.001, spent=SPENT)


class _Switch:
    """A clock at 0 until :meth:`flip`, then far past any limit."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self) -> float:
        return 1e9 if self.on else 0.0

    def flip(self) -> None:
        self.on = True


def test_a_spent_deadline_stops_the_megatron_search_before_any_floor_and_names_the_cut():
    problem = moe_problem(nodes=2, stages={"min": 1, "max": 4})
    assert megatron_baselines(problem, "iteration")  # with time, the search has plans
    record = Deadline(None)
    found = megatron_baselines(problem, "iteration", sums=StageSums(), deadline=_spent(), record=record)
    assert found == []
    assert len(record.cuts) == 1
    cut = record.cuts[0]
    assert cut.startswith("baselines: megatron-uniform search stopped: m=") and " 0 of " in cut and "floored" in cut


def test_a_deadline_passing_among_the_evaluations_keeps_the_plans_evaluated_so_far(monkeypatch):
    problem = moe_problem(nodes=2, memory=64 * 2**30, stages={"min": 1, "max": 4})  # many layouts fit
    clock = _Switch()
    tried: list = []
    original = baselines_module._try

    def counted(problem, plan, objective):
        found = original(problem, plan, objective)
        tried.append(found)
        if found is not None:
            clock.flip()  # the deadline passes right after the first plan that fits
        return found

    monkeypatch.setattr(baselines_module, "_try", counted)
    deadline = Deadline(5.0, clock)
    found = megatron_baselines(problem, "iteration", keep=3, deadline=deadline)
    assert len(found) == 1 and found[0][0] == next(f for f in tried if f is not None)[0]
    assert any("layouts evaluated" in c for c in deadline.cuts)
    full = megatron_baselines(problem, "iteration", keep=3)
    assert len(full) > 1  # the cut did lose candidates: the test stops a search that had more to do


def test_a_spent_deadline_stops_the_fsdp_baseline_and_names_it():
    problem = moe_problem(zero3=True)
    assert fsdp_baseline(problem, "iteration") is not None
    deadline = _spent()
    assert fsdp_baseline(problem, "iteration", deadline) is None
    assert deadline.cuts == ("baselines: fsdp search stopped: m=" + str(problem.microbatches),)


def test_layers_sharing_a_costs_table_share_their_forced_table():
    """The forced problem of a built problem (layers of one signature share a table) filters each table once:
    on 1,024 GPUs the copy per layer took a CPU second, run even when the time limit has passed."""
    problem = moe_problem()
    assert problem.layers[2].costs is problem.layers[3].costs
    forced = forced_problem(problem, "ep")
    assert forced is not None
    assert forced.layers[2].costs is forced.layers[3].costs
    assert all(c.ep > 1 for c in forced.layers[2].costs) and len(forced.layers[2].costs) < len(problem.layers[2].costs)
    assert forced.layers[0].costs is problem.layers[0].costs  # no ep entry: the layer keeps all of its entries


def test_a_deadline_passing_after_the_tables_stops_the_build_before_it_checks_the_problem(monkeypatch):
    clock = _Switch()
    original = build_module.model_flops_per_sample

    def then_expire(layers):
        clock.flip()  # every table is built: the deadline passes before the document is read back
        return original(layers)

    monkeypatch.setattr(build_module, "model_flops_per_sample", then_expire)
    monkeypatch.setattr(build_module.Problem, "from_dict",
                        classmethod(lambda cls, doc: pytest.fail("the document was read back after the deadline")))
    builder = ProblemBuilder(load_model("llava-1.5-7b"), load_cluster("dgx-h100"), nodes=1)
    with pytest.raises(TimeLimitReached) as stopped:
        builder.build(16, 1, Deadline(5.0, clock))
    assert stopped.value.what == "building m=1: checking the problem"


def test_a_default_plan_run_is_bounded_and_keeps_its_default_budgets(monkeypatch):
    """run_plan without --time-limit: a deadline bounded at DEFAULT_PLAN_SECONDS, not limited (so the exact
    solve keeps its default budget); one already past the bound answers what it found, naming the default."""
    import sys

    from partitioner.planning import PlanOptions
    from partitioner.planning.plan_model import DEFAULT_PLAN_SECONDS, run_plan

    pm = sys.modules["partitioner.planning.plan_model"]
    seen = []
    original = pm._run_one

    def spy(model, cluster, opts, deadline=None, tables=None, first=None):
        seen.append(deadline)
        return original(model, cluster, opts, deadline, tables, first)

    monkeypatch.setattr(pm, "_run_one", spy)
    opts = PlanOptions(nodes=1, global_batch=16, simulate=False, per_target=False)
    past = Deadline(None, spent=DEFAULT_PLAN_SECONDS + 100.0)
    result = run_plan("llava-1.5-7b", "dgx-h100", opts, past)
    run = seen[0]
    assert run.backstop == DEFAULT_PLAN_SECONDS and not run.limited
    assert result.status in ("feasible", "error") and result.status != "infeasible"
    assert f"default time limit of {DEFAULT_PLAN_SECONDS:g} s reached" in result.message


def test_docs_state_the_default_bound():
    from pathlib import Path

    from partitioner.planning.plan_model import DEFAULT_PLAN_SECONDS

    docs = Path(__file__).resolve().parents[2] / "docs"
    assert f"default bound of {DEFAULT_PLAN_SECONDS:g} s" in (docs / "limits.md").read_text()
    assert f"bounded at {DEFAULT_PLAN_SECONDS:g} s" in (docs / "plan.md").read_text()


def test_the_fsdp_count_is_the_most_microbatches_every_gpu_shares():
    from partitioner.planning.search.screening import fsdp_count

    assert fsdp_count([1, 2, 4, 8, 16], 1024, 256) == 4  # 256 samples per microbatch: dp 256
    assert fsdp_count([1, 2, 4], 100, 64) == 1  # no microbatch of a multiple of 64 samples: the fewest
    assert fsdp_count([4, 8], 64, 8) == 8


def test_when_no_whole_problem_is_built_in_time_the_first_fsdp_plan_is_the_answer(monkeypatch):
    """The deadline passes right after the FSDP-only build and its screen: the answer is that plan, feasible,
    naming the cuts (the whole builds, the FSDP-only problem), never infeasible nor an error."""
    import partitioner.planning.search.screening as screening
    from partitioner.planning import PlanOptions
    from partitioner.planning.plan_model import run_plan

    clock = _Switch()
    original = screening._first_plan

    def then_expire(*args):
        found = original(*args)
        clock.flip()
        return found

    monkeypatch.setattr(screening, "_first_plan", then_expire)
    opts = PlanOptions(nodes=1, global_batch=16, simulate=False, per_target=False, time_limit=5.0)
    result = run_plan("llava-1.5-7b", "dgx-h100", opts, Deadline(5.0, clock))
    assert result.plan is not None and result.status == "feasible"
    assert "screening: the answer's problem holds FSDP's layouts only: m=2" in result.message
    assert "problem building stopped at the time limit" in result.message
    assert result.baseline is not None and result.baseline.method == "fsdp"
    problem = result.problem
    assert problem is not None and all(c.tp == 1 and c.dp * c.cp == 8 for layer in problem.layers for c in layer.costs)
    assert evaluate(problem, result.plan).value > 0


def test_without_a_user_limit_no_fsdp_only_problem_is_built(monkeypatch):
    import partitioner.planning.search.screening as screening
    from partitioner.planning import PlanOptions
    from partitioner.planning.plan_model import run_plan

    monkeypatch.setattr(screening.Builders, "build_fsdp", lambda *a: pytest.fail("an FSDP-only problem was built"))
    opts = PlanOptions(nodes=1, global_batch=16, microbatches=4, simulate=False, per_target=False, schedules=False)
    assert run_plan("llava-1.5-7b", "dgx-h100", opts).plan is not None


def test_in_the_first_plans_grace_greedy_runs_only_where_no_baseline_fits(monkeypatch):
    """The run's deadline has passed, its grace has not: a count with a baseline is not screened by greedy
    (the cut is named); the screen is the baseline's."""
    import partitioner.planning.search.screening as screening
    from partitioner.planning import PlanOptions, PlanRun
    from partitioner.planning.search.screening import Builders, _problems, _screen

    run = PlanRun.start(PlanOptions(nodes=1, global_batch=16, simulate=False, per_target=False), Deadline(None))
    builders = Builders(load_model("llava-1.5-7b"), load_cluster("dgx-h100"), run)
    problem, base = _problems(8, builders, run.costs)
    monkeypatch.setattr(screening, "_greedy_screen", lambda *a: pytest.fail("greedy ran past the run's deadline"))
    spent, grace = _spent(), Deadline(None)
    found = _screen(8, problem, base, builders.opts, True, spent, grace)
    assert found.bases and found.screen == min(b.iteration_ms for b in found.bases.values())
    assert spent.cuts == ("screening: greedy not run at: m=8",)


def test_without_a_limit_each_target_gets_its_default_budget_within_the_bound():
    import sys

    pm = sys.modules["partitioner.planning.plan_model"]
    clock = _Switch()
    fresh = Deadline(None, clock).with_backstop(pm.DEFAULT_PLAN_SECONDS)
    assert pm._target_seconds(fresh, 3) == max(pm.TARGET_MIN_SECONDS, pm.DEFAULT_RUN_SECONDS / 3)  # unchanged
    late = Deadline(None, clock, spent=pm.DEFAULT_PLAN_SECONDS - 6.0).with_backstop(pm.DEFAULT_PLAN_SECONDS)
    assert pm._target_seconds(late, 3) == 2.0  # what the bound leaves, shared
    clock.flip()
    assert pm._target_seconds(late, 3) == 1e-3  # spent: the target's one grace solve only


class _Manual:
    """A clock that stays where the test sets it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _first_plan_windows(monkeypatch, clock: _Manual, limit: float, now: float) -> list[float]:
    """The seconds each framework's run may build while it knows no plan (its ``first`` limit), when the
    per-target runs start at ``now`` on a command limited to ``limit`` seconds (no run does any work)."""
    import sys

    from partitioner.core.deadline import FIRST_PLAN_GRACE_SECONDS
    from partitioner.planning import PlanOptions

    pm = sys.modules["partitioner.planning.plan_model"]
    seen: list[float] = []

    def spy(model, cluster, opts, deadline=None, tables=None, first=None, order=(), screening=None):
        seen.append(first.left())
        raise pm.ProblemError("refused here: the test reads the limits only")

    monkeypatch.setattr(pm, "_run_one", spy)
    monkeypatch.setattr(pm, "refused_summary", lambda *a: None)
    command = Deadline(limit, clock)
    clock.now = now
    opts = PlanOptions(nodes=1, global_batch=16, simulate=False)
    searched = SimpleNamespace(microbatches_tried=(), microbatches=None)  # the search over every plan kept nothing
    pm._per_target(None, None, opts, searched, command, None, command.extended(FIRST_PLAN_GRACE_SECONDS))
    return seen


def test_framework_runs_after_the_command_limit_share_its_first_plan_grace(monkeypatch):
    """Runs that start past the command's limit may build until that limit plus FIRST_PLAN_GRACE_SECONDS,
    together: each had a grace of its own before, so three late runs could end 9 s past ``--time-limit``."""
    from partitioner.core.deadline import FIRST_PLAN_GRACE_SECONDS

    late = _first_plan_windows(monkeypatch, _Manual(), 10.0, 12.0)  # 2 s past the limit, 1 s of grace left
    assert late == [pytest.approx(FIRST_PLAN_GRACE_SECONDS - 2.0)] * 3
    spent = _first_plan_windows(monkeypatch, _Manual(), 10.0, 20.0)
    assert spent == [0.0] * 3


def test_framework_runs_in_time_keep_the_whole_grace_past_their_share(monkeypatch):
    from partitioner.core.deadline import FIRST_PLAN_GRACE_SECONDS

    windows = _first_plan_windows(monkeypatch, _Manual(), 30.0, 0.0)  # a still clock: each gets what is left / runs left
    assert windows == [pytest.approx(share + FIRST_PLAN_GRACE_SECONDS) for share in (10.0, 15.0, 30.0)]
