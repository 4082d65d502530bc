"""A benchmark's own section of ``REPORT.md``, spliced in place between markers.

A benchmark that measures one part of the report alone (:mod:`benchmarks.targets`,
:mod:`benchmarks.interleaved`) writes its table to ``out/NAME.md`` and puts it
into ``out/REPORT.md`` between its ``BEGIN`` and ``END`` comment markers, so the
next run replaces it and the rest of the report stays as it was.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["section_lines", "splice_report"]


def section_lines(path: Path, heading: str, begin: str, end: str) -> list[str]:
    """The section of the table file ``path``: its title under ``heading``, between the markers; [] if absent."""
    if not path.exists():
        return []
    body = path.read_text().splitlines()
    title = body[0].lstrip("# ") if body else ""
    rest = body[1:]
    while rest and not rest[0].strip():
        rest = rest[1:]
    return ["", begin, f"## {heading}: {title}", "", *rest, end]


def splice_report(out: Path, section: list[str], begin: str, end: str) -> Path | None:
    """Put ``section`` into ``out/REPORT.md``: in place of the last one, else before section 1; the rest untouched."""
    report = out / "REPORT.md"
    if not report.exists() or not section:
        return None
    text = report.read_text().splitlines()
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end)
        start = a - 1 if a > 0 and text[a - 1] == "" else a
        text = text[:start] + section + text[b + 1:]
    else:
        at = next((i for i, line in enumerate(text) if line.startswith("## 1.")), len(text))
        while at > 0 and text[at - 1] == "":
            at -= 1
        text = text[:at] + section + text[at:]
    report.write_text("\n".join(text) + ("\n" if not text or text[-1] != "" else ""))
    return report
