"""Shared fixtures: paths and a CLI runner that uses this checkout's package."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# the framework tier's checks live in benchmarks/ (benchmarks.targets runs them too): rewrite their asserts
pytest.register_assert_rewrite("benchmarks.framework_checks")

# Hypothesis profiles (HYPOTHESIS_PROFILE=fast|ci|thorough; ci is the default and what .ci/run uses).
# A test states its example budget relative to the profile's max_examples (strategies.examples), so
# one switch scales every property test: ci runs each test's full budget, fast a tenth, thorough 5x.
settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True)
settings.register_profile("fast", max_examples=10, deadline=None, print_blob=True)
settings.register_profile("thorough", max_examples=500, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``python -m partitioner ARGS`` with this checkout first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "partitioner", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        env=env,
        timeout=timeout,
    )


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def examples() -> Path:
    return EXAMPLES
