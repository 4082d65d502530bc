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
