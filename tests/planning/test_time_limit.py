"""``plan --time-limit S`` bounds the whole command (issue 27), not each solve.

One :class:`~partitioner.core.deadline.Deadline` is started before any
work and threaded through screening, the knob solves and the schedule
choice: each solve gets what is left, and a run the deadline cut short
returns its best plan so far, ``feasible``, naming what was cut. The timing
assertions bound CPU seconds (``checks.cpu_seconds``: a loaded machine
stretches the wall clock, not the work), with generous margins: they fail
only when the limit is applied per solve or ignored. The wall-clock target
(S + 5 s) is a benchmark row.
"""
from __future__ import annotations

import json
import os
import time
from unittest.mock import patch

import pytest
import yaml

from checks import cpu_seconds
from partitioner.core.deadline import GRACE_SECONDS, Deadline
from partitioner.planning import plan_model
from partitioner.planning.search import knob_solve
from partitioner.problem import ProblemError
from tests.conftest import ROOT, run_cli

SLACK = 15.0  # CPU seconds beyond the limit: the command's imports, loading and its last steps
THREADS = os.cpu_count() or 1  # dp's levels run one thread per core: CPU seconds up to this many per second


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_deadline_gives_each_solve_what_is_left_and_names_the_cuts():
    clock = _Clock()
    d = Deadline(10.0, clock)
    assert d.solve_limit() == pytest.approx(10.0)
    assert d.solve_limit(cap=3.0) == pytest.approx(3.0)
    clock.now += 8.5
    assert d.solve_limit(cap=3.0) == pytest.approx(1.5)
    assert not d.expired() and d.message() == ""
    clock.now += 2.0
    assert d.expired() and d.solve_limit() == 0.0
    assert d.grace() == GRACE_SECONDS and d.grace() == 0.0  # once per run
    d.cut("dp solves not started", "m=8")
    d.cut("dp solves not started", "m=4")
    d.cut("dp solves not started", "m=8")
    assert d.cuts == ("dp solves not started: m=8, m=4",)
    assert d.message() == "time limit of 10 s reached; cut short: dp solves not started: m=8, m=4"
    unlimited = Deadline(None, clock)
    assert unlimited.solve_limit() is None and unlimited.solve_limit(cap=2.0) == 2.0 and not unlimited.expired()
    assert unlimited.grace() == 0.0


def test_a_bad_time_limit_fails_before_any_work():
    with pytest.raises(ProblemError) as err:
        plan_model("no-such-model", "dgx-h100", nodes=1, global_batch=8, time_limit=-1)
    assert err.value.path == "time_limit"


def test_solves_that_use_their_whole_limit_stay_within_the_command_limit():
    """A method that always runs to its limit (as an exact method on a hard problem does): the run ends near S.

    Per-solve limits would take S for every knob setting, count and
    schedule re-solve (many times S).
    """
    real = knob_solve.solve
    limits: list[float | None] = []

    def slow(*args, time_limit=None, **kwargs):
        limits.append(time_limit)
        result = real(*args, time_limit=time_limit, **kwargs)
        time.sleep(time_limit or 0.0)
        return result

    limit = 4.0
    began = cpu_seconds()
    with patch.object(knob_solve, "solve", side_effect=slow):
        result = plan_model("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=16, time_limit=limit)
    spent = cpu_seconds() - began + sum(x or 0.0 for x in limits)  # the run's CPU plus the solves' simulated time
    assert limits and all(x is not None and 0 < x <= limit for x in limits)
    assert sum(limits) <= limit + GRACE_SECONDS + 0.5
    assert spent < limit + SLACK, spent
    assert result.plan is not None and result.status == "feasible"
    assert "time limit of 4 s reached; cut short:" in result.message


def test_plan_cli_time_limit_bounds_the_command_on_a_large_preset():
    """qwen2-vl-72b on 16 nodes (about 15 s unlimited when idle): with 3 s it returns its best plan so far."""
    limit = 3
    began = cpu_seconds()
    proc = run_cli("plan", "--model", "qwen2-vl-72b", "--cluster", "dgx-h200", "--nodes", "16", "--global-batch", "1024",
                   "--time-limit", str(limit), "--json", timeout=600)
    cpu = cpu_seconds() - began  # the command's CPU (imports included), every thread of it
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["status"] == "feasible" and doc["plan"] is not None
    assert f"time limit of {limit} s reached; cut short:" in doc["message"]
    assert cpu < THREADS * (limit + SLACK), cpu


def _deep_llava(tmp_path):
    """LLaVA-1.5-7B with 1024 vision and 1024 language blocks (the largest accepted modules): 2 min unlimited."""
    doc = yaml.safe_load((ROOT / "models" / "llava-1.5-7b.yaml").read_text())
    doc["name"] = "llava-deep"
    doc["modules"][0].update(layers=1024, feature_layer=-1)
    doc["modules"][2]["layers"] = 1024
    path = tmp_path / "llava-deep.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_deep_model_plans_or_says_it_was_cut_short_within_the_limit(tmp_path):
    limit = 10
    began = cpu_seconds()
    proc = run_cli("plan", "--model", _deep_llava(tmp_path), "--cluster", "dgx-h100", "--nodes", "2", "--global-batch",
                   "64", "--time-limit", str(limit), "--json", timeout=600)
    cpu = cpu_seconds() - began
    assert cpu < THREADS * (limit + SLACK), cpu
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert f"time limit of {limit} s reached; cut short:" in doc["message"]
    assert doc["status"] == ("feasible" if doc["plan"] is not None else "error")


@pytest.mark.parametrize("timed_out", [False, True])
def test_a_solve_cut_short_is_what_the_method_says_not_a_guess(timed_out):
    """A solve that used its whole limit but finished (``timed_out`` False) is not recorded as cut short; one
    whose method says its limit stopped it is, whatever its duration."""
    from dataclasses import replace

    from partitioner.planning import PlanOptions, PlanRun
    from partitioner.planning.search.screening import Builders, screen_counts
    from partitioner.presets import load_cluster, load_model

    real = knob_solve.solve

    def stopped(*args, time_limit=None, **kwargs):
        result = real(*args, time_limit=time_limit, **kwargs)
        return replace(result, status="feasible", solve_seconds=0.0 if timed_out else 10 * (time_limit or 1.0),
                       timed_out=timed_out)

    run = PlanRun.start(PlanOptions(nodes=1, global_batch=16, microbatches=8, time_limit=600, simulate=False))
    builders = Builders(load_model("llava-1.5-7b"), load_cluster("dgx-h100"), run)
    (entry,), _ = screen_counts(builders, run.counts, run.costs, run.deadline)
    with patch.object(knob_solve, "solve", side_effect=stopped):
        knob_solve.solve_with_knobs(entry, run)
    cut = [c for c in run.deadline.cuts if "stopped at the time limit" in c]
    assert bool(cut) == timed_out, run.deadline.cuts
