"""plan's typed records: PlanOptions, ModelPlan's fields, and the JSON they write (the result format unchanged)."""
from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import get_args

import pytest

from partitioner import plan_model
from partitioner.frameworks import RULES
from partitioner.plan import STATUSES, Status
from partitioner.planning import ModelPlan, PlanOptions, PlanRun, run_plan
from partitioner.planning.assemble import NO_FIT, no_plan
from partitioner.planning.options import SCHEDULE_CHOICES, ScheduleChoice
from partitioner.planning.records import BaselineSummary, MicrobatchTrial, MissingBaseline, StageKnobs, Throughput
from partitioner.planning.schedules.report import ScheduleReport
from partitioner.problem import OBJECTIVES, SCHEDULES, Objective, ProblemError, Schedule
from partitioner.simulate.engine import ReplaySummary

CASE = dict(nodes=1, global_batch=32, microbatches=8, method="greedy")


@pytest.fixture(scope="module")
def planned() -> ModelPlan:
    return plan_model("seed-vla-8gpu", "dgx-h100", **CASE)


# the fields that measure time: the solves' and, per target (issue 33), the share of the default budget
# each target's run had and the note that names it
_TIMES = ("solve_seconds", "seconds", "note")


def _without_times(doc):
    if isinstance(doc, dict):
        return {k: _without_times(v) for k, v in doc.items() if k not in _TIMES}
    if isinstance(doc, list):
        return [_without_times(v) for v in doc]
    return doc


def test_the_literal_types_are_the_tuples_the_checks_use():
    assert STATUSES == get_args(Status) == ("optimal", "feasible", "infeasible", "error")
    assert OBJECTIVES == get_args(Objective) and SCHEDULES == get_args(Schedule)
    assert SCHEDULE_CHOICES == get_args(ScheduleChoice) == ("auto", "1f1b", "zb-h1", "gpipe", "interleaved")


def test_plan_options_carry_every_keyword_of_plan_model():
    import inspect

    # model, cluster and workload say what is planned where; the other keywords are the plan options
    keywords = [p for p in inspect.signature(plan_model).parameters if p not in ("model", "cluster", "workload")]
    assert keywords == [f.name for f in fields(PlanOptions)]


def test_run_plan_with_plan_options_equals_plan_model_with_keywords(planned):
    direct = run_plan("seed-vla-8gpu", "dgx-h100", PlanOptions(**CASE))
    assert _without_times(direct.to_dict()) == _without_times(planned.to_dict())


BASE = dict(nodes=1, global_batch=32)


@pytest.mark.parametrize("field, value", [
    ("nodes", 0), ("nodes", 10**9), ("nodes", True), ("global_batch", -1), ("global_batch", 2.5),
    ("microbatches", 0), ("microbatches", "eight"), ("method", "nope"), ("objective", "latency"),
    ("time_limit", -1), ("time_limit", 0), ("time_limit", float("nan")), ("time_limit", float("inf")),
    ("time_limit", "5"), ("options", [1, 2]), ("seed", -1), ("seed", 1.5), ("simulate", "yes"),
    ("schedules", 1), ("auto_solves", 0), ("max_stages", 0), ("knob_solves", "some"), ("schedule", "1F1B"),
    ("virtual_stages", 1), ("target", "nemo"),
])
def test_plan_options_refuse_a_bad_value_naming_the_field(field, value):
    extra = {"schedule": "interleaved"} if field == "virtual_stages" else {}
    with pytest.raises(ProblemError) as err:
        PlanOptions(**{**BASE, **extra, field: value})
    assert err.value.path == field, str(err.value)


def test_plan_options_refuse_a_pinned_schedule_the_target_lacks_and_v_without_interleaved():
    with pytest.raises(ProblemError) as err:
        PlanOptions(**BASE, target="deepspeed", schedule="interleaved")
    assert err.value.path == "schedule" and "deepspeed does not run schedule interleaved" in err.value.reason
    with pytest.raises(ProblemError) as err:
        PlanOptions(**BASE, schedule="1f1b", virtual_stages=2)
    assert err.value.path == "virtual_stages"
    with pytest.raises(ProblemError) as err:
        replace(PlanOptions(**BASE), nodes=0)  # a copy is checked again
    assert err.value.path == "nodes"


