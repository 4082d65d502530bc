"""Every module docstring of the package says what and where in at most 15 lines; the detail lives in docs/.

A module docstring is read from the source (``ast``), nothing is imported. Its
length is the number of lines from the summary to the last line of text (the
closing quotes' own line aside). A docstring that hands its detail to a docs
page names the page as ``docs/...md`` and the section as the module's dotted
name; both must exist.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "partitioner"
MAX_LINES = 15
POINTER = re.compile(r"``(docs/[\w/.-]+\.md)``, section ``([\w.]+)``")


def docstring_lines(source: str) -> int:
    """Lines of a module's docstring, from the summary to its last line of text (0 without one)."""
    doc = ast.get_docstring(ast.parse(source), clean=False)
    return len(doc.strip("\n").splitlines()) if doc else 0


def _module_docs() -> dict[str, str]:
    """Every module's docstring (empty when it has none), by path relative to the repository."""
    return {
        str(path.relative_to(ROOT)): ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_the_count_reads_the_docstring_only():
    assert docstring_lines('"""One line."""\nx = 1\n') == 1
    assert docstring_lines('"""Summary.\n\nMore.\n"""\n') == 3
    assert docstring_lines("x = 1\n") == 0
    long = '"""Summary.\n' + "".join(f"line {i}\n" for i in range(MAX_LINES)) + '"""\n'
    assert docstring_lines(long) == MAX_LINES + 1  # the check below would name this module


def test_every_module_docstring_is_at_most_15_lines():
    too_long = {path: n for path, doc in _module_docs().items() if (n := docstring_lines(f'"""{doc}"""')) > MAX_LINES}
    assert not too_long, f"module docstrings over {MAX_LINES} lines (move the detail to docs/): {too_long}"


def test_the_walk_sees_the_whole_package():
    docs = _module_docs()
    assert "partitioner/solvers/dp/solver.py" in docs and "partitioner/planning/search/exact.py" in docs
    assert all(docs[path] for path in ("partitioner/__init__.py", "partitioner/costs/__init__.py"))


@pytest.mark.parametrize("path", sorted(p for p, doc in _module_docs().items() if POINTER.search(doc)))
def test_a_docstring_names_a_docs_section_that_exists(path):
    for page, section in POINTER.findall(_module_docs()[path]):
        text = (ROOT / page).read_text() if (ROOT / page).is_file() else ""
        assert text, f"{path} names {page}, which does not exist"
        assert f"\n## {section}\n" in text, f"{path} names section {section} of {page}, which has none"
