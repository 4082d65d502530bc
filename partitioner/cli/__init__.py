"""The ``partitioner`` command line.

Exit codes (DESIGN.md): 0 -- a plan; 1 -- no plan (infeasible, or the method
found none); 2 -- bad input (the message on stderr names the file and field);
3 -- an internal error. Nothing here is imported by the library.

Layout: :mod:`.common` holds the Typer app, the consoles, the exit codes and
the input checks; the ``commands_*`` modules register the commands (in the
order ``--help`` lists them); :mod:`.render` prints what they computed.
"""
from __future__ import annotations

import sys

# the import order is the order of the commands in --help
# isort: off
from . import commands_problem, commands_presets, commands_estimate, commands_batch, commands_setup  # noqa: F401  (registers the commands, in this order)
# isort: on
from .common import EXIT_INTERNAL, app, say

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: never a traceback for the user."""
    try:
        app()
    except SystemExit:
        raise
    except Exception as e:  # a bug: say so briefly, exit 3
        say(f"internal error: {type(e).__name__}: {e} (please report it with the input files)")
        sys.exit(EXIT_INTERNAL)
