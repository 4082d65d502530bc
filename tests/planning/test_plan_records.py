"""plan's typed records: PlanOptions, ModelPlan's fields, and the JSON they write (the result format unchanged)."""
from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import get_args

import pytest

from partitioner import plan_model
from partitioner.plan import STATUSES, Status
from partitioner.planning import ModelPlan, PlanOptions, run_plan
from partitioner.planning.assemble import NO_FIT, no_plan
from partitioner.planning.options import SCHEDULE_CHOICES, ScheduleChoice
from partitioner.planning.records import BaselineSummary, MicrobatchTrial, MissingBaseline, Throughput
from partitioner.planning.schedules.report import ScheduleReport
from partitioner.problem import OBJECTIVES, SCHEDULES, Objective, Schedule

CASE = dict(nodes=1, global_batch=32, microbatches=8, method="greedy")


@pytest.fixture(scope="module")
def planned() -> ModelPlan:
    return plan_model("seed-vla-8gpu", "dgx-h100", **CASE)


def _without_times(doc):
    return {k: v for k, v in doc.items() if k != "solve_seconds"}


def test_the_literal_types_are_the_tuples_the_checks_use():
    assert STATUSES == get_args(Status) == ("optimal", "feasible", "infeasible", "error")
    assert OBJECTIVES == get_args(Objective) and SCHEDULES == get_args(Schedule)
    assert SCHEDULE_CHOICES == get_args(ScheduleChoice) == ("auto", "1f1b", "zb-h1", "gpipe", "interleaved")


def test_plan_options_carry_every_keyword_of_plan_model():
    import inspect

    keywords = [p for p in inspect.signature(plan_model).parameters if p not in ("model", "cluster")]
    assert keywords == [f.name for f in fields(PlanOptions)]


def test_run_plan_with_plan_options_equals_plan_model_with_keywords(planned):
    direct = run_plan("seed-vla-8gpu", "dgx-h100", PlanOptions(**CASE))
    assert _without_times(direct.to_dict()) == _without_times(planned.to_dict())


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
