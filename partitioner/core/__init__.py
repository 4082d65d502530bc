"""Foundations every other package stands on; nothing here imports the rest of ``partitioner``.

Modules
-------
documents: Reading JSON and YAML safely (bounded size, strict values, no duplicate keys).
limits: The accepted ranges and resource limits, in one place.
units: Human-readable quantities for messages and tables.
lazy: Heavy third-party modules imported on first use.
deadline: One time limit shared by a command's steps and solves.
stdio: Silencing standard output while a native library prints.
"""
from __future__ import annotations

__all__: list[str] = []
