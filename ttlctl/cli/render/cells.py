"""Cell formats the tables share (numbers, seconds, a dash for nothing) and how a table
is printed (:func:`show`)."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segments
from rich.table import Column, Table
from rich.text import Text


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


def show(console: Console, table: Table) -> None:
    """Print ``table`` in the console's width without cutting a number: a number column
    (right-aligned) is at least as wide as its widest cell, so its header may wrap but no
    number does; text wraps between words. Width goes first to each column's longest word,
    then to keeping each row's cells on one line, then to the headers. A table whose
    numbers and words cannot fit the console's width is printed wider than it, each row on
    one line, rather than with anything cut."""
    levels = [_column_widths(table, column) for column in table.columns]
    chrome = _chrome(table)
    widths = _widths(levels, console.width - chrome)
    for column, width in zip(table.columns, widths, strict=True):
        column.width = width
        column.overflow = "fold"
    needed = sum(widths) + chrome
    if needed <= console.width:
        console.print(table)
        return
    wide = console.options.update(width=needed, max_width=needed)
    console.print(Segments(console.render(table, wide)), crop=False)


def _chrome(table: Table) -> int:
    """What the table adds to its cells' widths: the rules between and around the columns
    and each column's padding, as rich lays them out."""
    n = len(table.columns)
    rules = (n - 1 + (2 if table.show_edge else 0)) if table.box and n else 0
    _, right, _, left = table.padding
    if table.collapse_padding:
        left, right = 0, abs(left - right)
    pads = (left + right) * n
    if not table.pad_edge and n:
        pads -= left + right
    return rules + pads


def _column_widths(table: Table, column: Column) -> tuple[int, int, int]:
    """The column's narrowest width (its longest word; a number column: its widest cell;
    a column that must not wrap: its widest line), the width that keeps each of its cells
    on one line, and its natural width (its widest line, the header's included)."""
    header = [_plain(column.header)] if table.show_header else []
    cells = [_plain(cell) for cell in column.cells]

    def widest(texts: list[str]) -> int:
        return max((cell_len(line) for text in texts for line in text.splitlines()), default=0)

    high = widest(header + cells)
    if column.no_wrap:
        return high, high, high
    low = max((cell_len(word) for text in header + cells for word in text.split()), default=0)
    body = max(low, widest(cells))
    if column.justify == "right":
        low = body
    return low, body, max(body, high)


def _widths(levels: list[tuple[int, int, int]], room: int) -> list[int]:
    """Widths that fill ``room`` if they can, level by level: from each column's narrowest
    towards its one-line cells, then towards its natural width; within a level, what is
    left over goes to each column in proportion to what it lacks. When not even the
    narrowest fit, each row's cells on one line."""
    lows = [low for low, _, _ in levels]
    bodies = [body for _, body, _ in levels]
    if sum(lows) > room:
        return bodies  # wider than the console whatever it does: one line per row
    if sum(bodies) > room:
        return _shared(lows, bodies, room)
    highs = [high for _, _, high in levels]
    return highs if sum(highs) <= room else _shared(bodies, highs, room)


def _shared(widths: list[int], targets: list[int], room: int) -> list[int]:
    """``widths`` grown towards ``targets`` to fill ``room``: the spare width in proportion
    to what each lacks (the rounding's remainder to those that lack the most)."""
    spare = room - sum(widths)
    if spare <= 0:
        return widths
    lack = [target - width for width, target in zip(widths, targets, strict=True)]
    total = sum(lack)
    grown = [width + spare * gap // total for width, gap in zip(widths, lack, strict=True)]
    left = room - sum(grown)
    for i in sorted(range(len(grown)), key=lambda i: grown[i] - targets[i])[:left]:
        grown[i] += 1
    return grown


def _plain(cell: object) -> str:
    """A cell's text as printed (a string's markup taken out)."""
    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(cell).plain if isinstance(cell, str) else str(cell)
