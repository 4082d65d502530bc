"""Human-readable quantities for messages and tables."""
from __future__ import annotations

__all__ = ["format_bytes"]


def format_bytes(nbytes: float) -> str:
    """``1536`` -> ``'1.50 KiB'``; binary units, two decimals, plain bytes below 1 KiB."""
    value = float(nbytes)
    if abs(value) < 1024:
        return f"{int(value)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.2f} {unit}"
    raise AssertionError("unreachable")
