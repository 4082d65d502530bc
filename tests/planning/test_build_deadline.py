"""``plan``'s problem builds under its deadline (issue 35): cut between layouts, never answered as infeasible.

A build stopped by the deadline leaves its count unscreened; a run with no
count built says the time limit came before any plan (status ``error``,
exit 1: as CP-SAT's UNKNOWN, never ``infeasible``); a count where nothing
fits does not end screening while the command has time left (its limit
plus :data:`~partitioner.core.deadline.FIRST_PLAN_GRACE_SECONDS`). No timed
assertion: the deadlines here are spent before the run starts, or unlimited.
"""
from __future__ import annotations

import json

import pytest

from partitioner.core.deadline import FIRST_PLAN_GRACE_SECONDS, Deadline
from partitioner.planning import PlanOptions, PlanRun
from partitioner.planning.plan_model import run_plan
from partitioner.planning.search.screening import Builders, screen_counts
from partitioner.presets import load_cluster, load_model

BEFORE_ANY_PLAN = "time limit reached before any plan was found"


SPENT = 1000.0  # seconds a spent deadline started before it was made: past it and past the first plan's grace


def _spent() -> Deadline:
    return Deadline(0.001, spent=SPENT)


def _run(model: str, nodes: int, batch: int, deadline: Deadline, **extra) -> tuple[Builders, PlanRun]:
    run = PlanRun.start(PlanOptions(nodes=nodes, global_batch=batch, simulate=False, per_target=False, **extra), deadline)
    return Builders(load_model(model), load_cluster("dgx-h100"), run), run


def test_a_spent_deadline_stops_the_first_build_and_screens_nothing():
    builders, run = _run("llava-1.5-7b", 1, 16, _spent())
    screened, skipped = screen_counts(builders, run.counts, run.costs, run.deadline)
    assert screened == [] and skipped == []
    assert any(c.startswith("problem building stopped at the time limit: building m=1: layer ") for c in run.deadline.cuts)
    assert not run.tables.problems  # nothing half-built kept


def test_a_run_whose_limit_passed_before_any_plan_says_so_and_is_not_infeasible():
    opts = PlanOptions(nodes=1, global_batch=16, simulate=False)
    result = run_plan("llava-1.5-7b", "dgx-h100", opts, _spent())
    assert result.plan is None
    assert result.status == "error"  # the limit, not a property of the problem
    assert BEFORE_ANY_PLAN in result.message and "infeasible" not in result.message


def test_the_cli_answers_a_limit_passed_before_any_plan_with_exit_1_and_no_traceback(capsys, monkeypatch):
    """``plan --time-limit`` counts from the process's start: a process that started long ago has no time left."""
    from partitioner.cli import main

    monkeypatch.setattr("partitioner.core.deadline.process_seconds", lambda: SPENT)
    monkeypatch.setattr("sys.argv", ["partitioner", "plan", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes",
                                     "1", "--global-batch", "16", "--time-limit", "1", "--json"])
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    assert info.value.code == 1, err
    assert "Traceback" not in err
    doc = json.loads(out)
    assert doc["status"] == "error" and doc["plan"] is None
    assert BEFORE_ANY_PLAN in doc["message"] and "infeasible" not in out


def test_screening_goes_past_a_count_where_nothing_fits_while_the_command_has_time():
    """deepseek-v3 on 32 x 8 H100 at batch 1024: nothing fits at m = 1 (one microbatch of 1,024 samples), the FSDP
    baseline does at m = 2. With the run's share spent and the command's time left, m = 2 is screened, m = 4 not."""
    builders, run = _run("deepseek-v3", 32, 1024, _spent())
    screened, _ = screen_counts(builders, [1, 2, 4], run.costs, run.deadline, first=Deadline(None))
    assert [e.m for e in screened] == [1, 2]
    assert not screened[0].bases and screened[0].screen == float("inf")
    assert screened[1].bases and screened[1].screen < float("inf")
    assert any("microbatch counts not screened: m = 4" in c for c in run.deadline.cuts)


def test_the_first_plan_grace_extends_the_command_limit_on_the_same_clock():
    d = Deadline(10.0, spent=9.0)
    longer = d.extended(FIRST_PLAN_GRACE_SECONDS)
    assert longer.seconds == 10.0 + FIRST_PLAN_GRACE_SECONDS
    assert longer.left() == pytest.approx(d.left() + FIRST_PLAN_GRACE_SECONDS, abs=0.5)
    assert Deadline(None).extended(3.0).left() == float("inf")
    longer.cut("x", "y")
    assert d.cuts == ()  # its own cuts
