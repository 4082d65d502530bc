"""Human-readable quantities for messages and tables."""
from __future__ import annotations

__all__ = ["format_bytes"]


def format_bytes(nbytes: float) -> str:
    """``1536`` -> ``'1,536 B'``, ``2**31`` -> ``'2.00 GiB'``: plain bytes below 1 MiB, else binary units."""
    value = float(nbytes)
    if abs(value) < 1024**2:
        return f"{int(value):,} B"
    value /= 1024
    for unit in ("MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.2f} {unit}"
    raise AssertionError("unreachable")
