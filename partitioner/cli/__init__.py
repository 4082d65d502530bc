"""The ``partitioner`` command line.

Exit codes (DESIGN.md): 0 -- a plan; 1 -- no plan (infeasible, or the method
found none); 2 -- bad input (the message on stderr names the file and field);
3 -- an internal error; 130 -- interrupted (Ctrl-C). Nothing here is imported
by the library.

Layout: :mod:`.common` holds the Typer app, the consoles, the exit codes and
the input checks; the ``commands_*`` modules register the commands (in the
order ``--help`` lists them); :mod:`.render` prints what they computed;
:mod:`.exits` has the exit codes and answers an interrupt. Importing this package loads none of
them: :func:`main` does, so that an interrupt while they load is answered
like one during a command (one line, exit 130), never with a traceback;
``app`` loads them on first use (PEP 562 ``__getattr__``).
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .exits import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NO_PLAN,
    EXIT_OK,
    caused_by_interrupt,
    exit_interrupted,
    ignore_interrupts,
    interrupts_are_never_ignored,
)

if TYPE_CHECKING:
    import typer

__all__ = ["app", "main"]


def _load_app() -> "typer.Typer":
    """The Typer app with every command registered."""
    # the import order is the order of the commands in --help
    # isort: off
    from . import commands_problem, commands_presets, commands_estimate, commands_batch, commands_setup  # noqa: F401  (registers the commands, in this order)
    # isort: on
    from .common import app

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _say(text: str) -> None:
    """One line on stderr (line breaks in ``text`` become spaces)."""
    try:
        sys.stderr.write(" ".join(text.replace("\r", " ").split("\n")) + "\n")
    except (OSError, ValueError):  # stderr closed: the exit code says it
        pass


def main() -> None:
    """Console-script entry point: never a traceback for the user.

    Bad input and no-plan exits are the commands' own (:mod:`.common`); an
    option Typer cannot parse (``--nodes x``, a missing or unknown option) is
    one line naming it and exit 2, like every other bad input; ``partitioner``
    alone shows the help as Typer does (exit 2); an interrupt anywhere --
    while the commands load, while Typer parses, during a command -- is
    ``interrupted`` and exit 130; any other exception is a bug: one line and
    exit 3.
    """
    interrupts_are_never_ignored()
    try:
        app = _load_app()
        if len(sys.argv) < 2:  # no command: Typer's own help screen (no_args_is_help)
            app()
        import typer

        try:
            code = app(standalone_mode=False)  # usage errors are raised here, not printed as a usage box
        except typer.TyperException as e:  # Typer's usage errors (their public base since 0.29)
            _say(f"error: {e.format_message()} (see --help)")
            code = e.exit_code
        except typer.Abort:  # end of input at a prompt: Typer's own answer, on one line
            _say("aborted")
            code = EXIT_NO_PLAN
        ignore_interrupts()  # the outcome is decided: a late Ctrl-C must not end the shutdown by the signal
    except SystemExit as e:
        if e.code == EXIT_INTERRUPTED:  # Typer's own answer to an interrupt outside a command says nothing
            exit_interrupted()
        ignore_interrupts()
        raise
    except KeyboardInterrupt:
        exit_interrupted()
    except Exception as e:
        if caused_by_interrupt(e):  # an interrupt Python wrapped (e.g. while a class was built)
            exit_interrupted()
        _say(f"internal error: {type(e).__name__}: {e} (please report it with the input files)")  # a bug: exit 3
        sys.exit(EXIT_INTERNAL)
    if code == EXIT_INTERRUPTED:  # Typer turns an interrupt in a command into exit 130 without a word
        exit_interrupted()
    sys.exit(code if isinstance(code, int) else EXIT_OK)
