"""The cold-start tier: ``.ci/cold_start.py`` on this checkout -- a solve and a plan on an empty numba cache
under a time limit, then ``warmup`` (see the script's docstring for every check)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.cold_start
@pytest.mark.slow
def test_the_first_run_on_an_empty_cache_keeps_its_promises():
    proc = subprocess.run([sys.executable, str(ROOT / ".ci" / "cold_start.py"), "--source", str(ROOT)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "cold-start: ok"
