"""Cell formats the tables share (numbers, seconds, a dash for nothing) and how a table
is printed (:func:`show`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table


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


#: wider than any table: to measure one without the console's width clamping it
_WIDEST = 100_000


def show(console: Console, table: Table) -> None:
    """Print ``table`` without cutting a number: text columns wrap, number columns
    (right-aligned) never do, and a table whose numbers cannot fit the console's width
    is printed wider than it rather than with numbers cut."""
    for column in table.columns:
        if column.justify == "right":
            column.no_wrap = True
        column.overflow = "fold"
    unbounded = console.options.update(width=_WIDEST, max_width=_WIDEST)
    needed = Measurement.get(console, unbounded, table).minimum
    if needed <= console.width:
        console.print(table)
        return
    wide = console.options.update(width=needed, max_width=needed)
    console.print(Segments(console.render(table, wide)), crop=False)
