"""The tooling pyproject.toml configures: ruff (lint and import order) and mypy (types) pass on the checkout.

Each tool runs as ``python -m <tool>`` with this interpreter from the
checkout's root, so it reads ``[tool.ruff]`` and ``[tool.mypy]`` there. A
tool that is not installed skips its test (the ``dev`` extra installs both).
The ``*_flags_*`` tests give each tool a file with a known fault under the
same configuration and expect it to be reported: a clean run is the tool's
verdict, not a tool that checked nothing.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
RUFF_PATHS = ("partitioner", "tests", "benchmarks")


def _tool(module: str) -> list[str]:
    """The command that runs ``module`` with this interpreter; skips the test when it is not installed."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]' installs it)")
    return [sys.executable, "-m", module]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)


def _report(found: subprocess.CompletedProcess) -> str:
    return f"exit {found.returncode}\n{found.stdout}\n{found.stderr}"


def test_ruff_is_clean() -> None:
    found = _run(_tool("ruff") + ["check", *RUFF_PATHS])
    assert found.returncode == 0, _report(found)


def test_ruff_flags_an_unused_import_and_import_order(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport json\n\nprint(json.dumps(1))\n")
    found = _run(_tool("ruff") + ["check", "--config", str(PYPROJECT), "--no-cache", str(bad)])
    assert found.returncode == 1, _report(found)
    assert "F401" in found.stdout and "I001" in found.stdout, _report(found)


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    found = _run(_tool("mypy"))  # files and options from [tool.mypy]
    assert found.returncode == 0, _report(found)
    assert "Success: no issues found" in found.stdout, _report(found)


def test_mypy_flags_a_type_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def half(x: int) -> int:\n    return x / 2\n")
    found = _run(_tool("mypy") + ["--config-file", str(PYPROJECT), "--no-incremental", str(bad)])
    assert found.returncode == 1, _report(found)
    assert "[return-value]" in found.stdout, _report(found)
