"""Silencing the process's standard output while a native library prints to it (HiGHS's banner)."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from typing import Iterator

__all__ = ["quiet_stdout"]


@contextmanager
def quiet_stdout() -> Iterator[None]:
    """Silence file descriptor 1, C++ output included (stdout may carry ``--json`` output)."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
