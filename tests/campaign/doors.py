"""What every door of the standing campaign (issue 35) checks, on top of ``tests/cli/test_hostile_input.py``'s helpers.

A campaign case gives one hostile input to one door -- a command of the CLI
or a function of the API -- and holds the door to its contract: exit 1 or 2
(``ProblemError``/``SolverError`` from the API) with one line on stderr
naming the file and the field or the reason; never a traceback, an internal
error (exit 3), a hang past the time limit or a wrong ``optimal``.
:func:`run_cli` and :func:`assert_input_error` are the hostile-input tests'
own; :func:`assert_refused` is their check for a door that may also answer
"no plan" (exit 1); :func:`assert_clean` for a run that may succeed.
"""
from __future__ import annotations

from benchmarks.synthetic import tied_v3_document
from tests.cli.test_hostile_input import assert_input_error, run_cli, strict_json, toy_doc, write

__all__ = ["run_cli", "assert_input_error", "assert_refused", "assert_clean", "strict_json", "toy_doc", "write", "v3_document"]


def assert_clean(code: int, err: str) -> None:
    """No traceback, no internal error: the exit is one of the CLI's own (0, 1, 2)."""
    assert "Traceback" not in err and "internal error" not in err, err[-3000:]
    assert code in (0, 1, 2), (code, err[-3000:])


def assert_refused(code: int, err: str, *words: str, codes: tuple[int, ...] = (1, 2)) -> None:
    """Exit 1 or 2 (``codes``) with exactly one non-empty line on stderr holding ``words``."""
    assert_clean(code, err)
    assert code in codes, (code, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{err}"
    for word in words:
        assert word in lines[0], (word, lines[0])



def v3_document(layers: int, *, seed: int = 0, nodes: int = 1, gpus: int = 8) -> dict:
    """A seeded format-v3 problem document (cp and ep keys, the last layer tied to the first) on ``nodes`` x
    ``gpus`` GPUs: :func:`benchmarks.synthetic.tied_v3_document`."""
    return tied_v3_document(layers, nodes, gpus, seed=seed)
