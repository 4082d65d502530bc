"""``Deadline``'s spent seconds and :func:`process_seconds`: ``plan --time-limit S`` counts the process's start-up."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from partitioner.core.deadline import Deadline, process_seconds

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_spent_seconds_count_against_the_limit():
    clock = Clock()
    d = Deadline(10.0, clock, spent=4.0)
    assert d.elapsed() == 4.0 and d.left() == 6.0
    clock.now += 6.0
    assert d.expired()
    assert Deadline(10.0, clock).left() == 10.0
    assert Deadline(None, clock, spent=50.0).left() == float("inf")


def test_process_seconds_is_the_age_of_the_process():
    code = "import time; time.sleep(0.6); from partitioner.core.deadline import process_seconds; print(process_seconds())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert 0.6 <= float(out.stdout) < 120
    assert 0.0 <= process_seconds()


def test_plan_counts_the_time_before_the_command_against_its_limit():
    """A process that spent 25 s before ``plan --time-limit 20`` started (slow imports on a busy machine) finds
    its limit already reached: the answer says so instead of spending 20 s more (this plan alone takes a few
    seconds, so without the process's start-up counted it would finish uncut)."""
    code = textwrap.dedent("""
        import runpy, sys, time
        time.sleep(25.0)
        sys.argv = ["partitioner", "plan", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1",
                    "--global-batch", "64", "--time-limit", "20", "--json"]
        runpy.run_module("partitioner", run_name="__main__", alter_sys=True)
        """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode in (0, 1), out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert "time limit of 20 s reached" in doc["message"], doc["message"]


def test_a_backstop_bounds_a_run_without_a_limit_and_says_it_was_the_default():
    clock = Clock()
    d = Deadline(None, clock, spent=2.0).with_backstop(300.0)
    assert not d.limited and d.bounded and d.backstop == 300.0
    assert d.left() == 298.0 and d.solve_limit(20.0) == 20.0 and d.solve_limit() == 298.0
    first = d.extended(3.0)
    clock.now += 298.0
    assert d.expired() and not first.expired() and first.left() == 3.0
    d.cut("screening: 2 of 12 microbatch counts not screened", "m = 1024, 2048")
    assert d.message() == ("default time limit of 300 s reached (no --time-limit was set); cut short: "
                           "screening: 2 of 12 microbatch counts not screened: m = 1024, 2048")
    assert d.grace() > 0  # a bounded run that found nothing may still try once


def test_a_user_limit_is_kept_and_no_limit_stays_unbounded():
    clock = Clock()
    limited = Deadline(10.0, clock)
    assert limited.with_backstop(300.0) is limited and limited.backstop is None
    free = Deadline(None, clock)
    assert not free.bounded and free.left() == float("inf") and free.solve_limit() is None
    assert Deadline(10.0, clock, backstop=300.0).backstop is None  # a limit is the bound

