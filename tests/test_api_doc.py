"""docs/api.md is a doctest: every ``>>>`` line runs and prints what the page shows."""
from __future__ import annotations

import doctest

from tests.conftest import ROOT


def test_the_api_page_runs_as_it_reads():
    failures, tried = doctest.testfile(str(ROOT / "docs" / "api.md"), module_relative=False,
                                       optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert tried >= 10, "the page lost its examples"
    assert failures == 0, f"{failures} of {tried} examples print something else (run the test with -s to see them)"