def test_the_run_resolves_its_options_once():
    run = PlanRun.start(PlanOptions(**BASE, target="torchtitan", options={"zero1": True}))
    assert run.rules is RULES["torchtitan"]
    assert run.counts == (1, 2, 4, 8, 16, 32)
    assert {s for s, _ in run.schedule_keys} == {"1f1b", "gpipe", "interleaved"}
    assert run.costs.variants == ("none",) and run.memory.target == "torchtitan"
    assert run.deadline.seconds is None
    pinned = PlanRun.start(PlanOptions(**BASE, microbatches=8, schedule="interleaved", virtual_stages=3, time_limit=5))
    assert pinned.rules is None and pinned.counts == (8,) and pinned.schedule_keys == (("interleaved", 3),)
    assert pinned.deadline.seconds == 5
    with pytest.raises(ProblemError, match="options.nosuch"):
        PlanRun.start(PlanOptions(**BASE, options={"nosuch": 1}))


def test_the_steps_read_the_run_not_the_target():
    """The target is resolved in one place (:class:`PlanRun`); the steps after it never look it up again."""
    import partitioner.planning.plan_model as plan_model_module
    import partitioner.planning.search.knob_solve as knob_solve
    import partitioner.planning.search.screening as screening

    for module in (knob_solve, plan_model_module, screening):
        assert not hasattr(module, "rules_for"), module.__name__


def test_the_results_are_typed_fields_and_extra_is_their_json(planned):
    assert isinstance(planned.throughput, Throughput) and isinstance(planned.schedules, ScheduleReport)
    assert all(isinstance(t, MicrobatchTrial) for t in planned.microbatches_tried)
    assert isinstance(planned.baseline, (BaselineSummary, MissingBaseline))
    doc = planned.to_dict()
    assert doc["throughput"] == planned.throughput.to_dict() == planned.extra["throughput"]
    assert doc["schedules"] == planned.schedules.to_dict()
    assert doc["microbatches_tried"] == [t.to_dict() for t in planned.microbatches_tried]
    assert doc["microbatches"] == planned.microbatches == planned.problem.microbatches
    assert doc["schedule"] == {"schedule": planned.problem.training.schedule,
                               "virtual_stages": planned.problem.training.virtual_stages}
    if isinstance(planned.baseline, BaselineSummary):
        assert planned.speedup == pytest.approx(planned.baseline.iteration_ms / planned.throughput.iteration_ms)


def test_the_replay_and_the_knobs_are_typed_and_write_the_same_json(planned):
    assert isinstance(planned.simulation, ReplaySummary)
    assert planned.extra["simulation"] == planned.simulation.to_dict()
    assert planned.knobs and all(isinstance(k, StageKnobs) for k in planned.knobs)
    assert planned.to_dict()["knobs"] == [k.to_dict() for k in planned.knobs]
    assert [k.stage for k in planned.knobs] == list(range(len(planned.plan.stages)))


def test_the_json_keeps_the_result_format_order(planned):
    keys = list(planned.to_dict())
    assert keys[:9] == ["status", "method", "objective", "value", "bound", "gap", "solve_seconds", "message", "plan"]
    sections = [k for k in keys[9:] if k not in planned.method_extra]
    expected = ["simulation", "throughput", "baselines", "baseline", "speedup", "model", "cluster", "nodes",
                "global_batch", "microbatches", "microbatches_tried", "knobs", "export_hints", "schedule", "schedules",
                "targets", "memory"]  # issue 27: targets (plan --target any), then the weight count
    assert sections == [k for k in expected if k in sections] and set(expected) - set(sections) <= {"simulation"}


def test_replacing_a_field_rewrites_extra(planned):
    changed = replace(planned, speedup=123.0, schedules=None)
    assert changed.extra["speedup"] == 123.0 and "schedules" not in changed.extra
    assert planned.extra["speedup"] != 123.0  # the original is untouched


def test_an_infeasible_plan_writes_the_old_sections():
    trials = [MicrobatchTrial(4, None, True, None, None)]
    doc = no_plan("dp", "iteration", "no plan found: x", trials).to_dict()
    assert list(doc)[9:] == ["microbatches_tried", "baseline", "baselines"]
    assert doc["baseline"] == {"method": None, "value": None, "plan": None}
    assert doc["baselines"] == {name: {"value": None, "plan": None, "message": why} for name, why in NO_FIT.items()}
    assert doc["microbatches_tried"] == [{"microbatches": 4, "screen_ms": None, "solved": True, "value": None,
                                          "iteration_ms": None}]


def test_an_infeasible_count_reports_no_finite_times():
    r = plan_model("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=32, microbatches=1, schedule="interleaved")
    assert r.status == "infeasible" and r.throughput is None and r.schedules is not None
    assert all(t.iteration_ms is None or math.isfinite(t.iteration_ms) for t in r.microbatches_tried)
    assert list(r.to_dict())[9:] == ["microbatches_tried", "schedules"]
