"""The README's two commands are the ones CI and users run."""
from __future__ import annotations

import re

from conftest import ROOT


def commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_readme_starts_with_the_two_commands():
    first, second = commands()[:2]
    assert "pip install" in first and "partitioner solve examples/" in first
    assert "pip install" in second and "pytest" in second


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert commands()[1] == ci[-1]
