"""What a long command is doing now: phases announced by the library, shown by the command line.

The planning steps call :func:`phase` as they start (``screening 12
microbatch counts``, ``solving m=64 with dp (2 of 3)``, ...). Nothing is shown
unless a listener is installed with :func:`listening`: the command line's
``working`` shows the phase beside its spinner on a terminal, and when the
output is piped writes it to stderr now and then (``partitioner.cli.common``).
The API stays silent.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

__all__ = ["phase", "listening"]

Listener = Callable[[str], None]
_LISTENERS: list[Listener] = []


def phase(text: str) -> None:
    """Announce that ``text`` (a short, present-tense phrase) starts now."""
    for listener in tuple(_LISTENERS):
        listener(text)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Call ``listener`` with every phase announced while the block runs."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)
