"""The one exception for bad input: a document, a field, what is wrong.

Every door of the package (problem, plan, sweep, preset and cluster files, the
API's dicts) raises :class:`ProblemError`; the CLI turns it into one line on
stderr and exit code 2. It lives here, below everything, because the document
reader (:mod:`.documents`) raises it too; :mod:`partitioner.problem` exports it.
"""
from __future__ import annotations

__all__ = ["ProblemError"]


class ProblemError(ValueError):
    """Input that does not follow its format (problem, plan, sweep, preset, cluster).

    The message reads ``SOURCE: FIELD.PATH: what is wrong``; ``source``,
    ``path`` and ``reason`` are also kept as attributes.
    """

    def __init__(self, reason: str, *, path: str = "", source: str | None = None):
        self.reason = reason
        self.path = path
        self.source = source
        parts = [p for p in (source, path) if p]
        super().__init__(": ".join(parts + [reason]))

    def with_source(self, source: str) -> "ProblemError":
        return ProblemError(self.reason, path=self.path, source=source)
