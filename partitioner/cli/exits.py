"""The exit codes of every command, and what an interrupt (Ctrl-C, SIGINT) does: one line and exit 130.

Exit codes (DESIGN.md): 0 -- a plan; 1 -- no plan (infeasible, or the method
found none); 2 -- bad input; 3 -- an internal error (a bug); 130 -- interrupted.

:func:`report_interrupt` says ``interrupted`` on stderr once per
process, however many places see the same interrupt (a command's
:func:`~.common.guarded`, Typer's own handler, :func:`partitioner.cli.main`),
and ignores further interrupts while the process winds down (its worker
pools close, its files are flushed), so a second Ctrl-C cannot turn the exit
into a traceback. It imports nothing heavy: the entry points use it before
anything else is loaded. 130 is the shells' code for a process ended by
SIGINT (128 + 2).
"""
from __future__ import annotations

import os
import signal
import sys

__all__ = ["EXIT_OK", "EXIT_NO_PLAN", "EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "report_interrupt",
           "interrupts_are_never_ignored", "caused_by_interrupt", "ignore_interrupts", "exit_interrupted"]

EXIT_OK, EXIT_NO_PLAN, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process ended by Ctrl-C

_said = False


def ignore_interrupts() -> None:
    """Ignore SIGINT from now on: the command's outcome is decided and the process only winds down.

    A Ctrl-C that lands while the interpreter shuts down would otherwise end
    the process by the signal itself, with no word and no exit code of ours.
    """
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # pragma: no cover - not the main thread: nothing to install
        pass


def caused_by_interrupt(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised while handling or because of, a ``KeyboardInterrupt``.

    Python wraps some exceptions it sees in a hook (``__set_name__`` while a
    class is built, for one) in a ``RuntimeError``; an interrupt landing there
    is still an interrupt, not a bug.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def report_interrupt() -> None:
    """Say ``interrupted`` on stderr (once per process) and ignore later interrupts."""
    global _said
    ignore_interrupts()
    if _said:
        return
    _said = True
    try:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: the exit code says it
        pass


def exit_interrupted() -> None:
    """Say ``interrupted`` (:func:`report_interrupt`) and end the process with :data:`EXIT_INTERRUPTED` at once.

    Not ``sys.exit``: CPython 3.11 remembers an interrupt that passed through code it ran with ``PyRun_*``
    (some extension modules run Python code so while they import) even when ours caught it, and at a normal
    exit it then ends the process by SIGINT itself (exit -2 to the parent, not 130). Standard streams are
    flushed first; nothing else is cleaned up, as Ctrl-C asks.
    """
    report_interrupt()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or absent: the exit code says it
            pass
    os._exit(EXIT_INTERRUPTED)


def _unraisable(event: "sys.UnraisableHookArgs") -> None:
    """An interrupt Python would only print (it landed in a weakref callback or a finalizer, e.g. inside the
    import machinery) ends the command as any interrupt does; other unraisable errors are Python's to print."""
    if isinstance(event.exc_value, KeyboardInterrupt):
        exit_interrupted()
    sys.__unraisablehook__(event)


def interrupts_are_never_ignored() -> None:
    """Install :func:`_unraisable` as ``sys.unraisablehook`` (the command line's entry points call it first)."""
    sys.unraisablehook = _unraisable
