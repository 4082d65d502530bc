"""Progress on long commands: phases announced by the library, shown on stderr by ``working``."""
from __future__ import annotations

import time

from partitioner.cli import common
from partitioner.core import progress


def test_phases_reach_only_the_listeners_installed():
    heard: list[str] = []
    progress.phase("before")  # nobody listens: nothing happens
    with progress.listening(heard.append):
        progress.phase("screening")
        progress.phase("solving")
    progress.phase("after")
    assert heard == ["screening", "solving"]


def test_piped_a_long_call_writes_its_phase_to_stderr(monkeypatch, capsys):
    monkeypatch.setattr(common, "HEARTBEAT_SECONDS", 0.05)
    with common.working("planning toy"):
        progress.phase("solving m = 8 with dp (1 of 2 counts)")
        time.sleep(0.3)
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = [line for line in captured.err.splitlines() if line]
    assert lines and all(line.startswith("planning toy: ") for line in lines[1:]), lines
    assert "planning toy: solving m = 8 with dp (1 of 2 counts) (" in captured.err


def test_a_phase_after_the_quiet_seconds_is_written_at_once(monkeypatch, capsys):
    monkeypatch.setattr(common, "QUIET_SECONDS", 0.0)
    with common.working("planning toy"):
        progress.phase("proving the kept plan optimal with dp")
    assert capsys.readouterr().err.startswith("planning toy: proving the kept plan optimal with dp (")


def test_a_quick_call_prints_nothing(capsys):
    with common.working("planning toy"):
        progress.phase("screening")
    assert capsys.readouterr().err == ""


def test_plan_announces_its_phases():
    from partitioner.planning import plan_model

    heard: list[str] = []
    with progress.listening(heard.append):
        plan_model("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=16, microbatches=8, schedule="1f1b")
    assert any(h.startswith("building and screening m = 8") for h in heard), heard
    assert any(h.startswith("solving m = 8 with dp") for h in heard), heard
