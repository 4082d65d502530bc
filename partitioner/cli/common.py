"""What every command shares: the Typer app, the two consoles, the exit codes and the input checks.

Exit codes (DESIGN.md): 0 -- a plan; 1 -- no plan (infeasible, or the method
found none); 2 -- bad input (the message on stderr names the file and field);
3 -- an internal error (a bug); 130 -- interrupted (:mod:`.exits`). :func:`guarded` turns the library's input
errors (:class:`~partitioner.problem.ProblemError`,
:class:`~partitioner.solvers.SolverError`) into exit code 2 with one line on
stderr, so bad input never yields a traceback; an :class:`OSError` (a file
that cannot be written, a full disk) and a :class:`MemoryError` are also
exit 2, with one line naming the file or saying what ran out. One error is
one line: :func:`say` never wraps a message, however long.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import threading
import time
from typing import Any, Callable, List, Optional

import typer
from rich.console import Console

from ..core import progress
from ..problem import ProblemError
from ..solvers import SolverError
from .exits import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_NO_PLAN, EXIT_OK, report_interrupt

__all__ = [
    "app", "out", "err", "EXIT_OK", "EXIT_NO_PLAN", "EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_INTERRUPTED",
    "guarded", "parse_options", "option_pairs", "check_choice", "working", "say", "one_line", "stdout_to_stderr",
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
# Messages on stderr are never wrapped (one error, one line), whatever the console width.
err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True, width=None if sys.stderr.isatty() else 150)



def one_line(message: Any) -> str:
    """``message`` on one line: line breaks inside it become spaces."""
    return " ".join(str(message).split("\n")).replace("\r", " ")


def say(message: Any) -> None:
    """Print one line on stderr, unwrapped and without markup."""
    err.print(one_line(message), markup=False, soft_wrap=True)


def guarded(fn: Callable) -> Callable:
    """Turn input and environment errors into exit code 2 with one line on stderr."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except (ProblemError, SolverError) as e:
            say(f"error: {e}")
            raise typer.Exit(EXIT_BAD_INPUT)
        except OSError as e:  # the environment: an unwritable path, a full disk
            where = f"{e.filename}: " if e.filename else ""
            say(f"error: {where}{e.strerror or e}")
            raise typer.Exit(EXIT_BAD_INPUT)
        except MemoryError:
            say("error: out of memory (see the resource limits in docs/limits.md)")
            raise typer.Exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            report_interrupt()
            raise typer.Exit(EXIT_INTERRUPTED)

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


def option_pairs(pairs: Optional[List[str]]) -> dict[str, str]:
    """``-o key=value`` pairs as text, for a method's options record to parse
    (:func:`~partitioner.solvers.base.method_options_from_text`); a key given twice is bad input."""
    options: dict[str, str] = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SolverError(f"--option expects key=value, got {pair!r}")
        key, raw = pair.split("=", 1)
        if key in options:
            raise SolverError(f"--option {key} given twice")
        options[key] = raw
    return options


def check_choice(value: Optional[str], choices: tuple[str, ...], flag: str) -> None:
    """Reject a value of ``flag`` outside ``choices`` (bad input: exit 2)."""
    if value is not None and value not in choices:
        raise SolverError(f"{flag}: must be one of {', '.join(choices)}, got {value!r}")


@contextlib.contextmanager
def stdout_to_stderr():
    """Send everything written to file descriptor 1 (by this process, its libraries and the
    processes it starts, e.g. Ray's) to stderr while the block runs, so that stdout holds
    only what the command prints after it (``--json``: pure JSON)."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout at all: nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        yield
    finally:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved, 1)
        os.close(saved)


# Piped (no terminal), a call writes each phase it starts after QUIET_SECONDS, and its current phase every
# HEARTBEAT_SECONDS: quick commands (and their one-line errors) print nothing more.
QUIET_SECONDS = 2.0
HEARTBEAT_SECONDS = 10.0


@contextlib.contextmanager
def working(what: str):
    """Progress on stderr while a long call runs: on a terminal a spinner with the phase the library announces
    (:mod:`partitioner.core.progress`) and the seconds so far; piped, the line ``what: phase (20 s)`` for each phase
    begun after :data:`QUIET_SECONDS` and every :data:`HEARTBEAT_SECONDS`."""
    start = time.perf_counter()
    now = {"phase": ""}

    def line() -> str:
        doing = f": {now['phase']}" if now["phase"] else ""
        return f"{what}{doing} ({time.perf_counter() - start:.0f} s)"

    if err.is_terminal:
        with err.status(what + " ...") as status:
            def show(text: str) -> None:
                now["phase"] = text
                status.update(line())

            with progress.listening(show):
                yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            print(line(), file=sys.stderr, flush=True)

    def note(text: str) -> None:
        now["phase"] = text
        if time.perf_counter() - start >= QUIET_SECONDS:
            print(line(), file=sys.stderr, flush=True)

    thread = threading.Thread(target=beat, name="partitioner-progress", daemon=True)
    thread.start()
    try:
        with progress.listening(note):
            yield
    finally:
        stop.set()
        thread.join()
