"""Cell formats the tables share: numbers, seconds, a dash for nothing."""

from __future__ import annotations

from typing import Any


def num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def secs(value: float | None) -> str:
    if value is None:
        return "—"
    if value == 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 100 else f"{value:,.0f} s"


def dash(value: Any, fmt: str) -> str:
    """``value`` in ``fmt``, or a dash when there is none."""
    return "—" if value is None else format(value, fmt)
