"""What every command shares: the Typer app, the two consoles, the exit codes and the input checks.

Exit codes (DESIGN.md): 0 -- a plan; 1 -- no plan (infeasible, or the method
found none); 2 -- bad input (the message on stderr names the file and field);
3 -- an internal error (a bug). :func:`guarded` turns the library's input
errors (:class:`~partitioner.problem.ProblemError`,
:class:`~partitioner.solvers.SolverError`) into exit code 2 with one line on
stderr, so bad input never yields a traceback.
"""
from __future__ import annotations

import contextlib
import functools
import json
import sys
from typing import Any, Callable, List, Optional

import typer
from rich.console import Console

from ..problem import ProblemError
from ..solvers import SolverError

__all__ = [
    "app", "out", "err", "EXIT_OK", "EXIT_NO_PLAN", "EXIT_BAD_INPUT", "EXIT_INTERNAL",
    "guarded", "parse_options", "check_choice", "working",
]

app = typer.Typer(
    name="partitioner",
    help="Optimal pipeline and mesh parallelism plans for heterogeneous multimodal training.",
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)
# Wide enough for the stage table when piped (rich defaults to 80 columns off a terminal).
out = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 150)

EXIT_OK, EXIT_NO_PLAN, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


def guarded(fn: Callable) -> Callable:
    """Turn the library's input errors into exit code 2 with one line on stderr."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except (ProblemError, SolverError) as e:
            err.print(f"error: {e}", markup=False)
            raise typer.Exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            err.print("interrupted")
            raise typer.Exit(130)

    return wrapper


def parse_options(pairs: Optional[List[str]]) -> dict[str, Any]:
    """``--option key=value`` pairs; values are parsed as JSON when they can be."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SolverError(f"--option expects key=value, got {pair!r}")
        key, raw = pair.split("=", 1)
        try:
            options[key] = json.loads(raw)
        except json.JSONDecodeError:
            options[key] = raw
    return options


def check_choice(value: Optional[str], choices: tuple[str, ...], flag: str) -> None:
    """Reject a value of ``flag`` outside ``choices`` (bad input: exit 2)."""
    if value is not None and value not in choices:
        raise SolverError(f"{flag}: must be one of {', '.join(choices)}, got {value!r}")


@contextlib.contextmanager
def working(what: str):
    """A spinner on stderr while a long call runs (only on a terminal)."""
    if err.is_terminal:
        with err.status(what + " ..."):
            yield
    else:
        yield
